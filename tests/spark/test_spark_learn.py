"""Spark learns the model the single-process learner learns: the same counts, the same file but provenance."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from _support import toy_run
from forewarn.errors import TraceError
from forewarn.guard.learning import TransitionCounts, count_transitions
from forewarn.guard.model import GuardModel
from forewarn.guard.pipeline import learn_model, read_trace_files
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.spec import Spec, load_spec

pytestmark = pytest.mark.spark


def spark_counts(spark: Any, source: Any, spec: Spec, **options: Any) -> TransitionCounts:
    from forewarn.guard.spark import count_transitions_spark

    return count_transitions_spark(source, spec, spark=spark, **options)[0]


def local_counts(paths: list[Path], spec: Spec, **options: Any) -> TransitionCounts:
    return count_transitions(read_trace_files(paths, period=options.get("period")), PredicateSet(spec))


def same_counts(a: TransitionCounts, b: TransitionCounts) -> None:
    assert dict(a.counts) == dict(b.counts)
    assert dict(a.initial) == dict(b.initial)
    assert (a.unsafe, a.runs, a.steps, a.unsafe_runs) == (b.unsafe, b.runs, b.steps, b.unsafe_runs)


def document(model: GuardModel, tmp_path: Path, name: str) -> dict[str, Any]:
    """The model file as written, without what may differ (provenance, timings, the checksum over them)."""
    doc: dict[str, Any] = json.loads(model.save(tmp_path / name).read_text())
    for key in ("provenance", "checksum"):
        doc.pop(key)
    doc["check"].pop("seconds")
    if doc.get("intervals"):
        doc["intervals"].pop("seconds")
    return doc


def assert_same_model(spark: Any, paths: list[Path], spec: Spec, tmp_path: Path, **options: Any) -> GuardModel:
    from forewarn.guard.spark import learn_model_spark

    local = learn_model(paths, spec, **options)
    blocks = sum(p.stat().st_size for p in paths) // 5 + 1  # several partitions per file, of uneven size
    distributed = learn_model_spark([str(p) for p in paths], spec, spark=spark, split_bytes=blocks, **options)
    assert document(distributed, tmp_path, "spark.json") == document(local, tmp_path, "local.json")
    assert distributed.provenance["engine"]["name"] == "spark"
    assert (distributed.provenance["runs"], distributed.provenance["steps"]) == \
        (local.provenance["runs"], local.provenance["steps"])
    return distributed


def test_tools_domain(spark: Any, tmp_path: Path) -> None:
    from forewarn.domains.tools.generator import generate_traces
    from forewarn.domains.tools.spec import load_tool_spec

    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    generate_traces(120, 1, paths[0])
    generate_traces(40, 2, paths[1])  # uneven files, split into blocks of uneven size below
    spec = load_tool_spec()
    same_counts(spark_counts(spark, [str(p) for p in paths], spec, split_bytes=30_000), local_counts(paths, spec))
    model = assert_same_model(spark, paths, spec, tmp_path)
    assert model.provenance["inputs"] == [{"path": str(p), "sha256": None, "bytes": p.stat().st_size}
                                          for p in paths]


def tool_spec_with_memory(memory: str) -> Spec:
    """The tools domain's spec remembering recent actions (learning.memory)."""
    from forewarn.domains.tools.spec import SPEC_PATH
    from forewarn.guard.spec import parse_spec

    text = SPEC_PATH.read_text(encoding="utf-8").replace("learning:\n", f"learning:\n  memory: {memory}\n", 1)
    return parse_spec(text)


@pytest.mark.parametrize("memory", ["{actions: 2}", "{actions: 1, action_class: tool, previous: true}"])
def test_tools_domain_with_action_memory(spark: Any, tmp_path: Path, memory: str) -> None:
    """Partitions write action histories portably; the driver numbers the classes as the local learner does."""
    from forewarn.domains.tools.generator import generate_traces

    paths = [tmp_path / "a.jsonl", tmp_path / "b.jsonl"]
    generate_traces(120, 1, paths[0])
    generate_traces(40, 2, paths[1])
    spec = tool_spec_with_memory(memory)
    from forewarn.guard.memory import build_memory

    predicates = PredicateSet(spec)
    encoder = build_memory(spec.learning.memory, predicates.width)
    assert encoder is not None
    local = count_transitions(read_trace_files(paths, period=None), predicates, encode=encoder.encode_run)
    same_counts(spark_counts(spark, [str(p) for p in paths], spec, split_bytes=30_000), local)
    model = assert_same_model(spark, paths, spec, tmp_path)
    assert model.dtmc.actions and len(model.dtmc.states) > 20


def test_driving_domain_resampled_with_its_transition_rule(spark: Any, tmp_path: Path) -> None:
    from forewarn.domains.driving import generate_traces, load_driving_spec

    paths = [tmp_path / "regular.jsonl", tmp_path / "irregular.jsonl"]
    generate_traces(12, 7, paths[0])
    generate_traces(6, 8, paths[1], irregular=True)
    assert_same_model(spark, paths, load_driving_spec(), tmp_path, period=0.1)


def test_embodied_domain(spark: Any, tmp_path: Path) -> None:
    from forewarn.domains.embodied.episodes import generate_traces
    from forewarn.domains.embodied.spec import write_spec
    from forewarn.domains.embodied.support import hazard_tasks

    task = hazard_tasks()[0]
    path = tmp_path / "embodied.jsonl"
    generate_traces([task], runs_per_task=30, rng_seed=3, path=path)
    assert_same_model(spark, [path], load_spec(write_spec(task, tmp_path / "spec.yaml")), tmp_path)


def test_a_directory_reads_like_its_files_in_order(spark: Any, tmp_path: Path, toy_spec: Spec) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    for name, states in (("b.jsonl", [[0, 1, 0]]), ("a.jsonl", [[0, 2, 3], [1, 1]])):
        (folder / name).write_text("".join(orjson.dumps(toy_run(f"{name}{i}", s)).decode() + "\n"
                                           for i, s in enumerate(states)))
    (folder / "_SUCCESS").write_text("")
    paths = [folder / "a.jsonl", folder / "b.jsonl"]
    same_counts(spark_counts(spark, [str(folder)], toy_spec), local_counts(paths, toy_spec))


MALFORMED = ['{"id": "r2", "steps": []}', "not json", '{"id": "r4", "steps": [{"state": {"a": true}}]}',
             '[1, 2]', '{"steps": [{"state": {"a": false, "b": 1}}, {"state": 7}]}']


def mixed_lines(count: int) -> list[str]:
    """Good runs with a malformed line (of five kinds) every seventh, and blank lines."""
    lines = []
    for i in range(count):
        if i % 7 == 3:
            lines.append(MALFORMED[i // 7 % len(MALFORMED)])
        elif i % 11 == 5:
            lines.append("   ")
        else:
            lines.append(orjson.dumps(toy_run(f"r{i}", [i % 3, (i * 5) % 4, i % 2])).decode())
    return lines


def local_errors(path: Path, spec: Spec) -> tuple[TransitionCounts, list[str]]:
    """What the single-process reader and abstraction make of each line, skipping the bad ones."""
    from forewarn.guard.traces import abstract_run, parse_run

    predicates, counts, errors = PredicateSet(spec), TransitionCounts(), []
    for number, raw in enumerate(path.read_bytes().splitlines(keepends=True), start=1):
        if raw.isspace():
            continue
        try:
            counts.add(abstract_run(parse_run(raw, source=str(path), line=number), predicates), predicates)
        except TraceError as exc:
            errors.append(str(exc))
    return counts, errors


def test_malformed_lines_stop_at_the_first_and_skip_with_the_local_messages(
        spark: Any, tmp_path: Path, toy_spec: Spec, write_runs: Callable[..., Path]) -> None:
    path = write_runs(mixed_lines(150), "mixed.jsonl")
    expected_counts, expected_errors = local_errors(path, toy_spec)
    assert len(expected_errors) > 15
    with pytest.raises(TraceError) as stopped:
        learn_model([path], toy_spec)
    assert str(stopped.value) == expected_errors[0]
    with pytest.raises(TraceError) as distributed:
        spark_counts(spark, [str(path)], toy_spec, split_bytes=2500)
    assert str(distributed.value) == expected_errors[0]

    skipped: list[TraceError] = []
    counts = spark_counts(spark, [str(path)], toy_spec, split_bytes=2500, on_error="skip", on_bad=skipped.append)
    assert [str(e) for e in skipped] == expected_errors  # every bad line, in file order, as the local reader
    assert [e.line for e in skipped] == [int(m.split(":")[1]) for m in expected_errors]
    same_counts(counts, expected_counts)


def test_uneven_and_empty_partitions_of_a_dataframe(spark: Any, toy_spec: Spec, tmp_path: Path,
                                                    write_runs: Callable[..., Path]) -> None:
    """Rows spread 0 / 1 / many / a few over four partitions count as one file does."""
    from pyspark.sql import Row

    lines = [line for line in mixed_lines(80) if not line.isspace() and line not in MALFORMED]
    sizes = [0, 1, 60, len(lines) - 61]
    owner = [p for p, size in enumerate(sizes) for _ in range(size)]
    rdd = spark.sparkContext.parallelize(list(enumerate(lines)), 4).partitionBy(4, lambda i: owner[i])
    assert rdd.glom().map(len).collect() == sizes
    frame = spark.createDataFrame(rdd.map(lambda pair: Row(value=pair[1])))
    assert frame.rdd.glom().map(len).collect() == sizes
    path = write_runs(lines, "good.jsonl")
    same_counts(spark_counts(spark, frame, toy_spec), local_counts([path], toy_spec))


def test_parquet_with_json_columns_and_row_numbers(spark: Any, toy_spec: Spec, tmp_path: Path,
                                                   write_runs: Callable[..., Path]) -> None:
    lines = mixed_lines(40)
    runs = [orjson.loads(line) for line in lines if not line.isspace() and line not in MALFORMED]
    table = [(str(r["id"]), orjson.dumps(r["steps"]).decode(), "{}") for r in runs]
    table.insert(2, ("bad", '[{"state": 3}]', "{}"))
    folder = tmp_path / "runs.parquet"
    spark.createDataFrame(table, "id string, steps string, meta string").coalesce(1).write.parquet(str(folder))
    with pytest.raises(TraceError, match=r"runs\.parquet/part-[^:]+\.parquet:3: steps\[0\]\.state: "):
        spark_counts(spark, [str(folder)], toy_spec)
    counts = spark_counts(spark, [str(folder)], toy_spec, on_error="skip")
    path = write_runs([orjson.dumps(r).decode() for r in runs], "same.jsonl")
    same_counts(counts, local_counts([path], toy_spec))


def test_a_missing_path_and_an_empty_input_are_user_errors(spark: Any, tmp_path: Path, toy_spec: Spec) -> None:
    with pytest.raises(TraceError, match=r"nowhere.jsonl: cannot read traces: No such file or directory"):
        spark_counts(spark, [str(tmp_path / "nowhere.jsonl")], toy_spec)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    from forewarn.guard.spark import learn_model_spark

    with pytest.raises(TraceError, match="no runs to learn from"):
        learn_model_spark([str(empty)], toy_spec, spark=spark)


def test_group_by_learns_the_local_bundle_and_replays_it(spark: Any, tmp_path: Path, toy_spec: Spec,
                                                         write_runs: Callable[..., Path]) -> None:
    from forewarn.guard.bundle import learn_bundle
    from forewarn.guard.bundle_guard import load_guard
    from forewarn.guard.replay import replay
    from forewarn.guard.spark import learn_bundle_spark, replay_spark
    from forewarn.guard.traces import read_runs

    runs = []
    for i in range(90):
        run = toy_run(f"r{i}", [i % 3, (i * 5) % 4, i % 2] if i % 3 else [0, 1, 1, 2])
        if i % 9:  # a few runs have no task: they go to the pooled model only
            run["meta"] = {"task": ["cook", "clean", "rare"][0 if i < 40 else 1 if i < 85 else 2]}
        runs.append(orjson.dumps(run).decode())
    path = write_runs(runs, "tasks.jsonl")
    local = learn_bundle([path], toy_spec, group_by="meta.task", min_group_runs=6)
    distributed = learn_bundle_spark([str(path)], toy_spec, group_by="meta.task", min_group_runs=6, spark=spark,
                                     split_bytes=path.stat().st_size // 4 + 1)
    assert sorted(distributed.members) == sorted(local.members) == ["clean", "cook"]  # "rare" has too few runs
    assert (distributed.group_runs, distributed.runs_without_group) == (local.group_runs, local.runs_without_group)
    assert document(distributed.pooled, tmp_path, "sp.json") == document(local.pooled, tmp_path, "lp.json")
    for name in local.members:
        assert document(distributed.members[name], tmp_path, f"s-{name}.json") == \
            document(local.members[name], tmp_path, f"l-{name}.json")
    guard = load_guard(local.save(tmp_path / "bundle.json"))
    here = replay(guard, read_runs(path), [0.3, 0.8])
    there = replay_spark([str(path)], guard, [0.3, 0.8], spark=spark, split_bytes=path.stat().st_size // 3 + 1)
    assert there.replays == here.replays and there.to_dict() == here.to_dict()
