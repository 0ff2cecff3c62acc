"""``forewarn states``: exact visits, risks, actions and most likely paths on a tiny model."""
from __future__ import annotations

import csv
import io
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from _support import CLI, TOY_SPEC, WriteRuns, toy_run
from forewarn.guard.states import most_likely_paths

# The toy spec (a, b; unsafe a && b) with a stop threshold away from the risks below.
# The chain's own values are the oracle: no shrinking towards observed frequencies.
SPEC = TOY_SPEC.replace("stop: 0.2}", "stop: 0.3}").replace("learning:\n", "learning:\n  shrink: off\n")
RUNS = [[0, 1, 3], [0, 1, 0], [0, 2, 3], [0, 2, 0], [0, 2, 3]]
# Counted by hand (α = 0, so the chain is the maximum-likelihood one):
#   from 0 (none): → 1 twice, → 2 three times, → end twice (r2, r4): 7 departures, 5 runs start there
#   from 1 (a):    → 3 once, → 0 once: 2;   from 2 (b): → 3 twice, → 0 once: 3;   3 (a&b) unsafe
# Risk: x1 = 1/2 + x0/2, x2 = 2/3 + x0/3, x0 = 2/7·x1 + 3/7·x2  ⇒  x0 = 3/5, x1 = 4/5, x2 = 13/15.
# Most likely paths: 0 → 2 → 3 (3/7 · 2/3 = 2/7, against 0 → 1 → 3 = 2/7 · 1/2 = 1/7);
#   1 → 3 (1/2); 2 → 3 (2/3, against 2 → 0 → 2 → 3 …).
# Actions, acting when p_safe < θ with reflect 0.9, ask_human 0.5, stop 0.3:
#   p_safe 2/5 → ask_human; 1/5 → stop; 2/15 → stop; unsafe → stop.
EXPECTED = [
    # index, valuation, visits, runs_started, p_unsafe, action, path, path probability
    (0, {"a": False, "b": False}, 7, 5, Fraction(3, 5), "ask_human", [0, 2, 3], Fraction(2, 7)),
    (1, {"a": True, "b": False}, 2, 0, Fraction(4, 5), "stop", [1, 3], Fraction(1, 2)),
    (2, {"a": False, "b": True}, 3, 0, Fraction(13, 15), "stop", [2, 3], Fraction(2, 3)),
    (3, {"a": True, "b": True}, 0, 0, Fraction(1), "stop", [3], Fraction(1)),
]


@pytest.fixture
def tiny(write_runs: WriteRuns, tmp_path: Path, forewarn_here: CLI) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    traces = write_runs([toy_run(f"r{i}", bits) for i, bits in enumerate(RUNS)])
    model = tmp_path / "tiny.json"
    result = forewarn_here("learn", traces, "--spec", spec, "-o", model, "--alpha", "0", "--method", "exact")
    assert result.returncode == 0, result.stderr
    return model


def test_states_json_gives_exact_visits_risks_actions_and_paths(tiny: Path, forewarn_here: CLI) -> None:
    result = forewarn_here("states", tiny, "--format", "json")
    assert result.returncode == 0, result.stderr
    document = result.json()
    assert isinstance(document, dict)
    assert document["thresholds"] == {"reflect": 0.9, "ask_human": 0.5, "stop": 0.3}
    rows = document["states"]
    assert len(rows) == len(EXPECTED)  # `end` is not listed
    for row, (index, valuation, visits, started, risk, action, path, p_path) in zip(rows, EXPECTED):
        assert row["index"] == index and row["predicates"] == valuation
        assert (row["visits"], row["runs_started"]) == (visits, started)
        assert row["p_unsafe"] == float(risk)  # exact checking: the rational, rounded once
        assert row["action"] == action
        assert row["path"] == path
        assert math.isclose(row["path_probability"], float(p_path), rel_tol=1e-12)
        assert row["path_probability"] <= row["p_unsafe"] + 1e-12  # one path never outweighs all of them
        # no interval in this model (or a real one, once models carry them)
        assert (row["ci_low"] is None) == (row["ci_high"] is None)
    assert rows[3]["unsafe"] and not rows[0]["unsafe"]


def test_states_csv_and_table(tiny: Path, forewarn_here: CLI) -> None:
    result = forewarn_here("states", tiny, "--format", "csv")
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [r["state"] for r in rows] == ["no predicate holds", "a", "b", "a, b"]
    assert [r["visits"] for r in rows] == ["7", "2", "3", "0"]
    assert [r["path"] for r in rows] == ["0 2 3", "1 3", "2 3", "3"]
    assert [r["action"] for r in rows] == ["ask_human", "stop", "stop", "stop"]
    table = forewarn_here("states", tiny)
    assert table.returncode == 0, table.stderr
    assert "#0 → #2 → #3" in table.stdout.replace("\n", " ") or "#0 → #2" in table.stdout
    assert "most probable sequence of transitions" in table.stdout


def test_states_of_a_bundle_per_member(write_runs: WriteRuns, tmp_path: Path, forewarn_here: CLI) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    runs = []
    for i, bits in enumerate(RUNS * 2):
        run = toy_run(f"r{i}", bits)
        run["meta"] = {"task": "t1" if i < 5 else "t2"}
        runs.append(run)
    traces = write_runs(runs)
    bundle = tmp_path / "bundle.json"
    assert forewarn_here("learn", traces, "--spec", spec, "-o", bundle, "--alpha", "0", "--method", "exact",
                         "--group-by", "meta.task", "--min-group-runs", "5").returncode == 0
    document = forewarn_here("states", bundle, "--format", "json").json()
    assert isinstance(document, dict) and list(document["members"]) == ["pooled", "t1", "t2"]
    t1 = document["members"]["t1"]["states"]
    assert [r["visits"] for r in t1] == [7, 2, 3, 0] and t1[0]["p_unsafe"] == 0.6
    pooled = document["members"]["pooled"]["states"]
    assert [r["visits"] for r in pooled] == [14, 4, 6, 0] and pooled[0]["p_unsafe"] == 0.6
    only = forewarn_here("states", bundle, "--group", "t2", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(only.stdout)))
    assert {r["member"] for r in rows} == {"t2"} and len(rows) == 4
    bad = forewarn_here("states", bundle, "--group", "t7")
    assert bad.returncode == 2 and "no group 't7' in this bundle" in bad.stderr


def test_most_likely_paths_by_hand_with_an_unreachable_state() -> None:
    # 0 → 1 (0.6) → 3 unsafe (0.5);  0 → 3 (0.4);  2 loops to itself and ends (never reaches 3)
    dense = np.array([[0, 0.6, 0, 0.4, 0], [0, 0, 0, 0.5, 0.5], [0, 0, 0.5, 0, 0.5], [0, 0, 0, 1, 0],
                      [0, 0, 0, 0, 1.0]])
    unsafe = np.array([False, False, False, True, False])
    absorbing = np.array([False, False, False, True, True])
    probability, successor = most_likely_paths(sp.csr_matrix(dense), unsafe, absorbing)
    assert probability.tolist() == pytest.approx([0.4, 0.5, 0.0, 1.0, 0.0])  # 0 → 3 (0.4) beats 0.6·0.5 = 0.3
    assert successor.tolist() == [3, 3, -1, -1, -1]


def test_states_rejects_a_missing_file(tmp_path: Path, forewarn_here: CLI) -> None:
    result = forewarn_here("states", tmp_path / "nope.json")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "cannot read model file" in result.stderr
