"""Writing a command's output file: checked first, then written whole or not at all.

Every file Forewarn writes (models, bundles, specs, ingested traces, reports, exports) goes
through here, so that one set of rules holds everywhere:

* an output that is one of the command's inputs is refused before anything is read
  (``learn runs.jsonl -o runs.jsonl`` would replace the traces with the model);
* a missing parent folder is an error unless the caller asks for it to be made
  (``--mkdir``): a typo must not create ``/nonexistent/dir/`` at the root;
* a regular file (or a new path) is written through a temporary file beside it and
  renamed over it, so an interrupt or a crash leaves the old file or the new one, never
  half of one; a symbolic link is followed, and the file it names is replaced;
* anything else — ``/dev/null``, ``/dev/stdout``, a named pipe, a terminal — is opened and
  written in place. Renaming over ``/dev/null`` would replace the device with a regular
  file for every process on the machine.
"""
from __future__ import annotations

import os
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from ..errors import InputError

_STDOUT = {"/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"}


class OutputError(InputError):
    """An output path that cannot or must not be written."""


def is_special(path: Path) -> bool:
    """True for an existing path that is not a regular file once links are followed (a device, a pipe, a
    socket, a terminal), and for what lives under ``/dev`` and ``/proc``: written in place, never replaced."""
    resolved = os.path.realpath(path)
    if resolved.startswith(("/dev/", "/proc/")) or str(path).startswith(("/dev/", "/proc/")):
        return True
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_output(path: Path, *, inputs: Iterable[str | Path] = (), mkdir: bool = False,
                 option: str = "--output") -> None:
    """Refuse an output that would overwrite an input, is a folder, or lies in a missing folder.

    Args:
        inputs: the command's input files (an output in a folder given as input is allowed).
        mkdir: make the missing parent folders instead of refusing (``--mkdir``).

    Raises:
        OutputError: naming the option, the path and what to do.
    """
    if is_special(path):
        return
    for given in inputs:
        source = Path(given)
        if source.is_file() and _same(source, path):
            raise OutputError(f"{option} {path}: it is also an input ({given}); writing it would destroy the "
                              "input. Choose another output path")
    if path.is_dir():
        raise OutputError(f"{option} {path}: is a directory; give a file path")
    parent = path.parent
    if parent.is_dir():
        return
    if parent.exists():
        raise OutputError(f"{option} {path}: {parent} is not a directory")
    if not mkdir:
        raise OutputError(f"{option} {path}: the folder {parent} does not exist (create it, or pass --mkdir)")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{option} {path}: cannot create {parent}: {exc.strerror}") from exc


def _file_mode() -> int:
    """The mode ``open()`` gives a new file: 0666 less the process's umask.

    Read from /proc where it can be (setting the umask to read it is not thread-safe).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


@contextmanager
def open_output(path: str | Path) -> Iterator[IO[bytes]]:
    """A binary stream that becomes ``path`` when the block ends without an exception.

    A regular file (or a new path) is written to a temporary file beside it, flushed to disk
    and renamed over it; on any exception, an interrupt included, the temporary file is
    removed and ``path`` is left as it was. A device, pipe or terminal is written in place.

    Raises:
        OutputError: the path cannot be written (the operating system's reason).
    """
    target = Path(path)
    if str(target) in _STDOUT:  # Python's standard output, which the CLI keeps apart from Storm's descriptor 1
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    if is_special(target):
        try:
            stream = open(target, "wb")  # noqa: SIM115 - closed below, after the block
        except OSError as exc:
            raise OutputError(f"{target}: cannot write: {exc.strerror}") from exc
        with stream:
            yield stream
        return
    real = Path(os.path.realpath(target))  # a link keeps pointing where it did; its file is replaced
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
    except OSError as exc:
        raise OutputError(f"{target}: cannot write: {exc.strerror}") from exc
    try:
        with os.fdopen(fd, "wb") as stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, _file_mode())  # mkstemp makes 0600; an output is written like any other file
        os.replace(temporary, real)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise OutputError(f"{target}: cannot write: {exc.strerror}") from exc
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_output(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` (text as UTF-8) whole to ``path`` (see :func:`open_output`)."""
    with open_output(path) as stream:
        stream.write(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)
