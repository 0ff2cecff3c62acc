"""Everything is in pyproject.toml except one file setuptools has no key for.

``forewarn-aliases.pth`` goes to the top of site-packages so that the pre-0.2 import names
(``from guard import Guard``) keep working without installing a second top-level package:
see ``forewarn/_aliases.py``. A wheel gets it from ``build_py``; an editable install
(``pip install -e .``) from a wrapper around setuptools' editable strategy.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "forewarn-aliases.pth"
SOURCE = Path(__file__).with_name(PTH)


class BuildWithAliases(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(str(SOURCE), str(Path(self.build_lib) / PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


class _WithAliases:
    """Delegates to setuptools' editable strategy, then adds the .pth to the editable wheel."""

    def __init__(self, strategy: Any) -> None:
        self.strategy = strategy

    def __call__(self, wheel: Any, files: list[str], mapping: Any) -> None:
        self.strategy(wheel, files, mapping)
        wheel.writestr(PTH, SOURCE.read_bytes())

    def __enter__(self) -> _WithAliases:
        self.strategy.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.strategy.__exit__(*exc)


class EditableWithAliases(editable_wheel):
    def _select_strategy(self, *args: Any, **kwargs: Any) -> Any:
        return _WithAliases(super()._select_strategy(*args, **kwargs))


setup(cmdclass={"build_py": BuildWithAliases, "editable_wheel": EditableWithAliases})
