"""``forewarn learn --engine spark`` as a user runs it: a fresh process, its own Spark, JSON on stdout."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from _support import CLI, toy_run

pytestmark = pytest.mark.spark


def forewarn(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-c", "from forewarn.guard.cli import main; main()", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=600)


def without_provenance(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    for key in ("provenance", "checksum"):
        doc.pop(key)
    doc["check"].pop("seconds")
    if doc.get("intervals"):
        doc["intervals"].pop("seconds")
    return doc


def test_learn_on_spark_writes_the_local_model_and_keeps_stdout_clean(tmp_path: Path, toy_spec_path: Path,
                                                                      forewarn_here: CLI) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    runs = [toy_run(f"r{i}", [i % 3, (i * 5) % 4, i % 2]) for i in range(40)]
    for part in range(2):
        (folder / f"part-{part}.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in runs[part::2]))
    local = forewarn_here("learn", *sorted(folder.iterdir()), "--spec", toy_spec_path, "-o", tmp_path / "local.json",
                          "--format", "json")
    assert local.returncode == 0, local.stderr
    done = forewarn("learn", folder, "--spec", toy_spec_path, "-o", tmp_path / "spark.json", "--engine", "spark",
                    "--master", "local[2]", "--format", "json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)  # stdout is the summary alone: Spark logs on stderr
    assert (summary["runs"], summary["steps"]) == (40, 120)
    assert without_provenance(tmp_path / "spark.json") == without_provenance(tmp_path / "local.json")
    assert {k: v for k, v in summary.items() if not k.endswith("seconds") and k != "model"} == \
        {k: v for k, v in local.json().items() if not k.endswith("seconds") and k != "model"}



def test_a_bad_line_on_spark_is_one_line_naming_file_and_line(spark: Any, tmp_path: Path, toy_spec_path: Path,
                                                              forewarn_here: CLI) -> None:
    """In this process, so the command joins the test session's Spark (one JVM start saved)."""
    folder = tmp_path / "runs"
    folder.mkdir()
    (folder / "part-0.jsonl").write_bytes(orjson.dumps(toy_run("r0", [0, 1])) + b"\n")
    (folder / "part-1.jsonl").write_text('{"steps": [{"state": {"a": true, "b": 0}}]}\n{"steps": 3}\n')
    bad = forewarn_here("learn", folder, "--spec", toy_spec_path, "-o", tmp_path / "bad.json", "--engine", "spark")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == f"error: {folder}/part-1.jsonl:2: steps: expected a list, got a number"
    assert not (tmp_path / "bad.json").exists()


def test_master_without_the_spark_engine_is_a_user_error(tmp_path: Path, toy_spec_path: Path, toy_traces: Path,
                                                         forewarn_here: CLI) -> None:
    result = forewarn_here("learn", toy_traces, "--spec", toy_spec_path, "-o", tmp_path / "m.json",
                           "--master", "local[2]")
    assert result.returncode == 2
    assert "--master applies to --engine spark only" in result.stderr


def test_group_by_on_spark_writes_the_local_bundle(spark: Any, tmp_path: Path, toy_spec_path: Path,
                                                   forewarn_here: CLI) -> None:
    from forewarn.guard.bundle import GuardBundle

    path = tmp_path / "tasks.jsonl"
    path.write_bytes(b"".join(orjson.dumps({**toy_run(f"r{i}", [i % 3, (i * 5) % 4]),
                                            "meta": {"task": "ab"[i % 2]}}) + b"\n" for i in range(30)))
    for engine in ("local", "spark"):
        done = forewarn_here("learn", path, "--spec", toy_spec_path, "-o", tmp_path / f"{engine}.json",
                             "--group-by", "meta.task", "--min-group-runs", "5", "--engine", engine)
        assert done.returncode == 0, done.stderr
    local, distributed = (GuardBundle.load(tmp_path / f"{e}.json") for e in ("local", "spark"))
    assert sorted(distributed.members) == sorted(local.members) == ["a", "b"]
    for name in ("a", "b"):
        assert (distributed.members[name].dtmc.counts != local.members[name].dtmc.counts).nnz == 0
        assert distributed.members[name].outcome.values.tolist() == local.members[name].outcome.values.tolist()
    assert distributed.pooled.provenance["engine"]["name"] == "spark"


def test_on_error_skip_on_spark_reads_as_the_local_learner(spark: Any, tmp_path: Path, toy_spec_path: Path,
                                                           forewarn_here: CLI) -> None:
    lines = [orjson.dumps(toy_run(f"r{i}", [i % 3, (i * 5) % 4, i % 2])) for i in range(40)]
    for at, bad in ((3, b"not json"), (17, b'{"steps": [{"state": 7}]}'), (30, b'{"steps": [{"state": {"a": 1}}]}')):
        lines[at] = bad
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    done = {engine: forewarn_here("learn", path, "--spec", toy_spec_path, "-o", tmp_path / f"{engine}.json",
                                  "--on-error", "skip", "--format", "json", "--engine", engine)
            for engine in ("local", "spark")}
    assert done["local"].returncode == done["spark"].returncode == 0, done["spark"].stderr
    local, distributed = done["local"].json()["read"], done["spark"].json()["read"]
    assert (local["runs"], local["skipped"]) == (37, 3)
    assert {k: distributed[k] for k in ("runs", "skipped", "skipped_by_reason")} == \
        {k: local[k] for k in ("runs", "skipped", "skipped_by_reason")}
    assert without_provenance(tmp_path / "spark.json") == without_provenance(tmp_path / "local.json")


def test_spark_jobs_print_progress_off_a_terminal(spark: Any, tmp_path: Path, toy_spec_path: Path, toy_traces: Path,
                                                  forewarn_here: CLI, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Spark job reports nothing while it runs: off a terminal a line every period says it is still going."""
    monkeypatch.setenv("FOREWARN_PROGRESS_SECONDS", "0.05")
    learned = forewarn_here("learn", toy_traces, "--spec", toy_spec_path, "-o", tmp_path / "m.json", "--engine",
                            "spark", "--format", "json")
    assert learned.returncode == 0, learned.stderr
    assert isinstance(learned.json(), dict)
    assert re.search(r"^learning on Spark: \d+ s elapsed, no estimate", learned.stderr, re.M), learned.stderr
    evaluated = forewarn_here("evaluate", toy_traces, "--spec", toy_spec_path, "--folds", "2", "--engine", "spark",
                              "--format", "json")
    assert evaluated.returncode == 0, evaluated.stderr
    assert isinstance(evaluated.json(), dict)
    assert re.search(r"^cross-validation on Spark: (learn|replay) \(fold \d\): \d/3 done, \d+ s elapsed, ",
                     evaluated.stderr, re.M), evaluated.stderr
