"""Trace inputs as both engines read them: a file, a folder of part files, a glob, Parquet."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from _support import CLI, toy_run
from forewarn.errors import TraceError
from forewarn.guard._extras import MissingExtra
from forewarn.guard.ingest import read_input
from forewarn.guard.pipeline import learn_model
from forewarn.guard.spec import Spec
from forewarn.guard.trace_files import list_trace_files, read_trace_file

HAS_PYARROW = importlib.util.find_spec("pyarrow") is not None
RUNS = [toy_run(f"r{i}", [i % 3, (i * 5) % 4, i % 2]) for i in range(40)]


def model_only(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    for key in ("provenance", "checksum"):
        doc.pop(key)
    doc["check"].pop("seconds")
    if doc.get("intervals"):
        doc["intervals"].pop("seconds")
    return doc


def write_parts(folder: Path, runs: list[dict[str, Any]], parts: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for part in range(parts):
        (folder / f"part-{part:05d}.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in runs[part::parts]))


def write_parquet(path: Path, runs: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    # steps as JSON text, as a Spark job writing runs out would store a nested list of mixed states
    pq.write_table(pa.table({"id": [r["id"] for r in runs], "steps": [orjson.dumps(r["steps"]).decode() for r in runs]}),
                   path)


def test_a_folder_is_its_part_files_in_path_order_without_markers_or_checksums(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    write_parts(folder, RUNS, 3)
    (folder / "_SUCCESS").write_text("")
    (folder / ".part-00000.jsonl.crc").write_text("crc")
    (folder / "_temporary").mkdir()
    (folder / "_temporary" / "part-9.jsonl").write_text("not json\n")
    (folder / "nested").mkdir()
    (folder / "nested" / "part-a.jsonl").write_bytes(orjson.dumps(RUNS[0]) + b"\n")
    files = list_trace_files([folder])
    assert [f.name for f in files] == [f"{folder}/nested/part-a.jsonl",
                                       *(f"{folder}/part-{i:05d}.jsonl" for i in range(3))]
    assert {f.kind for f in files} == {"jsonl"}
    runs = [run.id for f in files for run in read_trace_file(f)]
    assert runs == ["r0", *(r["id"] for part in range(3) for r in RUNS[part::3])]


def test_a_glob_is_its_matches_sorted_and_a_pattern_matching_nothing_is_one_line(tmp_path: Path) -> None:
    write_parts(tmp_path, RUNS, 4)
    files = list_trace_files([str(tmp_path / "part-0000[13].jsonl")])
    assert [Path(f.name).name for f in files] == ["part-00001.jsonl", "part-00003.jsonl"]
    with pytest.raises(TraceError) as caught:
        list_trace_files([str(tmp_path / "*.parquet")])
    assert str(caught.value) == f"{tmp_path}/*.parquet: cannot read traces: no file matches the pattern"


def test_an_empty_folder_and_a_missing_path_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "_SUCCESS").write_text("")
    with pytest.raises(TraceError, match="the directory holds no trace files"):
        list_trace_files([tmp_path / "empty"])
    with pytest.raises(TraceError, match="cannot read traces: No such file or directory"):
        list_trace_files([tmp_path / "missing.jsonl"])


def test_learning_from_a_folder_gives_the_model_of_its_concatenated_file(tmp_path: Path, toy_spec_path: Path,
                                                                       forewarn_here: CLI) -> None:
    write_parts(tmp_path / "runs", RUNS, 3)
    whole = tmp_path / "all.jsonl"
    whole.write_bytes(b"".join(p.read_bytes() for p in sorted((tmp_path / "runs").iterdir())))
    for name, source in (("folder", tmp_path / "runs"), ("file", whole), ("glob", tmp_path / "runs" / "part-*")):
        done = forewarn_here("learn", source, "--spec", toy_spec_path, "-o", tmp_path / f"{name}.json")
        assert done.returncode == 0, done.stderr
    assert model_only(tmp_path / "folder.json") == model_only(tmp_path / "file.json") == model_only(
        tmp_path / "glob.json")
    inputs = json.loads((tmp_path / "folder.json").read_text())["provenance"]["inputs"]
    assert [i["path"] for i in inputs] == [f"{tmp_path / 'runs'}/part-{i:05d}.jsonl" for i in range(3)]
    assert all(len(i["sha256"]) == 64 for i in inputs)


def test_replay_and_evaluate_read_a_folder_as_its_files(tmp_path: Path, toy_spec: Spec) -> None:
    write_parts(tmp_path / "runs", RUNS, 2)
    assert [r.id for r in read_input([tmp_path / "runs"])] == [r["id"] for part in range(2) for r in RUNS[part::2]]


@pytest.mark.parquet
def test_parquet_rows_are_runs_numbered_from_one(tmp_path: Path, toy_spec: Spec) -> None:
    write_parquet(tmp_path / "runs.parquet", RUNS[:5])
    (file,) = list_trace_files([tmp_path / "runs.parquet"])
    assert file.kind == "parquet"
    runs = list(read_trace_file(file))
    assert [(r.id, r.line, r.source) for r in runs] == [(f"r{i}", i + 1, str(tmp_path / "runs.parquet"))
                                                        for i in range(5)]
    assert [r.steps for r in runs] == [r["steps"] for r in RUNS[:5]]
    assert [r.id for r in read_input([tmp_path / "runs.parquet"])] == [f"r{i}" for i in range(5)]
    model = learn_model([tmp_path / "runs.parquet"], toy_spec)
    assert model.provenance["inputs"][0]["path"] == str(tmp_path / "runs.parquet")


@pytest.mark.parquet
def test_a_bad_parquet_row_names_file_row_and_column(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "steps": [orjson.dumps(RUNS[0]["steps"]).decode(), "[{"]}), path)
    with pytest.raises(TraceError) as caught:
        list(read_trace_file(list_trace_files([path])[0]))
    assert str(caught.value).startswith(f"{path}:2: steps: not valid JSON")


@pytest.mark.parquet
def test_a_folder_of_parquet_and_jsonl_parts_learns_the_model_of_the_same_runs_in_one_file(
        tmp_path: Path, toy_spec_path: Path, forewarn_here: CLI) -> None:
    folder = tmp_path / "runs"
    write_parts(folder, RUNS[:20], 2)
    write_parquet(folder / "part-00002.parquet", RUNS[20:])
    whole = tmp_path / "all.jsonl"
    whole.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [*RUNS[:20:2], *RUNS[1:20:2], *RUNS[20:]]))
    for name, source in (("folder", folder), ("file", whole)):
        done = forewarn_here("learn", source, "--spec", toy_spec_path, "-o", tmp_path / f"{name}.json")
        assert done.returncode == 0, done.stderr
    assert model_only(tmp_path / "folder.json") == model_only(tmp_path / "file.json")


@pytest.mark.skipif(HAS_PYARROW, reason="the one-line error is for an environment without pyarrow (make core-test)")
def test_parquet_without_its_extra_is_one_line_naming_it(tmp_path: Path, toy_spec_path: Path,
                                                         forewarn_here: CLI) -> None:
    path = tmp_path / "runs.parquet"
    path.write_bytes(b"PAR1")
    with pytest.raises(MissingExtra, match=r"needs the parquet extra: pip install 'forewarn\[parquet\]'"):
        list(read_trace_file(list_trace_files([path])[0]))
    done = forewarn_here("learn", path, "--spec", toy_spec_path, "-o", tmp_path / "m.json")
    assert done.returncode == 2
    assert done.stderr.strip() == ("error: reading Parquet traces (" + str(path) + ") needs the parquet extra: "
                                   "pip install 'forewarn[parquet]'")
