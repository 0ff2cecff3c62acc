"""The ``forewarn`` command line, end to end, in real subprocesses.

Independent commands run concurrently: each process pays for importing Storm and SciPy.
"""
from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
import orjson
import pytest
import stormpy

from _support import CLI, TOY_SPEC, Result, bounded_reach, toy_run
from forewarn.guard import Guard
from forewarn.guard.model import GuardModel
from forewarn.guard.replay import replay
from forewarn.guard.storm import prism_text
from forewarn.guard.traces import read_runs

REPLAY_KEYS = {"theta", "n_unsafe", "n_safe", "detection_rate", "false_alarm_rate", "mean_advance_steps",
               "mean_advance_seconds", "brier"}




def forewarn_many(*commands: list[str | Path], cwd: Path) -> list[Result]:
    """Run ``python -m forewarn ARGS`` for each command, concurrently; results in order."""
    processes = [(tuple(str(a) for a in args),
                  subprocess.Popen([sys.executable, "-m", "forewarn", *map(str, args)], cwd=cwd, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE))
                 for args in commands]
    results = []
    for args, process in processes:
        stdout, stderr = process.communicate(timeout=120)
        results.append(Result(args, process.returncode, stdout, stderr))
    return results


def forewarn(*args: str | Path, cwd: Path) -> Result:
    return forewarn_many(list(args), cwd=cwd)[0]


InProcess = CLI


@dataclass(frozen=True)
class Workspace:
    root: Path
    spec: Path
    traces: Path
    model: Path
    learn: Result


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Workspace:
    root = tmp_path_factory.mktemp("cli")
    spec = root / "toy.yaml"
    spec.write_text(TOY_SPEC, encoding="utf-8")
    traces = root / "traces.jsonl"
    runs = [toy_run("r1", [0, 1, 3], times=[0.0, 1.0, 2.5]), toy_run("r2", [0, 2, 2], times=[0.0, 2.0, 4.0]),
            toy_run("r3", [0, 1, 0]), toy_run("r4", [0, 2, 1, 3], times=[0.0, 1.0, 2.0, 4.0]),
            toy_run("r5", [0, 0, 2])]
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in runs) + b"\n")
    model = root / "out" / "model.json"
    learn = forewarn("learn", traces, "--spec", spec, "-o", model, "--format", "json", "--mkdir", cwd=root)
    return Workspace(root, spec, traces, model, learn)


def test_learn_writes_a_model_and_prints_a_summary(workspace: Workspace) -> None:
    result = workspace.learn
    assert result.returncode == 0, result.stderr
    summary = result.json()
    assert isinstance(summary, dict)
    assert (summary["runs"], summary["steps"], summary["unsafe_runs"]) == (5, 16, 2)
    assert (summary["states"], summary["unsafe_states"]) == (5, 1)
    assert 'P=? [F "unsafe"]' in str(summary["properties"]) and summary["method"] == "sound"
    model = GuardModel.load(workspace.model)
    assert summary["transitions"] == model.dtmc.matrix.nnz
    initial = model.dtmc.initial
    assert math.isclose(summary["initial_risk"], model.outcome.values[next(iter(initial))], abs_tol=1e-6)
    assert model.provenance["inputs"][0]["path"] == str(workspace.traces)


WALK = ('dtmc\nconst int N;\nmodule walk\n  x : [0..N] init 1;\n'
        "  [] x>0 & x<N -> 1/3:(x'=x-1) + 2/3:(x'=x+1);\n  [] x=0 | x=N -> 1:(x'=x);\n"
        'endmodule\nlabel "goal" = x=N;\n')


def assert_user_error(result: Result, *fragments: str) -> None:
    assert result.returncode == 2, (result.args, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_end_to_end_in_subprocesses(workspace: Workspace) -> None:
    root, model_path = workspace.root, workspace.model
    walk = root / "walk.pm"
    walk.write_text(WALK, encoding="utf-8")
    cel_spec = root / "cel.yaml"  # a long message with brackets, which the console must neither eat nor wrap
    cel_spec.write_text(TOY_SPEC.replace("'state.a'", "'state.a in [x, y] &&& z'"), encoding="utf-8")
    bad_traces = root / "bad.jsonl"
    lines = workspace.traces.read_text(encoding="utf-8").splitlines()
    bad_traces.write_text("\n".join([lines[0], '{"id": "broken", "steps": [{"state": {"a": 1}, "t": "x"}]}',
                                     lines[1]]) + "\n", encoding="utf-8")
    existing = root / "existing.json"
    existing.write_bytes(model_path.read_bytes())

    as_json, replayed, pm, cel_error, kept = forewarn_many(
        ["check", model_path, "--format", "json"],
        ["replay", workspace.traces, "--model", model_path, "--theta", "0.3,0.6,0.95", "--format", "json"],
        ["check", walk, "--property", 'P=? [F "goal"]', "--const", "N=3", "--method", "exact", "--format", "json"],
        ["learn", workspace.traces, "--spec", cel_spec, "-o", root / "m1.json"],
        ["learn", bad_traces, "--spec", workspace.spec, "-o", existing],
        cwd=root)
    for result in (as_json, replayed, pm):
        assert result.returncode == 0, (result.args, result.stderr)
        assert "Traceback" not in result.stderr
    model = GuardModel.load(model_path)
    dtmc = model.dtmc

    # check --format json: the contract's shape, the cached values
    document = as_json.json()
    assert isinstance(document, dict)
    assert document["property"] == 'P=? [F "unsafe"]'
    states = document["states"]
    assert len(states) == dtmc.size
    for i, row in enumerate(states):
        assert {"predicates", "monitors", "kind", "value", "lower", "upper"} <= set(row)
        assert row["kind"] == ("end" if i == dtmc.end_index else "state")
        assert row["value"] == model.outcome.values[i]
        assert row["lower"] <= row["value"] <= row["upper"]
        if row["kind"] == "state":
            bits = dtmc.states[i]
            assert row["predicates"] == {"a": bool(bits & 1), "b": bool(bits & 2)}

    # replay --format json: the contract's keys, the same numbers as the Python API
    reports = replayed.json()
    assert isinstance(reports, list) and [r["theta"] for r in reports] == [0.3, 0.6, 0.95]
    in_process = replay(Guard(model), read_runs(workspace.traces), [0.3, 0.6, 0.95])
    for entry, theta in zip(reports, in_process.thetas):
        assert set(entry) >= REPLAY_KEYS
        assert (entry["n_unsafe"], entry["n_safe"]) == (2, 3)
        for key in REPLAY_KEYS - {"brier"}:
            assert entry[key] == getattr(theta, key), key
        assert entry["brier"] == in_process.brier

    # check on a PRISM file with an undefined constant given on the command line
    document = pm.json()
    assert isinstance(document, dict)
    assert document["property"] == 'P=? [F "goal"]'
    assert document["initial"] == float(Fraction(4, 7))  # gambler's ruin, up 2/3, from 1 of 0..3
    assert sorted(s["value"] for s in document["states"]) == sorted(
        float(v) for v in (Fraction(0), Fraction(4, 7), Fraction(6, 7), Fraction(1)))
    assert [s["index"] for s in document["states"]] == [0, 1, 2, 3]

    # user errors: exit 2, one line on stderr naming the problem
    assert_user_error(cel_error, f"{cel_spec}:3", "predicate 'a' does not parse as CEL", "[x, y]")
    assert not (root / "m1.json").exists()
    assert_user_error(kept, f"{bad_traces}:2", "steps[0].t")
    assert existing.read_bytes() == model_path.read_bytes(), "a failed learn must not touch the old model"
    assert not list(root.glob(".existing.json.*"))


def test_check_another_property_with_exact_arithmetic(workspace: Workspace, forewarn_here: InProcess) -> None:
    result = forewarn_here("check", workspace.model, "--property", 'P=? [F<=2 "unsafe"]', "--method", "exact",
                           "--format", "json")
    assert result.returncode == 0, result.stderr
    dtmc = GuardModel.load(workspace.model).dtmc
    # the two-step matrix power, by hand with fractions
    rows = {i: dict(dtmc.exact_row(i)) for i in range(dtmc.size)}
    expected = bounded_reach(rows, {int(i) for i in np.flatnonzero(dtmc.unsafe)}, 2)
    document = result.json()
    assert isinstance(document, dict)
    assert document["property"] == 'P=? [F<=2 "unsafe"]'
    assert [s["value"] for s in document["states"]] == [float(expected[i]) for i in range(dtmc.size)]
    assert all(s["lower"] == s["value"] == s["upper"] for s in document["states"])


def test_exports_that_storm_reads_back(workspace: Workspace, forewarn_here: InProcess) -> None:
    dtmc = GuardModel.load(workspace.model).dtmc
    nested = workspace.root / "exports" / "deep"  # folders are created with --mkdir, as for learn -o
    missing = forewarn_here("export", workspace.model, "-o", nested / "model.prism")
    assert missing.returncode == 2 and "pass --mkdir" in missing.stderr and not nested.exists()
    for fmt in ("prism", "drn"):
        written = forewarn_here("export", workspace.model, "--format", fmt, "-o", nested / f"model.{fmt}", "--mkdir")
        assert written.returncode == 0, written.stderr
    assert (nested / "model.prism").read_text(encoding="utf-8") == prism_text(dtmc, name="toy")
    program = stormpy.parse_prism_program(str(nested / "model.prism"))
    assert stormpy.build_model(program).nr_states == dtmc.size
    drn_model = stormpy.build_model_from_drn(str(nested / "model.drn"))
    assert drn_model.nr_states == dtmc.size
    assert {"unsafe", "end", "a", "b"} <= set(drn_model.labeling.get_labels())

    to_stdout = forewarn_here("export", workspace.model)
    assert to_stdout.returncode == 0 and to_stdout.stdout == prism_text(dtmc, name="toy")
    drn = forewarn_here("export", workspace.model, "--format", "drn")
    assert drn.returncode == 0 and drn.stdout == (nested / "model.drn").read_text(encoding="utf-8")


def test_tables_and_stdout(workspace: Workspace, forewarn_here: InProcess) -> None:
    table = forewarn_here("check", workspace.model)
    assert table.returncode == 0
    assert 'P=? [F "unsafe"]' in table.stdout and "sound" in table.stdout
    assert "a, b" in table.stdout and "end" in table.stdout

    walk = workspace.root / "walk.pm"
    walk.write_text(WALK, encoding="utf-8")
    pm = forewarn_here("check", walk, "--property", 'P=? [F "goal"]', "--const", "N=3")
    assert pm.returncode == 0 and "0.571429 in the initial state (4 states" in pm.stdout

    again = workspace.root / "again.json"
    learned = forewarn_here("learn", workspace.traces, "--spec", workspace.spec, "-o", again)
    assert learned.returncode == 0 and "forewarn learn" in learned.stdout and "PAC" in learned.stdout
    assert GuardModel.load(again).dtmc.states == GuardModel.load(workspace.model).dtmc.states

    replayed = forewarn_here("replay", workspace.traces, "--model", workspace.model, "--theta", "0.5")
    assert replayed.returncode == 0 and "Brier score" in replayed.stdout


def test_user_errors(workspace: Workspace, forewarn_here: InProcess) -> None:
    root = workspace.root
    missing_field = root / "missing.jsonl"
    missing_field.write_text('{"id": "m", "steps": [{"state": {"a": true}}]}\n', encoding="utf-8")
    edited = root / "edited.json"
    edited.write_text(workspace.model.read_text(encoding="utf-8").replace('"alpha": 0.1', '"alpha": 0.2'),
                      encoding="utf-8")
    walk = root / "walk2.pm"
    walk.write_text("dtmc\nconst int N;\nmodule w\n  x : [0..N] init 0;\n  [] true -> 1:(x'=x);\nendmodule\n",
                    encoding="utf-8")
    (root / "not-a-model.json").write_text("{}", encoding="utf-8")
    empty = root / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    bad_spec = root / "bad.yaml"
    bad_spec.write_text(TOY_SPEC.replace("'a && b'", "'a && zz'"), encoding="utf-8")
    bad_traces = root / "bad-middle.jsonl"
    lines = workspace.traces.read_text(encoding="utf-8").splitlines()
    bad_traces.write_text("\n".join([lines[0], lines[1], '{"id": "broken", "steps": []}', lines[2]]) + "\n",
                          encoding="utf-8")

    cases: list[tuple[list[str | Path], tuple[str, ...]]] = [
        (["learn", workspace.traces, "--spec", bad_spec, "-o", root / "m1.json"],
         (f"{bad_spec}:7", "'unsafe' names unknown predicate(s) ['zz']")),
        (["learn", bad_traces, "--spec", workspace.spec, "-o", root / "m2.json"],
         (f"{bad_traces}:3", "steps: a run needs at least one step")),
        (["learn", missing_field, "--spec", workspace.spec, "-o", root / "m3.json"],
         (f"{missing_field}:1", "steps[0].state", "predicate 'b'", "reads field 'b'")),
        (["learn", root / "absent.jsonl", "--spec", workspace.spec, "-o", root / "m4.json"],
         ("absent.jsonl", "cannot read traces")),
        (["learn", empty, "--spec", workspace.spec, "-o", root / "m5.json"], ("no runs to learn from",)),
        (["learn", workspace.traces, "--spec", root / "absent.yaml", "-o", root / "m6.json"],
         ("absent.yaml", "cannot read spec")),
        (["check", root / "absent.json"], ("absent.json", "cannot read model file")),
        (["check", edited], ("checksum mismatch",)),
        (["check", root / "not-a-model.json"], ("not a Forewarn model file",)),
        (["check", workspace.model, "--property", 'P=? [F "unsafe"'], ("Storm cannot parse property",)),
        (["check", workspace.model, "--property", 'P=? [F "nowhere"]'], ("could not check",)),
        (["check", workspace.model, "--const", "N=3"], ("--const applies to PRISM files only",)),
        (["check", walk], ("needs --property",)),
        (["check", walk, "--property", "P=? [F x=1]"], ("undefined constants N",)),
        (["check", walk, "--property", "P=? [F x=1]", "--const", "M=1"], ("constants 'M=1'",)),
        (["export", root / "not-a-model.json"], ("not a Forewarn model file",)),
        (["export", workspace.model, "-o", workspace.model / "x.pm"], ("model.json is not a directory",)),
        (["learn", workspace.traces, "--spec", workspace.spec, "-o", root], (str(root), "is a directory")),
        (["replay", workspace.traces, "--model", workspace.model, "--theta", "0.5,2"],
         ("thresholds must lie in [0, 1]",)),
        (["replay", workspace.traces, "--model", workspace.model, "--theta", "half"],
         ("expected comma-separated numbers",)),
        (["replay", missing_field, "--model", workspace.model], (f"{missing_field}:1", "reads field 'b'")),
    ]
    for args, fragments in cases:
        assert_user_error(forewarn_here(*args), *fragments)
    assert not list(root.glob("m[1-6].json"))


def test_usage_errors_exit_2_without_a_traceback(workspace: Workspace, forewarn_here: InProcess) -> None:
    result = forewarn_here("check", workspace.model, "--format", "xml")
    assert result.returncode == 2
    assert "--format" in result.stderr and "Traceback" not in result.stderr
    result = forewarn_here("learn")
    assert result.returncode == 2
    assert "Missing argument" in result.stderr and "Traceback" not in result.stderr
