"""The same trace inputs through both engines: a folder of JSONL and Parquet parts, a glob."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from _support import CLI, toy_run

pytestmark = [pytest.mark.spark, pytest.mark.parquet]

RUNS = [toy_run(f"r{i}", [i % 3, (i * 5) % 4, i % 2]) for i in range(30)]


def model_only(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    for key in ("provenance", "checksum"):
        doc.pop(key)
    doc["check"].pop("seconds")
    if doc.get("intervals"):
        doc["intervals"].pop("seconds")
    return doc


def test_a_folder_of_jsonl_and_parquet_parts_and_a_glob_give_both_engines_the_same_model(
        spark: Any, tmp_path: Path, toy_spec_path: Path, forewarn_here: CLI) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "runs"
    folder.mkdir()
    for part in range(2):
        (folder / f"part-{part}.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in RUNS[part:20:2]))
    pq.write_table(pa.table({"id": [r["id"] for r in RUNS[20:]],
                             "steps": [orjson.dumps(r["steps"]).decode() for r in RUNS[20:]]}), folder / "part-2.parquet")
    (folder / "_SUCCESS").write_text("")
    (folder / ".part-0.jsonl.crc").write_text("not a run")
    for source, name in ((folder, "folder"), (folder / "part-*", "glob")):
        for engine in ("local", "spark"):
            done = forewarn_here("learn", source, "--spec", toy_spec_path, "-o", tmp_path / f"{name}-{engine}.json",
                                 "--engine", engine, "--format", "json")
            assert done.returncode == 0, done.stderr
            assert (done.json()["runs"], done.json()["steps"]) == (30, 90)
    models = [model_only(tmp_path / f"{n}-{e}.json") for n in ("folder", "glob") for e in ("local", "spark")]
    assert all(m == models[0] for m in models)
    local, distributed = (json.loads((tmp_path / f"folder-{e}.json").read_text())["provenance"]["inputs"]
                          for e in ("local", "spark"))
    assert [(i["path"], i["bytes"]) for i in local] == [(i["path"], i["bytes"]) for i in distributed]
