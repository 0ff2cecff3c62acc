"""Which Python code a spec or a model may name: an allow-list, set by the operator.

A spec may name Python predicates (``{python: 'module:function'}``) and a transition rule
(``valid_transitions.function``). A model file embeds its spec, so resolving those names
would let whoever wrote the file run code in the process that loads it. Nothing named in
data is imported unless the operator allowed its module:

* in code, ``allow_python=["mypkg.predicates"]`` (``PredicateSet``, ``Guard``, ``learn_model``),
  or callables given directly as ``python_predicates={name: function}``;
* for a process, the environment variable ``FOREWARN_PYTHON_PREDICATES="mypkg.predicates,other"``
  (the CLI and the server read it; the server also takes ``python_predicates`` in its config).

An entry allows that module and the modules under it. Allowed modules are imported only
from installed locations: the working directory (``''`` or ``'.'`` on ``sys.path``, or the
directory itself) is never searched unless the operator named it in ``PYTHONPATH``, and a
module there that shadows an installed one is refused. Refusals say why, before importing.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..errors import ForewarnError

__all__ = ["ENV_ALLOW", "CodeNotAllowed", "CodeNotFound", "allowed_modules", "parse_allow_list",
           "resolve_callable"]

ENV_ALLOW = "FOREWARN_PYTHON_PREDICATES"
# Functions this distribution ships and its own specs name: trusted like the rest of its code.
BUILTIN_REFERENCES = frozenset({"forewarn.domains.driving.spec:valid_transition",
                                "domains.driving.spec:valid_transition"})  # the pre-0.2 name
_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class CodeNotAllowed(ForewarnError):
    """A ``module:function`` reference the operator did not allow (or that resolves somewhere unsafe)."""


class CodeNotFound(ForewarnError):
    """An allowed ``module:function`` reference that does not import or is not a function."""


def parse_allow_list(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """Module names from ``"a.b, c"`` or an iterable; each must be a dotted Python name.

    Raises:
        CodeNotAllowed: an entry is not a module name (e.g. ``'*'`` or a path).
    """
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in (str(i).strip() for i in items):
        if not item:
            continue
        if not _MODULE.match(item):
            raise CodeNotAllowed(f"{item!r} is not a module name (write 'package.module'; no wildcards or paths)")
        out.append(item)
    return tuple(out)


def allowed_modules(explicit: Iterable[str] | None = None) -> tuple[str, ...]:
    """The allow-list: ``explicit`` when given, else ``$FOREWARN_PYTHON_PREDICATES``, else empty."""
    if explicit is not None:
        return parse_allow_list(explicit)
    return parse_allow_list(os.environ.get(ENV_ALLOW))


def _is_allowed(module: str, allowed: Iterable[str]) -> bool:
    return any(module == entry or module.startswith(entry + ".") for entry in allowed)


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
            # a bare folder of that name (a namespace portion, e.g. tests/domains) is no installed
            # package: an editable install's finder, later in meta_path, knows the real one
            namespace = namespace or found
            continue
        if found is not None:
            return found
    return namespace


def _check_location(module: str, reference: str) -> None:
    """Refuse a top-level package found only in (or shadowing an installed one from) the working directory."""
    top = module.partition(".")[0]
    installed = _installed_spec(top)
    if installed is None:
        raise CodeNotAllowed(f"{reference!r}: module {top!r} is not installed (the working directory is never "
                             "searched for code a spec names)")
    loaded = sys.modules.get(top)
    try:
        actual = getattr(loaded, "__spec__", None) if loaded is not None else importlib.util.find_spec(top)
    except (ImportError, ValueError) as exc:
        raise CodeNotAllowed(f"cannot import {reference!r}: {exc}") from exc
    where, expected = _origin(actual), _origin(installed)
    if where != expected:
        raise CodeNotAllowed(f"{reference!r}: module {top!r} would be imported from {where}, not from its installed "
                             f"location {expected} (a copy in the working directory, or one imported earlier from elsewhere, shadows it)")


def resolve_callable(reference: str, allow: Iterable[str] | None = None, *, what: str = "code") -> Callable[..., Any]:
    """Import ``'package.module:function'`` and return the function, if the allow-list permits it.

    Args:
        reference: ``module:attribute`` (the attribute may be dotted).
        allow: allowed module names; None reads ``$FOREWARN_PYTHON_PREDICATES``.
        what: what the reference is, for the message (``python predicate``, ``transition rule``).

    Raises:
        CodeNotAllowed: the module is not allowed, not installed, or shadowed; checked before importing.
        CodeNotFound: the module or attribute cannot be imported, or is not callable.
    """
    module_name, _, attribute = reference.partition(":")
    allowed = allowed_modules(allow)
    if not _MODULE.match(module_name) or not attribute:
        raise CodeNotAllowed(f"{reference!r} is not a 'module:function' reference")
    if not _is_allowed(module_name, allowed) and reference not in BUILTIN_REFERENCES:
        shown = ", ".join(allowed) if allowed else "none"
        raise CodeNotAllowed(f"{what} {reference!r} is not allowed: module {module_name!r} is not on the "
                             f"operator's allow-list (allowed: {shown}); a spec or model file may only name code "
                             f"the operator allowed with allow_python=, --allow-python or {ENV_ALLOW}")
    _check_location(module_name, reference)
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise CodeNotFound(f"cannot import {reference!r}: {exc}") from exc
    if not callable(target):
        raise CodeNotFound(f"{reference!r} is not callable")
    return target  # type: ignore[no-any-return]
