"""``forewarn learn --engine spark --discover``: discovery on the driver from the local files, the counting on
Spark, the same spec as learning here discovers (issue 39)."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from _support import CLI
from forewarn.guard.model import GuardModel

pytestmark = pytest.mark.spark

SPEC = """\
name: moded
predicates:
  broken: 'state.broken'
unsafe: 'broken'
guard:
  unseen_state: allow
"""


def moded_runs(n: int, seed: int) -> list[dict[str, Any]]:
    """Runs whose mode, set at the start, tells whether something breaks later (mode c: most do)."""
    rng = random.Random(seed)
    runs = []
    for k in range(n):
        mode = rng.choice("abc")
        steps = []
        for i in range(8):
            broken = i >= 4 and rng.random() < (0.5 if mode == "c" else 0.03)
            steps.append({"state": {"broken": broken, "mode": mode, "noise": rng.choice("xyz")}})
            if broken:
                break
        runs.append({"id": f"r{k}", "steps": steps, "meta": {"task": f"t{k % 30}"}})
    return runs


def test_learn_on_spark_discovers_as_learning_here_does(spark: Any, tmp_path: Path, forewarn_here: CLI) -> None:
    traces = tmp_path / "runs.jsonl"
    traces.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in moded_runs(200, 2)))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC + "discover: auto\n")
    models = {}
    for engine in ("local", "spark"):
        done = forewarn_here("learn", traces, "-s", spec, "-o", tmp_path / f"{engine}.json", "--engine", engine,
                             "--method", "topological")
        assert done.returncode == 0, done.stderr
        assert "discovery over 200 runs (" in done.stderr
        models[engine] = GuardModel.load(tmp_path / f"{engine}.json")
    assert models["spark"].spec.text == models["local"].spec.text
    assert "state.mode" in " ".join(d.cel or "" for d in models["spark"].spec.predicates.values())
    assert models["spark"].provenance["discovery"] == models["local"].provenance["discovery"]
    assert models["spark"].provenance["chain_states"] == models["local"].provenance["chain_states"]


def test_discover_refuses_a_uri_spark_alone_reads(tmp_path: Path, forewarn_here: CLI) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    done = forewarn_here("learn", "hdfs://nowhere/runs.jsonl", "-s", spec, "-o", tmp_path / "m.json", "--engine",
                         "spark", "--discover")
    assert done.returncode == 2 and "hdfs://nowhere/runs.jsonl is for Spark to read" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
