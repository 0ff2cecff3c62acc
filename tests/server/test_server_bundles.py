"""The sidecar with session metadata (predicates reading ``meta``) and with model bundles."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from _sidecar import KEYS, ServerThread, settings
from _support import TOY_SPEC, toy_run
from forewarn.errors import PredicateError, ThresholdWarning
from forewarn.guard.bundle import learn_bundle
from forewarn.guard.bundle_guard import BundleGuard
from forewarn.guard.client import Client
from forewarn.guard.pipeline import learn_model
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import parse_spec

KITCHEN = """\
name: kitchen
predicates:
  stove_task: 'meta.task_hazard == "stove"'
  burner_on: 'state.on'
  left: 'state.left'
unsafe: 'stove_task && burner_on && left'
guard:
  thresholds: {reflect: 0.9, ask_human: 0.5, stop: 0.2}
  unseen_state: ask_human
"""


def write(path: Path, runs: list[dict[str, Any]]) -> Path:
    path.write_text("\n".join(orjson.dumps(r).decode() for r in runs) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("meta-models")
    kitchen = []
    for i in range(12):
        hazard = "stove" if i % 2 else "knife"
        steps = [{"state": {"on": on, "left": left}} for on, left in ((False, False), (True, False), (True, True))]
        kitchen.append({"id": f"k{i}", "steps": steps if i % 4 != 1 else steps[:2], "meta": {"task_hazard": hazard}})
    grouped = []
    for task, runs in (("t1", [[0, 1, 3]] * 6 + [[0, 1, 0]] * 2), ("t2", [[0, 1, 0]] * 8), ("t3", [[0, 1, 3]])):
        for i, bits in enumerate(runs):
            grouped.append({**toy_run(f"{task}-{i}", bits), "meta": {"task": task}})
    kitchen_model = learn_model([write(folder / "kitchen.jsonl", kitchen)], parse_spec(KITCHEN))
    bundle = learn_bundle([write(folder / "grouped.jsonl", grouped)], parse_spec(TOY_SPEC), group_by="meta.task",
                          min_group_runs=4)
    return {"kitchen": kitchen_model.save(folder / "kitchen.json"), "bundle": bundle.save(folder / "bundle.json")}


@pytest.fixture
def sidecar(tmp_path: Path, models: dict[str, Path]) -> Any:
    # a cache of one live session: a second session evicts the first, which then resumes from the database
    with ServerThread(settings(tmp_path / "forewarn.db", {"kitchen": models["kitchen"]}, session_cache=1)) as server:
        yield server


def test_sessions_carry_their_metadata_to_the_predicates(sidecar: ServerThread, models: dict[str, Path]) -> None:
    local = Guard.load(models["kitchen"])
    with pytest.warns(ThresholdWarning, match=r"^reflect θ 0.9 > p_safe 0.54 in 1 of 2 initial states"):
        local.session()  # its first session warns (the sidecar's own sessions log it at start)
    on = {"on": True, "left": False}
    with Client(sidecar.url, api_key=KEYS["agent"]) as agent:
        stove = agent.session(metadata={"task_hazard": "stove"})
        knife = agent.session(metadata={"task_hazard": "knife"})  # evicts `stove` from memory
        assert stove.observe(on).p_unsafe == local.session(metadata={"task_hazard": "stove"}).observe(on).p_unsafe
        assert knife.observe(on).p_unsafe == local.session(metadata={"task_hazard": "knife"}).observe(on).p_unsafe
        # resumed from the database after eviction: the metadata came back with it
        leave = {"on": True, "left": True}
        assert stove.preview(leave).unsafe_now and not knife.preview(leave).unsafe_now
        bare = agent.session()
        with pytest.raises(PredicateError, match="which the run's meta lacks") as caught:
            bare.observe(on)
        assert getattr(caught.value, "field", None) == "session.metadata"


def test_a_bundle_through_the_sidecar(sidecar: ServerThread, models: dict[str, Path]) -> None:
    local = BundleGuard.load(models["bundle"])
    a = {"a": True, "b": 0}
    with Client(sidecar.url, api_key=KEYS["admin"]) as admin, \
            Client(sidecar.url, api_key=KEYS["agent"]) as agent:
        loaded = admin.load_model("tasks", str(models["bundle"]))
        assert loaded["bundle"] == {"group_by": "meta.task", "min_group_runs": 4, "members": ["t1", "t2"],
                                    "groups_without_model": 1, "member_thresholds": {}}
        listed = {m["name"]: m for m in agent.models()}
        assert listed["tasks"]["bundle"]["members"] == ["t1", "t2"] and listed["kitchen"]["bundle"] is None
        cases: list[tuple[dict[str, str] | None, str, bool]] = [
            ({"task": "t1"}, "t1", False), ({"task": "t2"}, "t2", False), ({"task": "t3"}, "pooled", True),
            ({}, "pooled", True), (None, "pooled", True)]
        sessions = []
        for metadata, member, fallback in cases:
            session = agent.session(LEVEL, model="tasks", metadata=metadata)  # decided as the library's
            decision = session.observe(a)
            expected = local.session(metadata=metadata).observe(a)
            assert (decision.member, decision.fallback) == (member, fallback)
            assert decision.group == expected.group
            assert decision.p_unsafe == expected.p_unsafe and decision.action is expected.action
            assert decision.message == expected.message
            sessions.append((session, member))
        # each was evicted by the next (a cache of one): resumed, it is on the same member
        for session, member in sessions:
            assert session.observe({"a": False, "b": 0}).member == member


LEVEL = {"trigger": "level"}  # the library's Guard default; the sidecar's, with none set, is increase

OWN_THRESHOLDS = TOY_SPEC + """\
  member_thresholds:
    by: meta.task
    groups:
      t1: {thresholds: {reflect: 0.05, ask_human: 0.02, stop: 0.01}}
      t2: {thresholds: {reflect: 0.999, ask_human: 0.99}}
"""


def test_each_member_acts_on_its_own_thresholds_through_the_sidecar(sidecar: ServerThread,
                                                                    tmp_path: Path) -> None:
    grouped = []
    for task, runs in (("t1", [[0, 1, 3]] * 6 + [[0, 1, 0]] * 2), ("t2", [[0, 1, 0]] * 8)):
        grouped += [{**toy_run(f"{task}-{i}", bits), "meta": {"task": task}} for i, bits in enumerate(runs)]
    bundle = learn_bundle([write(tmp_path / "grouped.jsonl", grouped)], parse_spec(OWN_THRESHOLDS),
                          group_by="meta.task", min_group_runs=4)
    path = bundle.save(tmp_path / "own.json")
    local, plain = BundleGuard.load(path), BundleGuard(bundle.__class__(
        parse_spec(TOY_SPEC), bundle.group_by, bundle.min_group_runs, bundle.pooled, bundle.members,
        bundle.group_runs))
    a = {"a": True, "b": 0}
    with Client(sidecar.url, api_key=KEYS["admin"]) as admin, Client(sidecar.url, api_key=KEYS["agent"]) as agent:
        loaded = admin.load_model("own", str(path))
        assert loaded["bundle"]["member_thresholds"] == {
            "t1": {"reflect": 0.05, "ask_human": 0.02, "stop": 0.01},
            "t2": {"reflect": 0.999, "ask_human": 0.99, "stop": 0.2}}
        for task in ("t1", "t2"):
            remote = agent.session(LEVEL, model="own", metadata={"task": task})
            assert remote.info["policy"]["thresholds"] == local.member_policy(task).thresholds.model_dump()
            decision = remote.observe(a)
            expected = local.session(metadata={"task": task}).observe(a)
            assert (decision.action, decision.threshold, decision.p_unsafe) == \
                (expected.action, expected.threshold, expected.p_unsafe)
            # the spec's own thresholds would have acted otherwise on the same model
            assert plain.session(metadata={"task": task}).observe(a).action is not decision.action
        # a session's overrides apply over its member's own thresholds
        override = agent.session({"thresholds": {"stop": 0.0}}, model="own", metadata={"task": "t2"})
        assert override.info["policy"]["thresholds"] == {"reflect": 0.999, "ask_human": 0.99, "stop": 0.0}
