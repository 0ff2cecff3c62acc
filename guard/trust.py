"""Which Python code a spec or a model may name: functions the operator registered, by name.

A spec may name Python predicates (``{python: NAME}``) and a transition rule
(``valid_transitions.function: NAME``). A model file embeds its spec, and models arrive from
people who may not run code (an admin's upload, another replica's database row), so data
carries *names*, never import paths: a name is a key of a table that operator code filled,
and nothing named in data is imported, traversed or evaluated to find it. Two ways fill the
table, both chosen by whoever starts the process:

* the decorator, in code the process imports::

      import forewarn

      @forewarn.predicate("near_stove")
      def near_stove(state): ...

* an entry point in group ``forewarn.predicates`` of an installed distribution (its
  ``pyproject.toml``: ``[project.entry-points."forewarn.predicates"] near_stove =
  "mypkg.predicates:near_stove"``). The entry point's target is the package author's text in
  the installed metadata, loaded only when a spec names the entry point's name.

A name is found once or refused: a name two sources give different functions (two
distributions, or a distribution and the decorator) is ambiguous and refused. Names starting
with ``forewarn.`` are this distribution's own (the driving domain's transition rule). The
old ``module:function`` form gets a one-line message saying how to register instead.
Distributions are discovered only in installed locations: never in the working directory
unless the operator put it in ``PYTHONPATH``.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..errors import InputError

__all__ = ["ENTRY_POINT_GROUP", "NAME_PATTERN", "RETIRED_ALLOW_LIST", "CodeNotAllowed", "CodeNotFound", "check_name", "migration_hint",
           "predicate", "registered_callable", "registered_names"]

ENTRY_POINT_GROUP = "forewarn.predicates"
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*([.\-][A-Za-z0-9_]+)*$"
_NAME = re.compile(NAME_PATTERN)
_RESERVED = "forewarn."
# What the 0.1 allow-list of modules (--allow-python, FOREWARN_PYTHON_PREDICATES, the server's
# python_predicates) now says: it let a model reach any attribute of an allowed module's imports.
RETIRED_ALLOW_LIST = ("an allow-list of modules is no longer accepted (--allow-python, FOREWARN_PYTHON_PREDICATES, "
                      "python_predicates): a spec names registered predicates only; register each function as an "
                      "entry point in group 'forewarn.predicates' of an installed package (or with "
                      "@forewarn.predicate(NAME) in code) and write python: NAME (docs/spec.md, 'Python predicates')")
# Functions this distribution ships and its own specs name: (module below the package, attribute).
_BUILTIN: dict[str, tuple[str, str]] = {
    "forewarn.driving.valid_transition": ("domains.driving.spec", "valid_transition"),
}
_REGISTERED: dict[str, Callable[..., Any]] = {}  # filled by the decorator only
_F = TypeVar("_F", bound=Callable[..., Any])


class CodeNotAllowed(InputError):
    """A name no operator code registered, an import path, or a name registered twice."""


class CodeNotFound(InputError):
    """A registered entry point that does not load, or that is not a function."""


def migration_hint(reference: str, what: str = "python predicate") -> str:
    """The one line an old ``module:function`` reference gets: how to register it instead."""
    module, _, attribute = reference.partition(":")
    function = attribute.rpartition(".")[2] or "NAME"
    return (f"{what} {reference!r} is an import path, which a spec may no longer name: register the function "
            f"in code (@forewarn.predicate({function!r})) or as an entry point {function} = '{module}:{function}' "
            f"in group {ENTRY_POINT_GROUP!r} of an installed package, and write {function!r} instead "
            f"(docs/spec.md, 'Python predicates')")


def check_name(name: str, what: str = "python predicate") -> str:
    """``name`` if it is a registrable name; else a one-line ``ValueError`` (the spec's validators raise it).

    Raises:
        ValueError: an import path (with the migration hint), or not a name.
    """
    if ":" in name:
        raise ValueError(migration_hint(name, what))
    if not _NAME.match(name):
        raise ValueError(f"{what} {name!r} is not a registered name (letters, digits, '_', and '.' or '-' "
                         f"between them)")
    return name


def predicate(name: str) -> Callable[[_F], _F]:
    """Register the decorated function under ``name``, for specs that say ``python: NAME``.

    The function takes the step's state (a mapping) and returns a bool; a transition rule
    registered the same way takes ``(src, dst)`` tuples of bools. Registering a second,
    different function under a name is refused.

    Raises:
        CodeNotAllowed: ``name`` is not a name, is reserved (``forewarn.``), or is taken.
    """
    try:
        check_name(name)
    except ValueError as exc:
        raise CodeNotAllowed(str(exc)) from None
    if name.startswith(_RESERVED):
        raise CodeNotAllowed(f"python predicate name {name!r}: names starting with {_RESERVED!r} are Forewarn's own")

    def register(function: _F) -> _F:
        if not callable(function):
            raise CodeNotAllowed(f"@forewarn.predicate({name!r}) decorates {type(function).__name__}, not a function")
        known = _REGISTERED.get(name)
        if known is not None and _qualified(known) != _qualified(function):
            raise CodeNotAllowed(f"python predicate {name!r} is registered twice: {_qualified(known)} and "
                                 f"{_qualified(function)}")
        _REGISTERED[name] = function  # the same function again (a module reloaded): the newer object
        return function

    return register


def registered_names() -> list[str]:
    """Every name a spec may use now: the decorator's and the installed entry points' (not Forewarn's own)."""
    return sorted(set(_REGISTERED) | {e.name for e in _entry_points()})


def registered_callable(name: str, *, what: str = "python predicate") -> Callable[..., Any]:
    """The function registered under ``name`` (an exact key; nothing is imported on the name's say-so).

    Raises:
        CodeNotAllowed: an import path, a name nobody registered, or one registered twice.
        CodeNotFound: its entry point does not load, or gives no function.
    """
    try:
        check_name(name, what)
    except ValueError as exc:
        raise CodeNotAllowed(str(exc)) from None
    if name in _BUILTIN and what == "transition rule":
        module, attribute = _BUILTIN[name]
        return getattr(importlib.import_module(f"{__package__.rpartition('.')[0]}.{module}"), attribute)  # type: ignore[no-any-return]
    points = {(e.value, e.dist_name) for e in _entry_points() if e.name == name}
    values = {value for value, _ in points}
    function = _REGISTERED.get(name)
    if len(values) > 1:
        raise CodeNotAllowed(f"{what} {name!r} is registered by more than one installed package "
                             f"({', '.join(sorted(f'{dist}: {value}' for value, dist in points))}): refused as ambiguous")
    if function is not None:
        if values and values != {_qualified(function)}:
            raise CodeNotAllowed(f"{what} {name!r} is registered twice: by @forewarn.predicate ({_qualified(function)}) "
                                 f"and by an entry point ({values.pop()}): refused as ambiguous")
        return function
    if not values:
        known = registered_names()
        shown = ", ".join(known) if known else "none"
        raise CodeNotAllowed(f"{what} {name!r} is not registered (registered: {shown}); operator code registers "
                             f"functions with @forewarn.predicate(NAME) or entry points in group {ENTRY_POINT_GROUP!r}")
    entry = next(e for e in _entry_points() if e.name == name)
    _check_location(entry.point.module, name)
    try:
        target = entry.load()
    except Exception as exc:  # the package's own code failed to import: say whose
        raise CodeNotFound(f"{what} {name!r}: entry point {entry.value!r} does not load: "
                           f"{type(exc).__name__}: {exc}") from exc
    if not callable(target):
        raise CodeNotFound(f"{what} {name!r}: entry point {entry.value!r} is not a function")
    return target  # type: ignore[no-any-return]


def _qualified(function: Callable[..., Any]) -> str:
    return f"{getattr(function, '__module__', '?')}:{getattr(function, '__qualname__', '?')}"


class _EntryPoint:
    """An entry point of the group, with the distribution that declares it."""

    __slots__ = ("dist_name", "name", "point", "value")

    def __init__(self, point: importlib.metadata.EntryPoint, dist_name: str) -> None:
        self.point, self.name, self.value, self.dist_name = point, point.name, point.value, dist_name

    def load(self) -> Any:
        return self.point.load()


def _entry_points() -> list[_EntryPoint]:
    """The group's entry points of distributions installed on the trusted part of ``sys.path``."""
    found: list[_EntryPoint] = []
    seen: set[tuple[str, str, str]] = set()
    for dist in importlib.metadata.distributions(path=_trusted_path()):
        dist_name = str(dist.metadata["Name"] or "?")
        for point in dist.entry_points.select(group=ENTRY_POINT_GROUP):
            key = (dist_name, point.name, point.value)
            if key not in seen:  # one distribution reached through two path entries
                seen.add(key)
                found.append(_EntryPoint(point, dist_name))
    return found


def _origin(spec: importlib.machinery.ModuleSpec | None) -> str | None:
    if spec is None:
        return None
    if spec.origin not in (None, "built-in", "frozen"):
        return str(Path(str(spec.origin)).resolve())
    locations = list(spec.submodule_search_locations or [])
    return str(Path(locations[0]).resolve()) if locations else spec.origin


def _installed_spec(top: str) -> importlib.machinery.ModuleSpec | None:
    """Where the import system would find ``top`` if the working directory were not on the path."""
    namespace = None
    for finder in sys.meta_path:
        try:
            if finder is importlib.machinery.PathFinder:
                found = importlib.machinery.PathFinder.find_spec(top, _trusted_path())
            else:  # installed machinery: built-ins, frozen modules, editable installs
                find = getattr(finder, "find_spec", None)
                found = find(top, None) if find is not None else None
        except (ImportError, ValueError):
            found = None
        if found is not None and found.origin in (None, "namespace") and found.submodule_search_locations:
            # a bare folder of that name (a namespace portion) is no installed package: an
            # editable install's finder, later in meta_path, knows the real one
            namespace = namespace or found
            continue
        if found is not None:
            return found
    return namespace


def _check_location(module: str, name: str) -> None:
    """Refuse an entry point whose package a copy in the working directory would shadow (before importing)."""
    top = module.partition(".")[0]
    installed = _installed_spec(top)
    if installed is None:
        raise CodeNotAllowed(f"python predicate {name!r}: module {top!r} of its entry point is not installed "
                             "(the working directory is never searched for registered code)")
    loaded = sys.modules.get(top)
    try:
        actual = getattr(loaded, "__spec__", None) if loaded is not None else importlib.util.find_spec(top)
    except (ImportError, ValueError) as exc:
        raise CodeNotFound(f"python predicate {name!r}: cannot import {module!r}: {exc}") from exc
    where, expected = _origin(actual), _origin(installed)
    if where != expected:
        raise CodeNotAllowed(f"python predicate {name!r}: module {top!r} would be imported from {where}, not from "
                             f"its installed location {expected} (a copy in the working directory shadows it)")


def _trusted_path() -> list[str]:
    """``sys.path`` without the working directory, unless the operator put it in ``PYTHONPATH``."""
    cwd = Path.cwd().resolve()
    explicit = {str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    trusted = []
    for entry in sys.path:
        if entry in ("", "."):
            continue
        try:
            resolved = Path(entry).resolve()
        except (OSError, RuntimeError):
            continue
        if resolved == cwd and str(resolved) not in explicit:
            continue
        trusted.append(entry)
    return trusted
