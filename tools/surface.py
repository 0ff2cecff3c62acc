"""The public surface: which modules keep an ``__all__``, counted, and (``--apply``) the others' removed.

The rule (CONTRIBUTING.md, "The public surface"): a module's ``__all__`` says what users import from it, so only
the modules users import from have one:

* the modules the documentation names by their dotted name (``from forewarn.guard.client import Client``,
  ``::: forewarn.guard.runtime.Guard``, ``forewarn.guard.ingest.use_world``, in ``docs/`` and README.md; a name
  is read as the longest module it starts with), with ``forewarn``, ``forewarn.guard`` and ``forewarn.errors``;
* every package's ``__init__.py`` (the names a package gathers from its modules: strict mypy re-exports only
  what ``__all__`` lists).

Any other module has none: its names are the package's own business, and a reader finds what it offers in its
docstring. Where such a module passes on a name it imports (others import it from there), ``__all__`` lists
those names only, so that the re-export stays explicit.

    python tools/surface.py            # the figures and the modules that break the rule (exit 1 if any)
    python tools/surface.py --apply    # rewrite those modules (re-run after a merge adds modules)

``tests/test_public_surface.py`` fails while a module breaks the rule.
"""
from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_FOLDERS = ("guard", "monitors", "server", "domains")  # forewarn/<name> links to ./<name>
ALWAYS = frozenset({"forewarn", "forewarn.guard", "forewarn.errors"})
_DOTTED = re.compile(r"\bforewarn(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\bforewarn\b")


@dataclass(frozen=True)
class ModuleAll:
    """One module's ``__all__``: where it is written, what it lists, which of those the module imports."""

    name: str
    path: Path
    names: tuple[str, ...]
    imported: tuple[str, ...]  # listed names the module imports rather than defines (re-exports)
    start: int  # first and last line of the assignment, 1-based
    end: int
    after_imports: bool  # the statement before it is an import (isort then wants one blank line, not two)


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package by dotted name (the folders the ``forewarn/`` links point to)."""
    out = {("forewarn" if p.stem == "__init__" else f"forewarn.{p.stem}"): p
           for p in sorted((root / "forewarn").glob("*.py"))}
    for folder in PACKAGE_FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(("forewarn", *parts))] = path
    return out


def documented_modules(modules: dict[str, Path], root: Path = ROOT) -> set[str]:
    """The modules the documentation names by dotted name, each mention read as the longest module it starts
    with, and the three always public."""
    named = set(ALWAYS)
    pages = sorted((root / "docs").rglob("*.md")) + [root / "README.md"]
    for page in pages:
        if page.name == "changelog.md":  # history, not the surface
            continue
        for mention in _DOTTED.findall(page.read_text(encoding="utf-8")):
            parts = mention.split(".")
            while parts and ".".join(parts) not in modules:
                parts.pop()
            if parts:
                named.add(".".join(parts))
    return named


def read_all(name: str, path: Path) -> ModuleAll | None:
    """The module's top-level ``__all__ = [...]``, or None."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported.update((a.asname or a.name).split(".")[0] for a in node.names)
    for previous, node in zip([None, *tree.body], tree.body):
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                and isinstance(node.value, (ast.List, ast.Tuple))):
            names = tuple(e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
            return ModuleAll(name, path, names, tuple(n for n in names if n in imported), node.lineno,
                             node.end_lineno or node.lineno, isinstance(previous, (ast.Import, ast.ImportFrom)))
    return None


def breaking(root: Path = ROOT) -> tuple[list[ModuleAll], list[ModuleAll], set[str]]:
    """Every ``__all__``, those that break the rule, and the public modules."""
    modules = module_files(root)
    public = documented_modules(modules, root)
    found = [m for name, path in modules.items() if (m := read_all(name, path)) is not None]
    wrong = [m for m in found if m.name not in public and m.path.name != "__init__.py" and m.names != m.imported]
    return found, wrong, public


def rewrite(entry: ModuleAll) -> None:
    """Drop the module's ``__all__``, or keep only the names it re-exports."""
    lines = entry.path.read_text(encoding="utf-8").splitlines(keepends=True)
    before, after = lines[:entry.start - 1], lines[entry.end:]
    if entry.imported:
        listed = ", ".join(f'"{n}"' for n in entry.imported)
        middle = [f"__all__ = [{listed}]  # names other modules import through this one\n"]
    else:
        middle = []
        if entry.after_imports:  # isort's blank lines after the imports: two before a def or class, else one
            while before and not before[-1].strip():
                before = before[:-1]
            while after and not after[0].strip():
                after = after[1:]
            definition = bool(after) and after[0].lstrip().startswith(("def ", "class ", "async def ", "@"))
            middle = ["\n"] * (2 if definition else 1)
        elif before and after and not before[-1].strip() and not after[0].strip():
            after = after[1:]  # one blank line fewer, where the assignment stood between blank lines
    entry.path.write_text("".join(before + middle + after), encoding="utf-8")


def count(found: list[ModuleAll]) -> tuple[int, int]:
    return sum(len(m.names) for m in found), len(found)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--apply", action="store_true", help="rewrite the modules that break the rule")
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    found, wrong, public = breaking(args.root)
    names, modules = count(found)
    print(f"names in __all__ lists: {names:,} in {modules} modules; public modules (docs): {len(public)}; "
          f"modules breaking the rule: {len(wrong)}")
    if not args.apply:
        for entry in wrong:
            print(f"  {entry.path.relative_to(args.root)}:{entry.start}: __all__ of {len(entry.names)} names")
        return 1 if wrong else 0
    for entry in wrong:
        rewrite(entry)
    found, wrong, _ = breaking(args.root)
    names, modules = count(found)
    print(f"after: names in __all__ lists: {names:,} in {modules} modules; modules breaking the rule: {len(wrong)}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
