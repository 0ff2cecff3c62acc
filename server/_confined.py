"""Opening a file inside a configured folder without following a symbolic link anywhere on the way.

Checking a resolved path and then opening it leaves a window: a directory on the path swapped
for a symbolic link in between makes the open land outside the folder. Here nothing is checked
and then reopened by name. The folder is opened once, and every component below it is opened
relative to the descriptor of the one before, with ``O_NOFOLLOW`` (and ``O_DIRECTORY`` for the
directories): a symbolic link at any component, present before or swapped in during the walk,
fails the open itself (``ELOOP``/``ENOTDIR``). ``..`` is refused outright, so the walk can only
go down. The folders themselves are the operator's configuration and may be links.
"""
from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path

from ..errors import ModelFileError

_NOFOLLOW = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_DIR = os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW
_FILE = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0)  # a FIFO must not block the open


def _outside(path: str, roots: Sequence[Path], why: str) -> ModelFileError:
    return ModelFileError(f"{path}: outside the configured model folders ({', '.join(map(str, roots))}): {why}")


def _below(path: str, roots: Sequence[Path]) -> tuple[Path, list[str]]:
    """The configured folder ``path`` names and the components below it (none may be ``..``)."""
    if "\0" in path:
        raise ModelFileError(f"{path!r}: not a usable path (a NUL byte)")
    given = Path(path)
    if not given.is_absolute():
        raise _outside(path, roots, "give an absolute path")
    parts = given.parts[1:]
    if ".." in parts:
        raise _outside(path, roots, "'..' is not accepted in a model path")
    clean = [p for p in parts if p not in ("", ".")]
    for root in roots:
        for prefix in {Path(os.path.abspath(root)), Path(os.path.realpath(root))}:
            head = prefix.parts[1:]
            if tuple(clean[:len(head)]) == head and len(clean) > len(head):
                return prefix, clean[len(head):]
    raise _outside(path, roots, "not below any of them")


def open_beneath(path: str, roots: Sequence[Path]) -> int:
    """A read-only descriptor of the regular file ``path``, opened beneath one of ``roots`` with no
    symbolic link followed below the folder. The caller closes it.

    Raises:
        ModelFileError: ``path`` is not below a folder, names ``..``, crosses a symbolic link, or
            cannot be opened (one line naming the path).
    """
    if not roots:
        raise ModelFileError("loading a model by path is disabled: no model_dirs are configured "
                             "(set model_dirs, or upload the model file as 'document')")
    root, components = _below(path, roots)
    try:
        current = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ModelFileError(f"{root}: the model folder cannot be opened: {exc.strerror}") from exc
    try:
        for index, component in enumerate(components):
            last = index == len(components) - 1
            try:
                opened = os.open(component, _FILE if last else _DIR, dir_fd=current)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise _outside(path, [root], f"{component!r} is a symbolic link or not a folder; "
                                                 "symbolic links are not followed") from exc
                raise ModelFileError(f"{path}: cannot read model file: {exc.strerror}") from exc
            os.close(current)
            current = opened
        result, current = current, -1
        return result
    finally:
        if current >= 0:
            os.close(current)
