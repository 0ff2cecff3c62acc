"""The pre-0.2 import names ``guard``, ``monitors``, ``server`` and ``domains``, kept working.

Forewarn installs one top-level name, ``forewarn``; its parts are ``forewarn.guard``,
``forewarn.monitors``, ``forewarn.server`` and ``forewarn.domains``. Code written against the
old documented names (``from guard import Guard``) still runs: ``import guard`` gives the very
module object ``forewarn.guard`` (no second copy, so classes and ``isinstance`` agree).

The old names never take a name away from an application. The top-level alias is a finder at
the *end* of ``sys.meta_path``: an application's own ``guard`` package is found first and wins.
A submodule (``guard.spec``) is aliased only while ``sys.modules["guard"]`` is Forewarn's own
package. ``forewarn-aliases.pth`` installs the finder when Python starts; a source checkout,
whose folders are importable under their old names directly, redirects in each package's
``__init__`` instead (``redirect``).
"""
from __future__ import annotations

# forewarn-aliases.pth runs this at every interpreter start: import only what Python has loaded
# by then (importlib.abc and importlib.util would cost ~7 ms); the rest is imported on first use.
import importlib
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from importlib.abc import Loader as _Loader
    from importlib.machinery import ModuleSpec
    from types import CodeType, ModuleType
else:
    _Loader = object  # the loader protocol is duck-typed; the ABC is for the type checker only

__all__ = ["ALIASES", "install", "redirect"]

ALIASES = ("guard", "monitors", "server", "domains")


def _target(fullname: str) -> str | None:
    head = fullname.partition(".")[0]
    return f"forewarn.{fullname}" if head in ALIASES else None


class _AliasLoader(_Loader):
    """Loads an old name by importing the new one and handing back that same module."""

    def __init__(self, target: str, found: ModuleSpec) -> None:
        self.target = target
        self.found = found  # the new name's spec, as found before importing it
        self.real_spec: ModuleSpec | None = None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.target)
        self.real_spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the alias's spec on the shared module: put the real one back.
        module.__spec__ = self.real_spec
        module.__loader__ = self.real_spec.loader if self.real_spec is not None else None

    def get_code(self, fullname: str) -> CodeType | None:
        # ``python -m guard.cli`` (runpy) runs the real module's code as ``__main__``.
        get_code = getattr(self.found.loader, "get_code", None)
        return None if get_code is None else get_code(self.target)

    def is_package(self, fullname: str) -> bool:
        return self.found.submodule_search_locations is not None


def _alias_spec(fullname: str, target: str) -> ModuleSpec | None:
    import importlib.util  # here, not at start-up: only a name that is really aliased pays for it

    found = importlib.util.find_spec(target)
    if found is None:
        return None
    spec = importlib.util.spec_from_loader(fullname, _AliasLoader(target, found),
                                           is_package=found.submodule_search_locations is not None)
    if spec is not None:
        spec.origin = found.origin
    return spec


class _TopLevelFinder:
    """Last on ``sys.meta_path``: ``guard`` means Forewarn's only when nothing else is called that."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if "." in fullname or fullname not in ALIASES:
            return None
        return _alias_spec(fullname, f"forewarn.{fullname}")


class _SubmoduleFinder:
    """First on ``sys.meta_path``: ``guard.spec`` is ``forewarn.guard.spec`` once ``guard`` is ours."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        new = _target(fullname)
        if new is None or "." not in fullname:
            return None
        head = fullname.partition(".")[0]
        if sys.modules.get(head) is None or sys.modules.get(head) is not sys.modules.get(f"forewarn.{head}"):
            return None
        return _alias_spec(fullname, new)


_TOP = _TopLevelFinder()
_SUB = _SubmoduleFinder()


def install() -> None:
    """Put both finders on ``sys.meta_path`` (idempotent)."""
    if not any(isinstance(f, _SubmoduleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SUB)
    if not any(isinstance(f, _TopLevelFinder) for f in sys.meta_path):
        sys.meta_path.append(_TOP)


def redirect(name: str) -> None:
    """Called by ``guard/__init__.py`` & co. when a source checkout imports them by the old name.

    Replaces ``sys.modules[name]`` with the ``forewarn.`` package, so the old name and the new
    one are one module object and the folder's files are never executed twice.
    """
    install()
    sys.modules[name] = importlib.import_module(f"forewarn.{name}")
