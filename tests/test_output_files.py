"""Output files: refused when they would destroy an input or land in a missing folder, written whole or not
at all, and a device, a pipe or a terminal written in place, never replaced by a regular file."""
from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from forewarn.guard.output_files import OutputError, check_output, is_special, open_output, write_output


def test_a_regular_file_is_replaced_whole_and_keeps_the_usual_mode(tmp_path: Path) -> None:
    target = tmp_path / "model.json"
    target.write_text("old")
    write_output(target, "new")
    assert target.read_text() == "new"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.json"]  # no temporary file left


@pytest.mark.parametrize("failure", [KeyboardInterrupt, RuntimeError])
def test_an_interrupt_leaves_the_old_file_and_no_temporary(tmp_path: Path, failure: type[BaseException]) -> None:
    target = tmp_path / "traces.jsonl"
    target.write_text("kept\n")
    with pytest.raises(failure), open_output(target) as stream:
        stream.write(b"half of a new")
        raise failure()
    assert target.read_text() == "kept\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traces.jsonl"]
    fresh = tmp_path / "never.jsonl"
    with pytest.raises(failure), open_output(fresh) as stream:
        raise failure()
    assert not fresh.exists()


def test_a_link_keeps_pointing_where_it_did(tmp_path: Path) -> None:
    real = tmp_path / "v3.json"
    real.write_text("v3")
    link = tmp_path / "current.json"
    link.symlink_to(real)
    write_output(link, "v4")
    assert link.is_symlink() and real.read_text() == "v4"


def test_a_pipe_is_written_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    write_output(fifo, b"through the pipe")
    reader.join(timeout=10)
    assert received == [b"through the pipe"]
    assert stat.S_ISFIFO(fifo.stat().st_mode)  # still a pipe, not a regular file renamed over it


def test_devices_are_special_and_never_replaced() -> None:
    for device in ("/dev/null", "/dev/stdout", "/dev/stderr"):
        assert is_special(Path(device))
    write_output("/dev/null", "discarded")  # written in place: the device stays a device
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    check_output(Path("/dev/null"), inputs=["/dev/null"])  # a device is never "an input overwritten"


def test_check_output_refuses_inputs_folders_and_missing_parents(tmp_path: Path) -> None:
    traces = tmp_path / "runs.jsonl"
    traces.write_text("{}\n")
    with pytest.raises(OutputError, match=r"--output .*runs.jsonl: it is also an input"):
        check_output(traces, inputs=[traces])
    with pytest.raises(OutputError, match="it is also an input"):  # the same file through a link
        link = tmp_path / "link.jsonl"
        link.symlink_to(traces)
        check_output(link, inputs=[str(traces)])
    with pytest.raises(OutputError, match="is a directory"):
        check_output(tmp_path)
    missing = tmp_path / "no" / "such" / "model.json"
    with pytest.raises(OutputError, match=r"the folder .*no/such does not exist \(create it, or pass --mkdir\)"):
        check_output(missing)
    assert not (tmp_path / "no").exists()
    check_output(missing, mkdir=True)
    assert missing.parent.is_dir()
    with pytest.raises(OutputError, match="is not a directory"):
        check_output(traces / "model.json")
