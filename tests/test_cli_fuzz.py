"""Fuzzing the command line: malformed trace lines, specs and option values.

Every case must end with exit status 0 (it was fine) or 2 (a user error, said in one
line starting ``error:``), never a traceback, another status or a hang. Cases run in
process (hypothesis, bounded examples, derandomised) under a per-case alarm; the
option values that used to hang or exhaust memory also run as real processes under
``timeout``, which catches a hang inside Storm's C++ code as well.
"""
from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _support import CLI, TOY_SPEC, Result, toy_run
from forewarn.guard._extras import missing

CASE_SECONDS = 30
FUZZ = settings(max_examples=20, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
_names = itertools.count()


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise TimeoutError(f"a CLI case ran longer than {seconds} s (a hang)")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def run_case(forewarn_here: CLI, *args: str | Path) -> Result:
    with time_limit(CASE_SECONDS):
        result = forewarn_here(*args)
    assert_clean(result)
    return result


def assert_clean(result: Result) -> None:
    """Exit 0, or exit 2 with exactly one line that says what is wrong; never a traceback."""
    assert result.returncode in (0, 2), (result.args, result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, (result.args, result.stderr[-2000:])
    if result.returncode == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("error:")]
        assert len(errors) == 1 and lines[-1] == errors[0], (result.args, lines)
        others = [line for line in lines[:-1] if not line.startswith(("warning:", "learned from", "read ", "  "))]
        assert not others, (result.args, lines)


@pytest.fixture
def toy_files(tmp_path: Path, toy_traces: Path, toy_spec_path: Path, toy_model_path: Path) -> dict[str, Path]:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the player moves the ball to the goal and the player wins the game\n", encoding="utf-8")
    return {"traces": toy_traces, "spec": toy_spec_path, "model": toy_model_path, "dir": tmp_path, "corpus": corpus}


def fresh(directory: Path, suffix: str) -> Path:
    return directory / f"case-{next(_names)}{suffix}"


# -- option values ----------------------------------------------------------------------------

NUMBERS = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "-1", "0", "-0", "1e-320", "1e308", "2", "1e-12", "1e-9", "0.5", "1",
                     "abc", "", " ", "0.5,,0.7", "0.1,0.5", ",", "0x10", "1_000"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-3, max_value=12).map(str),
)
OPTIONS = {
    "learn": ["--alpha", "--precision", "--epsilon", "--delta", "--period"],
    "check": ["--precision"],
    "replay": ["--theta", "--period"],
    "evaluate": ["--folds", "--theta", "--alpha", "--period"],
    "ingest": ["--period"],
    "llmcheck": ["--precision", "--alpha", "--k", "--depth", "--max-states", "--max-seconds", "--top"],
}


@FUZZ
@given(command=st.sampled_from(sorted(OPTIONS)), data=st.data())
def test_option_values(forewarn_here: CLI, toy_files: dict[str, Path], command: str, data: st.DataObject) -> None:
    option = data.draw(st.sampled_from(OPTIONS[command]))
    value = data.draw(NUMBERS)
    d = toy_files
    base: dict[str, list[str | Path]] = {
        "learn": ["learn", d["traces"], "-s", d["spec"], "-o", fresh(d["dir"], ".json")],
        "check": ["check", d["model"]],
        "replay": ["replay", d["traces"], "-m", d["model"]],
        "evaluate": ["evaluate", d["traces"], "-s", d["spec"], "--folds", "2"],
        "ingest": ["ingest", d["traces"], "-o", fresh(d["dir"], ".jsonl")],
        "llmcheck": ["llmcheck", "--model", f"ngram:{d['corpus']}", "--prompt", "the", "--property",
                     'P=? [F "gender_bias>0"]', "--depth", "3"],
    }
    run_case(forewarn_here, *base[command], option, value)


# -- trace lines --------------------------------------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers(-10, 10) | st.floats(allow_nan=False)
                    | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["id", "steps", "state", "a", "b", "t", "action", "meta", "actions",
                                         "intermediate_steps", "resourceSpans", "messages", "columns"]),
                        inner, max_size=4),
                    max_leaves=12)


def deep(depth: int) -> dict[str, Any]:
    value: Any = 1
    for _ in range(depth):
        value = {"k": value}
    return {"a": True, "b": 0, "k": value}


SPECIAL_LINES = [
    json.dumps({"id": "deep", "steps": [{"state": deep(600)}]}),
    json.dumps({"id": "t", "steps": [{"state": {"a": True, "b": 1}, "t": 1}, {"state": {"a": 1, "b": 1}, "t": 0}]}),
    '{"id": "x", "steps": []}', "[]", "{", "null", '"text"', "\x00", '{"steps": [{"state": {"a": true}}]}',
    '{"intermediate_steps": [["x", "y"]]}', '{"resourceSpans": [{"scopeSpans": [{"spans": [{}]}]}]}',
    '{"messages": [{"type": "tool"}]}', '{"actions": ["fly away"], "task": "safe-0001"}',
]
LINES = st.one_of(JSON.map(lambda v: orjson.dumps(v).decode()), st.sampled_from(SPECIAL_LINES),
                  st.text(max_size=20).filter(lambda s: "\n" not in s and "\r" not in s))


@FUZZ
@given(lines=st.lists(LINES, min_size=0, max_size=4), keep_good=st.booleans(),
       command=st.sampled_from(["learn", "learn-skip", "ingest", "ingest-skip", "replay"]),
       fmt=st.sampled_from(["auto", "jsonl", "langchain", "otel", "langgraph", "columnar", "actions", "agentspec"]))
def test_malformed_trace_lines(forewarn_here: CLI, toy_files: dict[str, Path], lines: list[str], keep_good: bool,
                               command: str, fmt: str) -> None:
    d = toy_files
    path = fresh(d["dir"], ".jsonl")
    good = [orjson.dumps(toy_run("good", [0, 1, 3])).decode()] if keep_good else []
    path.write_text("\n".join(good + lines) + "\n", encoding="utf-8")
    skip = ["--on-error", "skip"] if command.endswith("-skip") else []
    if command.startswith("learn"):
        run_case(forewarn_here, "learn", path, "-s", d["spec"], "-o", fresh(d["dir"], ".json"), *skip)
    elif command.startswith("ingest"):
        run_case(forewarn_here, "ingest", path, "-o", fresh(d["dir"], ".out.jsonl"), "--input-format", fmt, *skip)
    else:
        run_case(forewarn_here, "replay", path, "-m", d["model"], "--input-format", fmt)


# -- specs ----------------------------------------------------------------------------------

NAMES = st.sampled_from(["a", "b", "on", "off", "yes", "no", "y", "true", "unsafe", "x y", "1", "state", "ok_2"])
CEL = st.sampled_from(["state.a", "state.b > 2", "state.", "state.a &&", "1/0 == 1", "state.k.k.k == 1", "true",
                       "size(state) > 0", "state.a ? 1 : 'x'", "state.missing", "'text'", "state.b"])
UNSAFE = st.sampled_from(["a && b", "a || !a", "nosuch", "a &&", "on", "yes && no", "b", "a"])
SPEC_NUMBERS = st.sampled_from([".nan", ".inf", "-1", "0", "1e-320", "1e308", "2", "0.05", "1", "yes", "[]"])


@st.composite
def specs(draw: st.DrawFn) -> str:
    names = draw(st.lists(NAMES, min_size=0, max_size=3, unique=True))
    predicates = "".join(f"  {n}: '{draw(CEL)}'\n" for n in names) if names else "  {}\n"
    text = f"name: fuzz\npredicates:\n{predicates}unsafe: '{draw(UNSAFE)}'\n"
    if draw(st.booleans()):
        text += (f"learning:\n  alpha: {draw(SPEC_NUMBERS)}\n  epsilon: {draw(SPEC_NUMBERS)}\n"
                 f"  delta: {draw(SPEC_NUMBERS)}\n")
    if draw(st.booleans()):
        text += f"guard:\n  thresholds: {{reflect: {draw(SPEC_NUMBERS)}, stop: {draw(SPEC_NUMBERS)}}}\n"
    if draw(st.booleans()):
        rule = draw(st.sampled_from(["os:getcwd", "nosuch:f", "json:dumps", "os.getcwd", "builtins.eval",
                                     "forewarn.driving.valid_transition"]))  # a name or an old import path
        text += f"valid_transitions:\n  function: '{rule}'\n"
    return text


@FUZZ
@given(text=st.one_of(specs(), st.text(max_size=60), st.just(TOY_SPEC.replace("a:", "on:").replace("a &&", "on &&"))))
def test_malformed_specs(forewarn_here: CLI, toy_files: dict[str, Path], text: str) -> None:
    d = toy_files
    spec = fresh(d["dir"], ".yaml")
    spec.write_text(text, encoding="utf-8")
    run_case(forewarn_here, "learn", d["traces"], "-s", spec, "-o", fresh(d["dir"], ".json"))


def test_yaml_boolean_words_are_predicate_names(forewarn_here: CLI, toy_files: dict[str, Path]) -> None:
    d = toy_files
    spec = d["dir"] / "words.yaml"
    spec.write_text(TOY_SPEC.replace("  a: 'state.a'", "  on: 'state.a'").replace("unsafe: 'a && b'",
                                                                                 "unsafe: 'on && b'"),
                    encoding="utf-8")
    result = run_case(forewarn_here, "learn", d["traces"], "-s", spec, "-o", d["dir"] / "words.json")
    assert result.returncode == 0, result.stderr
    from forewarn.guard.model import GuardModel

    model = GuardModel.load(d["dir"] / "words.json")
    assert list(model.spec.predicates) == ["on", "b"] and model.dtmc.predicates == ["on", "b"]
    assert model.spec.unsafe == "on && b"


# -- real processes: the cases that used to hang, and Storm's own output ----------------------

def forewarn_process(*args: str | Path, seconds: int = 60) -> Result:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "forewarn", *map(str, args)], capture_output=True, text=True,
                          timeout=seconds, env=env, check=False)
    return Result(tuple(map(str, args)), done.returncode, done.stdout, done.stderr)


@pytest.mark.parametrize("option", [("--precision", "-1"), ("--precision", "nan"), ("--period", "1e-12"),
                                    ("--alpha", "1e308"), ("--epsilon", "1e-320")])
def test_former_hangs_and_tracebacks_in_a_real_process(toy_files: dict[str, Path], option: tuple[str, str]) -> None:
    d = toy_files
    result = forewarn_process("learn", d["traces"], "-s", d["spec"], "-o", d["dir"] / "m.json", *option)
    assert_clean(result)
    assert result.returncode == 2 and option[0] in result.stderr
    assert not (d["dir"] / "m.json").exists()


def test_storms_own_messages_never_reach_stdout(toy_files: dict[str, Path]) -> None:
    model = toy_files["dir"] / "steps.pm"
    model.write_text("dtmc\nmodule m\n  x : [0..1] init 0;\n  [] x=0 -> 1:(x'=1);\n  [] x=1 -> 1:(x'=1);\n"
                     "endmodule\nrewards \"steps\"\n  true : 1;\nendrewards\nlabel \"done\" = x=1;\n", encoding="utf-8")
    failed = forewarn_process("check", model, "--property", 'R{"energy"}=? [F "done"]', "--format", "json")
    assert failed.returncode == 2 and failed.stdout == ""
    assert "ERROR (" not in failed.stderr  # Storm's own line is dropped: the error line says it once
    assert [line for line in failed.stderr.splitlines() if line.strip()][-1].startswith("error: ")
    ok = forewarn_process("check", model, "--property", 'R{"steps"}=? [F "done"]', "--format", "json")
    assert ok.returncode == 0
    assert json.loads(ok.stdout)["initial"] == 1.0


def test_help_version_and_short_help() -> None:
    version = forewarn_process("--version")
    assert version.returncode == 0 and version.stdout.startswith("forewarn ")
    for command in ("learn", "replay", "evaluate", "ingest", "check", "llmcheck"):
        text = forewarn_process(command, "-h").stdout
        assert "Usage: forewarn " + command in text
        assert "{" not in text.split("\n")[0] and "<bool>" not in text and "<list" not in text, text


# -- interrupts, output paths and ingest inputs (issue 26) ------------------------------------

def interrupted(args: list[str | Path], fifo: Path, cwd: Path) -> Result:
    """Run forewarn on ``fifo`` as its input and send Ctrl-C while it is reading: the pipe guarantees the
    command is mid-work (a run half-sent), however fast or slow the machine."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                        os.environ.get("PYTHONPATH", "")]))
    import time

    # Ctrl-C as at a terminal, however the suite was launched: a background job of a shell without job
    # control (`(make test &)`) ignores SIGINT, and so would the command it starts (an ignored signal
    # stays ignored across exec, and Python then installs no handler for it)
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        process = subprocess.Popen([sys.executable, "-m", "forewarn", *map(str, args)], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the write end opens once the command opens its input; a command that refuses before reading (a
    # missing extra) never does, so the writer must not block on it
    fd = -1
    while fd < 0 and process.poll() is None:
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader yet
            time.sleep(0.02)
    if fd < 0:
        out, err = process.communicate(timeout=60)
        return Result(tuple(map(str, args)), process.returncode, out, err)
    os.set_blocking(fd, True)
    with open(fd, "w", encoding="utf-8") as writer:
        writer.write(orjson.dumps(toy_run("r1", [0, 1, 3])).decode() + "\n" + '{"id": "r2", "steps": [')
        writer.flush()
        time.sleep(1.0)  # the command reads the first run and waits for the rest
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    return Result(tuple(map(str, args)), process.returncode, out, err)


@pytest.mark.parametrize("command", ["learn", "replay", "evaluate", "tune", "ingest", "discover"])
def test_ctrl_c_exits_130_with_one_line_and_writes_nothing(toy_files: dict[str, Path], tmp_path: Path,
                                                           command: str) -> None:
    d = toy_files
    work = tmp_path / "work"
    work.mkdir()
    fifo = work / "runs.jsonl"
    os.mkfifo(fifo)
    out = work / "out"
    args: dict[str, list[str | Path]] = {
        "learn": ["learn", fifo, "-s", d["spec"], "-o", out],
        "replay": ["replay", fifo, "--model", d["model"], "--report", out],
        "evaluate": ["evaluate", fifo, "-s", d["spec"], "--report", out],
        "tune": ["tune", fifo, "-s", d["spec"], "--target", "false-alarms=0.1", "-o", out],
        "ingest": ["ingest", fifo, "--input-format", "jsonl", "-o", out],
        "discover": ["discover", fifo, "-s", d["spec"], "-o", out],
    }
    if command in ("replay", "evaluate") and missing("report"):  # refused before reading: nothing to interrupt
        args[command] = [a for a in args[command] if a not in ("--report", out)] + ["--format", "json"]
    result = interrupted(args[command], fifo, work)
    assert result.returncode == 130, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.strip()] == \
        ["error: interrupted; an output being written was discarded"]
    assert sorted(p.name for p in work.iterdir()) == ["runs.jsonl"]  # no output, no temporary file


def output_cases(d: dict[str, Path]) -> dict[str, list[str | Path]]:
    """Every command that writes a file, with OUT where the output path goes."""
    return {
        "learn": ["learn", d["traces"], "-s", d["spec"], "-o", "OUT"],
        "ingest": ["ingest", d["traces"], "-o", "OUT"],
        "tune": ["tune", d["traces"], "-s", d["spec"], "--target", "false-alarms=0.5", "--folds", "2", "-o", "OUT"],
        "export": ["export", d["model"], "-o", "OUT"],
        "replay": ["replay", d["traces"], "--model", d["model"], "--report", "OUT"],
        "discover": ["discover", d["traces"], "-s", d["spec"], "--folds", "2", "--no-confirm", "-o", "OUT"],
        "init": ["init", d["traces"], "--unsafe", "state.a", "--folds", "2", "-o", "OUT"],
    }


@pytest.mark.parametrize("command", ["learn", "ingest", "tune", "export", "replay", "discover", "init"])
@pytest.mark.parametrize("where", ["an input", "a missing folder", "a folder", "under a file", "/dev/null",
                                   "a pipe"])
def test_output_paths(forewarn_here: CLI, toy_files: dict[str, Path], tmp_path: Path, command: str,
                      where: str) -> None:
    if command == "replay" and missing("report"):
        pytest.skip("replay writes its output through --report, which needs the report extra")
    d = toy_files
    args = output_cases(d)[command]
    inputs = [a for a in args[1:] if isinstance(a, Path)]
    before = {p: p.read_bytes() for p in inputs}
    target: Path = {"an input": inputs[0], "a missing folder": tmp_path / "no" / "such" / "out",
                    "a folder": tmp_path, "under a file": d["traces"] / "out", "/dev/null": Path("/dev/null"),
                    "a pipe": tmp_path / "pipe"}[where]
    received: list[bytes] = []
    if where == "a pipe":
        import threading

        os.mkfifo(target)
        reader = threading.Thread(target=lambda: received.append(target.read_bytes()), daemon=True)
        reader.start()
    with time_limit(180):  # drawing a report's figures may take a while on a loaded machine
        result = forewarn_here(*[target if a == "OUT" else a for a in args])
    assert_clean(result)
    if where in ("/dev/null", "a pipe"):  # written in place: a device stays a device, a pipe a pipe
        assert result.returncode == 0, result.stderr
        assert os.stat("/dev/null").st_mode & 0o170000 == 0o020000
        if where == "a pipe":
            reader.join(timeout=30)
            assert received and received[0] and target.is_fifo()
        return
    assert result.returncode == 2, (where, result.stdout[-500:], result.stderr)  # refused, never silently done
    assert {p: p.read_bytes() for p in inputs} == before  # no input overwritten
    assert not (tmp_path / "no").exists()  # no folder made behind the user's back


INGEST_ACTIONS = st.fixed_dictionaries(
    {"tool": st.sampled_from(["find", "pick", "robotic controller", ""])},
    optional={key: st.one_of(st.text(max_size=8), st.dictionaries(st.text(max_size=4), st.integers(-5, 5), max_size=2))
              for key in ("tool_input", "input", "args", "arguments", "params", "log")})
INGEST_DOCS = st.one_of(
    st.builds(lambda steps, run_id: {"id": run_id, "input": "tidy up",
                                     "intermediate_steps": [{"action": a, "observation": o} for a, o in steps]},
              st.lists(st.tuples(INGEST_ACTIONS, st.one_of(st.text(max_size=8), st.just({"success": False}))),
                       max_size=3),
              st.text(min_size=1, max_size=6)),
    st.just({"id": "r", "steps": [{"state": {"a": True}}]}),
    st.just({"resourceSpans": []}),
    JSON)


@FUZZ
@given(files=st.lists(st.lists(INGEST_DOCS, max_size=3), min_size=1, max_size=3),
       input_format=st.sampled_from(["auto", "langchain", "otel", "jsonl"]), skip=st.booleans())
def test_ingest_inputs_never_succeed_silently(forewarn_here: CLI, toy_files: dict[str, Path],
                                              files: list[list[Any]], input_format: str, skip: bool) -> None:
    d = toy_files["dir"]
    paths = []
    for docs in files:
        path = fresh(d, ".jsonl")
        path.write_bytes(b"".join(orjson.dumps(doc) + b"\n" for doc in docs))
        paths.append(path)
    out = fresh(d, ".out.jsonl")
    result = run_case(forewarn_here, "ingest", *paths, "--input-format", input_format, "-o", out,
                      *(["--on-error", "skip"] if skip else []), "--format", "json")
    if result.returncode == 2:
        assert not out.exists()  # a refused ingest writes nothing
        return
    written = out.read_bytes().splitlines()
    summary = result.json()
    assert isinstance(summary, dict)
    assert written and summary["written"] == len(written)  # success means runs were written
    assert summary["skipped"] <= 0.5 * (summary["written"] + summary["skipped"])
    ids = [orjson.loads(line)["id"] for line in written]
    if len(paths) > 1:
        assert all(orjson.loads(line)["meta"].get("source") for line in written)
        firsts: dict[str, str] = {}
        for line in written:  # an id is never shared across files
            run = orjson.loads(line)
            assert firsts.setdefault(run["id"], run["meta"]["source"]) == run["meta"]["source"], ids
