"""Ingest formats: columnar arrays and action-only embodied logs, each with malformed examples."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from forewarn.domains.embodied import HouseholdWorld
from forewarn.errors import ForewarnError, TraceError
from forewarn.guard.ingest import InputFormat, detect_format, read_actions, read_columnar, read_input
from forewarn.guard.traces import Run, read_runs


def flatten(state: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in state.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def to_columnar(run: Run, *, nested: bool = True) -> dict[str, Any]:
    columns: dict[str, list[Any]] = {}
    flat = [flatten(step["state"]) for step in run.steps]
    for name in flat[0]:
        columns[name] = [f[name] for f in flat]
    columns["t"] = [step.get("t") for step in run.steps]
    columns["action"] = [step.get("action") for step in run.steps]
    if nested:
        return {"id": run.id, "meta": run.meta, "columns": columns}
    return {"id": run.id, "meta": run.meta, **columns}


@pytest.fixture(scope="module")
def drives(tmp_path_factory: pytest.TempPathFactory) -> list[Run]:
    from forewarn.domains.driving import generate_traces

    path = tmp_path_factory.mktemp("drives") / "drives.jsonl"
    generate_traces(3, 5, path)
    return list(read_runs(path))


def test_columnar_driving_logs_read_back_as_the_same_runs(drives: list[Run], tmp_path: Path) -> None:
    lines = tmp_path / "drives.columns.jsonl"
    lines.write_bytes(b"\n".join(orjson.dumps(to_columnar(r, nested=i % 2 == 0)) for i, r in enumerate(drives)))
    document = tmp_path / "drives.columns.json"
    document.write_text(json.dumps([to_columnar(r) for r in drives], indent=2), encoding="utf-8")
    single = tmp_path / "one.json"
    single.write_text(json.dumps(to_columnar(drives[0]), indent=1), encoding="utf-8")
    for path in (lines, document):
        assert detect_format(path) is InputFormat.columnar
        back = list(read_columnar(path))
        assert [(r.id, r.meta, r.steps) for r in back] == [(r.id, r.meta, r.steps) for r in drives]
    [one] = read_input([single])
    assert one.steps == drives[0].steps and one.steps[0]["state"]["light"]["color"] in {"green", "yellow", "red"}
    # the default resampling path works on columnar input too
    [coarse] = read_input([single], period=0.5)
    assert len(coarse.steps) < len(drives[0].steps)


def test_custom_time_and_action_columns(tmp_path: Path) -> None:
    path = tmp_path / "custom.jsonl"
    path.write_text('{"id": "c", "ts": [0, 2.5], "cmd": ["go", null], "speed": [1, 2]}\n', encoding="utf-8")
    [run] = read_columnar(path, time_column="ts", action_column="cmd")
    assert run.steps == [{"state": {"speed": 1}, "t": 0, "action": "go"}, {"state": {"speed": 2}, "t": 2.5}]


COLUMNAR_ERRORS = [
    ('{"id": "c", "columns": {"a": [true, false], "b": [1]}}', ":1: columns.b: has 1 values but column 'a' has 2"),
    ('{"id": "c", "a": true}', ":1: a: expected an array (one value per step), got a boolean"),
    ('{"id": "c", "columns": {"a": [], "b": []}}', ":1: columns.a: a run needs at least one step"),
    ('{"id": "c", "columns": {"a": [true], "t": ["x"]}}', ":1: columns.t[0]: expected a number of seconds"),
    ('{"id": "c", "columns": {"x": [1], "x.y": [2]}}', "column 'x' is a value, so 'x.y' cannot nest inside it"),
    ('{"id": "c", "columns": [1, 2]}', ":1: columns: expected an object of arrays, got a list"),
    ('{"id": "c", "columns": {"a": [1]}, "extra": [1]}', "unexpected key(s) ['extra'] beside 'columns'"),
    ('{"id": "c", "columns": {"t": [0.0]}}', "no state column"),
    ('{"id": true, "columns": {"a": [1]}}', ":1: id: expected a string, got a boolean"),
    ('{"id": "c", "meta": [], "a": [1]}', ":1: meta: expected an object, got a list"),
    ('{"id": "c"}', ":1: no columns"),
    ('{"id": "ok", "a": [1]}\n{"id": "broken", "a": [1}', ":2: not valid JSON"),
    ('[{"id": "ok", "a": [1]}, 7]', ": [1]: a columnar run must be a JSON object, got a number"),
]


@pytest.mark.parametrize(("text", "fragment"), COLUMNAR_ERRORS)
def test_malformed_columnar_runs_name_file_line_and_column(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text + "\n", encoding="utf-8")
    with pytest.raises(TraceError) as caught:
        list(read_columnar(path))
    assert str(caught.value).startswith(str(path)) and fragment in str(caught.value), str(caught.value)


@pytest.fixture(scope="module")
def episodes(tmp_path_factory: pytest.TempPathFactory) -> list[Run]:
    from forewarn.domains.embodied import generate_traces, hazard_tasks

    task = hazard_tasks(("Microwave",))[0]
    path = tmp_path_factory.mktemp("episodes") / "episodes.jsonl"
    generate_traces([task], 12, 3, path)
    return list(read_runs(path))


def to_action_log(run: Run, style: str) -> dict[str, Any]:
    steps = run.steps[1:]
    log: dict[str, Any] = {"id": run.id, "task": run.meta["task"], "task_success": run.meta["success"]}
    if style == "lists":
        log["actions"] = [s["action"] for s in steps]
        log["success"] = [s["state"]["agent"]["last_action_success"] for s in steps]
        log["t"] = [s["t"] for s in steps]
    else:  # one object per action, the task named by its instruction
        from forewarn.domains.embodied import load_tasks

        del log["task"]
        log["instruction"] = next(t.instruction for t in load_tasks() if t.id == run.meta["task"])
        log["actions"] = [{"action": s["action"], "success": s["state"]["agent"]["last_action_success"],
                           "t": s["t"]} for s in steps]
    return log


@pytest.mark.parametrize("style", ["lists", "objects"])
def test_action_logs_replay_to_the_logged_states(episodes: list[Run], tmp_path: Path, style: str) -> None:
    from forewarn.domains.embodied import parse_action

    path = tmp_path / f"actions-{style}.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(to_action_log(r, style)) for r in episodes))
    assert detect_format(path) is InputFormat.actions
    back = list(read_input([path], world=HouseholdWorld()))
    assert any(not s["state"]["agent"]["last_action_success"] for r in episodes for s in r.steps[1:]), \
        "the sample should contain failed actions"
    for original, ingested in zip(episodes, back, strict=True):
        assert [s["state"] for s in ingested.steps] == [s["state"] for s in original.steps]
        assert [s.get("t") for s in ingested.steps] == [s.get("t") for s in original.steps]
        assert [s.get("action") for s in ingested.steps[1:]] == [
            str(parse_action(s["action"])) for s in original.steps[1:]]
        assert ingested.meta["task"] == original.meta["task"]
        assert ingested.meta["success"] == original.meta["success"]


GOOD = {"id": "e", "task": "unsafe-0002", "actions": ["find Egg", "pick Egg"]}
ACTION_ERRORS: list[tuple[dict[str, Any], str]] = [
    ({**GOOD, "task": "unsafe-9999"}, "task: unknown task 'unsafe-9999'"),
    ({"id": "e", "actions": ["find Egg"]}, "task: missing: which task (scene) the actions ran in"),
    ({**GOOD, "actions": "find Egg"}, "actions: expected a list, got a string"),
    ({**GOOD, "actions": ["find Egg", "fly Egg"]}, "actions[1]: action 'fly Egg' does not parse: unknown verb"),
    ({**GOOD, "actions": ["find Egg", 3]}, "actions[1]: expected an action string such as 'pick Egg', got a number"),
    ({**GOOD, "success": [True]}, "success: has 1 entries but there are 2 actions"),
    ({**GOOD, "success": [True, "yes"]}, "success[1]: expected a boolean, got a string"),
    ({**GOOD, "actions": ["put Microwave"], "success": [True]},
     "actions[0]: 'put Microwave' succeeded in the log but cannot succeed in the symbolic household"),
    ({**GOOD, "actions": ["find Egg", {"action": "pick Egg", "t": "soon"}]}, "actions[1].t: expected a number"),
    ({**GOOD, "actions": [{"action": "find Egg", "t": 1.0}, "pick Egg"]},
     "some actions have a time 't' and others not"),
    ({**GOOD, "task_success": "yes"}, "task_success: expected a boolean, got a string"),
]


@pytest.mark.parametrize(("log", "fragment"), ACTION_ERRORS)
def test_malformed_action_logs_name_file_line_and_field(tmp_path: Path, log: dict[str, Any], fragment: str) -> None:
    path = tmp_path / "bad-actions.jsonl"
    path.write_bytes(orjson.dumps(GOOD) + b"\n" + orjson.dumps(log) + b"\n")
    with pytest.raises(TraceError) as caught:
        list(read_actions(path, HouseholdWorld()))
    assert str(caught.value).startswith(f"{path}:2: ") and fragment in str(caught.value), str(caught.value)


def test_a_mismatch_can_defer_to_the_simulator(tmp_path: Path) -> None:
    path = tmp_path / "mismatch.jsonl"
    path.write_bytes(orjson.dumps({**GOOD, "actions": ["put Microwave", "find Egg"], "success": [True, True]}))
    [run] = read_actions(path, HouseholdWorld(), on_mismatch="simulator")
    assert run.steps[1]["state"]["agent"]["last_action_success"] is False
    assert run.steps[2]["state"]["agent"]["found"] == "Egg"
    assert "t" not in run.steps[0]  # no times logged, none made up


def test_auto_detection_falls_back_to_the_contract(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text("{not json\n", encoding="utf-8")
    assert detect_format(broken) is InputFormat.jsonl
    with pytest.raises(TraceError, match=r"broken.jsonl:1: not valid JSON"):
        list(read_input([broken]))
    missing = tmp_path / "absent.jsonl"
    with pytest.raises(TraceError, match="cannot read traces"):
        list(read_input([missing]))


def test_action_logs_need_a_world_to_replay_in(tmp_path: Path) -> None:
    """The ingest knows no domain: a library call names the world (the CLI sets the household's)."""
    from forewarn.guard.ingest import worlds

    path = tmp_path / "actions.jsonl"
    path.write_bytes(orjson.dumps(GOOD) + b"\n")
    saved = worlds._default
    worlds.use_world(None)
    try:
        with pytest.raises(ForewarnError, match="replayed in a domain's world, and none is set"):
            list(read_actions(path))
        worlds.use_world(HouseholdWorld)
        [run] = read_input([path])
    finally:
        worlds.use_world(saved)
    assert run.meta["task"] == "unsafe-0002" and run.steps[-1]["action"] == "pick Egg"
