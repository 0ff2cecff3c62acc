from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from _support import WriteRuns, toy_run, toy_state
from forewarn.errors import TraceError
from forewarn.guard.pipeline import learn_model
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.spec import Spec, parse_spec
from forewarn.guard.traces import Run, abstract_run, file_digest, parse_run, read_runs

GOOD = '{"id": "ok", "steps": [{"state": {"a": false, "b": 0}}]}'


def test_reads_runs_with_their_optional_parts(write_runs: WriteRuns) -> None:
    path = write_runs([
        '{"id": "run-17", "steps": [{"state": {"a": true, "b": 1}, "action": "pick fork", "t": 0.5},'
        ' {"state": {"a": true, "b": 3}, "action": {"tool": "microwave"}, "t": 2}], "meta": {"task": "t20"}}',
        "",
        '{"id": 7, "steps": [{"state": {}}]}',
        '{"steps": [{"state": {"x": 1}}]}',
    ])
    runs = list(read_runs(path))
    assert [r.id for r in runs] == ["run-17", "7", "line-4"]
    assert [r.line for r in runs] == [1, 3, 4]
    assert runs[0].meta == {"task": "t20"} and runs[1].meta == {}
    assert runs[0].times() == [0.5, 2] and runs[1].times() == [None]
    assert list(runs[0].states()) == [{"a": True, "b": 1}, {"a": True, "b": 3}]
    assert runs[0].steps[1]["action"] == {"tool": "microwave"}
    assert all(r.source == str(path) for r in runs)


@pytest.mark.parametrize(("line", "field", "match"), [
    ('{"id": "x", "steps": [', None, "not valid JSON"),
    ("[1, 2]", None, "a run must be a JSON object, got a list"),
    ('"just a string"', None, "a run must be a JSON object, got a string"),
    ('{"id": "x"}', "steps", "missing or not a list"),
    ('{"id": "x", "steps": {"state": {}}}', "steps", "expected a list, got an object"),
    ('{"id": "x", "steps": []}', "steps", "a run needs at least one step"),
    ('{"id": "x", "steps": [{"state": {}}, 3]}', "steps[1]", "expected an object, got a number"),
    ('{"id": "x", "steps": [{"action": "go"}]}', "steps[0].state", "missing"),
    ('{"id": "x", "steps": [{"state": [1]}]}', "steps[0].state", "expected a JSON object, got a list"),
    ('{"id": "x", "steps": [{"state": null}]}', "steps[0].state", "expected a JSON object, got null"),
    ('{"id": "x", "steps": [{"state": {}, "t": "noon"}]}', "steps[0].t", "expected a number of seconds, got a string"),
    ('{"id": "x", "steps": [{"state": {}, "t": true}]}', "steps[0].t", "got a boolean"),
    ('{"id": "x", "steps": [{"state": {}, "action": 5}]}', "steps[0].action", "expected a string or an object"),
    ('{"id": "x", "steps": [{"state": {}, "action": ["a"]}]}', "steps[0].action", "got a list"),
    ('{"id": ["x"], "steps": [{"state": {}}]}', "id", "expected a string, got a list"),
    ('{"id": true, "steps": [{"state": {}}]}', "id", "expected a string, got a boolean"),
    ('{"id": "x", "steps": [{"state": {}}], "meta": "t20"}', "meta", "expected an object, got a string"),
])
def test_malformed_lines_name_the_file_line_and_field(write_runs: WriteRuns, line: str, field: str | None,
                                                     match: str) -> None:
    path = write_runs([GOOD, GOOD, line, GOOD])
    runs = read_runs(path)
    assert next(runs).id == "ok" and next(runs).id == "ok"  # streamed: good lines before it are read
    with pytest.raises(TraceError, match=match) as info:
        next(runs)
    error = info.value
    assert (error.source, error.line, error.field) == (str(path), 3, field)
    prefix = f"{path}:3: {field}: " if field else f"{path}:3: "
    assert str(error).startswith(prefix)


def test_an_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read traces") as info:
        list(read_runs(tmp_path / "absent.jsonl"))
    assert info.value.source == str(tmp_path / "absent.jsonl")


def test_parse_run_on_its_own() -> None:
    run = parse_run(GOOD, source="inline", line=9)
    assert (run.id, run.source, run.line) == ("ok", "inline", 9)


def test_abstract_run(toy_predicates: PredicateSet) -> None:
    run = parse_run(orjson.dumps({"id": "r", "steps": [{"state": toy_state(b)} for b in (0, 1, 3, 2)]}))
    assert abstract_run(run, toy_predicates) == [0, 1, 3, 2]


def test_a_field_the_state_lacks_names_line_step_predicate_and_field(write_runs: WriteRuns,
                                                                     toy_predicates: PredicateSet) -> None:
    bad = toy_run("r-bad", [0, 1, 0])
    del bad["steps"][2]["state"]["b"]
    path = write_runs([toy_run("r1", [0, 1]), bad])
    first, second = read_runs(path)
    assert abstract_run(first, toy_predicates) == [0, 1]
    with pytest.raises(TraceError) as info:
        abstract_run(second, toy_predicates)
    error = info.value
    assert (error.source, error.line) == (str(path), 2)
    assert error.field is not None and error.field.startswith("steps[2].state") and "r-bad" in error.field
    assert "predicate 'b'" in str(error) and "reads field 'b'" in str(error)


def test_a_predicate_returning_a_non_bool_is_reported(write_runs: WriteRuns) -> None:
    predicates = PredicateSet(parse_spec("predicates:\n  level: state.level\nunsafe: level\n"))
    path = write_runs(['{"id": "r", "steps": [{"state": {"level": true}}, {"state": {"level": 2}}]}'])
    [run] = read_runs(path)
    with pytest.raises(TraceError, match=r"steps\[1\]\.state.*predicate 'level' evaluates to int 2") as info:
        abstract_run(run, predicates)
    assert info.value.line == 1


def test_learning_from_a_file_with_a_bad_line_raises_and_writes_nothing(write_runs: WriteRuns, toy_spec: Spec,
                                                                        tmp_path: Path) -> None:
    path = write_runs([toy_run("r1", [0, 1, 3]), '{"id": "r2", "steps": []}', toy_run("r3", [0, 2])])
    with pytest.raises(TraceError) as info:
        learn_model([path], toy_spec)
    assert info.value.line == 2
    assert not list(tmp_path.glob("*.json"))


def test_an_empty_trace_file(toy_spec: Spec, tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n", encoding="utf-8")
    with pytest.raises(TraceError, match="no runs to learn from"):
        learn_model([path], toy_spec)
    with pytest.raises(TraceError, match="cannot read traces"):
        learn_model([tmp_path / "absent.jsonl"], toy_spec)


def test_file_digest_is_sha256(tmp_path: Path) -> None:
    import hashlib

    path = tmp_path / "blob"
    path.write_bytes(b"forewarn" * 1000)
    assert file_digest(path) == hashlib.sha256(b"forewarn" * 1000).hexdigest()


def test_resampling_holds_the_latest_state_at_each_period() -> None:
    import json

    from forewarn.guard.traces import parse_run, resample

    run = parse_run(json.dumps({"id": "x", "steps": [
        {"state": {"a": 1}, "t": 0.0, "action": "go"}, {"state": {"a": 2}, "t": 0.25},
        {"state": {"a": 3}, "t": 0.31}, {"state": {"a": 4}, "t": 0.5}]}))
    steps = resample(run, 0.1).steps
    assert [s["t"] for s in steps] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert [s["state"]["a"] for s in steps] == [1, 1, 1, 2, 3, 4]
    assert steps[0]["action"] == "go" and "action" not in steps[1]


def test_resampling_needs_times_that_go_forward() -> None:
    import json

    from forewarn.guard.traces import parse_run, resample

    with pytest.raises(TraceError) as info:
        resample(parse_run(json.dumps({"steps": [{"state": {}, "t": 0}, {"state": {}}]}), line=3), 0.1)
    assert info.value.line == 3 and info.value.field == "steps[1].t"
    with pytest.raises(TraceError, match="backwards"):
        resample(parse_run(json.dumps({"steps": [{"state": {}, "t": 1}, {"state": {}, "t": 0.5}]})), 0.1)


def test_resampling_keeps_a_last_state_between_grid_points() -> None:
    import json

    from forewarn.guard.traces import parse_run, resample

    run = parse_run(json.dumps({"steps": [{"state": {"a": 1}, "t": 0.0}, {"state": {"a": 2}, "t": 0.17}]}))
    steps = resample(run, 0.1).steps
    assert [s["t"] for s in steps] == [0.0, 0.1, 0.2] and steps[-1]["state"] == {"a": 2}


def test_counting_pauses_the_cyclic_gc_and_restores_it(write_runs: WriteRuns, toy_predicates: PredicateSet) -> None:
    import gc

    from forewarn.guard.learning import count_transitions

    seen: list[bool] = []

    def watched(runs: Iterator[Run]) -> Iterator[Run]:
        for run in runs:
            seen.append(gc.isenabled())
            yield run

    good = write_runs([toy_run("r1", [0, 1]), toy_run("r2", [0, 2])], name="good.jsonl")
    bad = write_runs([toy_run("r1", [0, 1]), '{"id": "r2", "steps": []}'], name="bad.jsonl")
    was = gc.isenabled()
    try:
        gc.enable()
        assert count_transitions(watched(read_runs(good)), toy_predicates).runs == 2
        assert seen == [False, False] and gc.isenabled()
        with pytest.raises(TraceError):
            count_transitions(read_runs(bad), toy_predicates)
        assert gc.isenabled()  # restored on error too
        gc.disable()
        count_transitions(read_runs(good), toy_predicates)
        assert not gc.isenabled()  # left as it was
    finally:
        (gc.enable if was else gc.disable)()


def test_lines_of_whitespace_are_skipped(write_runs: WriteRuns) -> None:
    path = write_runs([GOOD, " \t", GOOD, "\x0c"])
    assert [r.line for r in read_runs(path)] == [1, 3]


def test_the_first_bad_step_is_named(write_runs: WriteRuns) -> None:
    steps = [{"state": {"a": i}, "t": i, "action": "go"} for i in range(5)]
    steps[3]["t"] = "later"
    steps[4]["action"] = 7
    with pytest.raises(TraceError) as info:
        parse_run(orjson.dumps({"id": "x", "steps": steps}))
    assert info.value.field == "steps[3].t"
