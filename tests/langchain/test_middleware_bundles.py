"""ForewarnMiddleware on a model bundle: each run's metadata picks its member."""
from __future__ import annotations

import orjson
import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig

from _lc_support import ToolLog
from forewarn.domains.tools import generate_traces, load_tool_spec
from forewarn.guard.bundle import learn_bundle
from forewarn.guard.bundle_guard import BundleGuard
from forewarn.guard.langchain import ForewarnMiddleware
from forewarn.guard.langchain.testing import ScriptedChatModel, tool_calls
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import Action


@pytest.fixture(scope="module")
def tool_bundle(tmp_path_factory: pytest.TempPathFactory) -> BundleGuard:
    folder = tmp_path_factory.mktemp("tool-bundle")
    raw = folder / "raw.jsonl"
    generate_traces(300, seed=5, path=raw)
    runs = [orjson.loads(line) for line in raw.read_bytes().splitlines()]
    for i, run in enumerate(runs):  # two teams with many runs, one with too few
        run["meta"] = {**run.get("meta", {}), "team": "rare" if i < 3 else ("ops" if i % 2 else "dev")}
    traces = folder / "runs.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in runs) + b"\n")
    bundle = learn_bundle([traces], load_tool_spec(), group_by="meta.team", min_group_runs=20)
    assert sorted(bundle.members) == ["dev", "ops"]
    return BundleGuard.load(bundle.save(folder / "bundle.json"))


def run_agent(middleware: ForewarnMiddleware, log: ToolLog, config: RunnableConfig | None = None) -> None:
    model = ScriptedChatModel(script=[tool_calls(("read_file", {"path": "README.md"})), "Read it."])
    create_agent(model, log.tools(), middleware=[middleware]).invoke(
        {"messages": [HumanMessage("Read README.md.")]}, config=config)


def test_each_run_gets_its_groups_member_from_the_invoke_metadata(tool_bundle: BundleGuard, log: ToolLog) -> None:
    mw = ForewarnMiddleware(tool_bundle)
    run_agent(mw, log, {"configurable": {"thread_id": "a"}, "metadata": {"team": "ops"}})
    run_agent(mw, log, {"configurable": {"thread_id": "b"}, "metadata": {"team": "rare"}})
    run_agent(mw, log, {"configurable": {"thread_id": "c"}})
    assert log.names() == ["read_file"] * 3
    ops, rare, bare = (mw.get_run(t) for t in "abc")
    assert ops is not None and rare is not None and bare is not None
    ops_decisions = [h.decision for h in ops.session.history]
    assert len(ops_decisions) == 2 and {(d.member, d.fallback) for d in ops_decisions} == {("ops", False)}
    # the member's own values: the same as a plain guard on that member's model
    member = Guard(tool_bundle.bundle.members["ops"])
    assert [d.p_unsafe for d in ops_decisions] == [member.decide_bits(h.abstract, h.monitors).p_unsafe
                                                   for h in ops.session.history]
    assert {(h.decision.member, h.decision.group, h.decision.fallback) for h in rare.session.history} == \
        {("pooled", "rare", True)}
    assert {(h.decision.member, h.decision.group, h.decision.fallback) for h in bare.session.history} == \
        {("pooled", None, True)}
    assert all(h.decision.action is Action.ALLOW for h in ops.session.history)


def test_metadata_given_to_the_middleware(tool_bundle: BundleGuard, log: ToolLog) -> None:
    fixed = ForewarnMiddleware(tool_bundle, metadata={"team": "dev"})
    run_agent(fixed, log, {"metadata": {"team": "ops"}})  # the middleware's own metadata wins
    assert fixed.last_run is not None and fixed.last_run.session.history[-1].decision.member == "dev"
    mapped = ForewarnMiddleware(tool_bundle, metadata=lambda given: {"team": given.get("squad")})
    run_agent(mapped, log, {"metadata": {"squad": "ops"}})
    assert mapped.last_run is not None and mapped.last_run.session.history[-1].decision.member == "ops"
    assert mapped.last_run.session.metadata == {"team": "ops"}


def test_tool_guard_takes_the_runs_metadata(tool_bundle: BundleGuard) -> None:
    from forewarn.guard.langchain import ToolGuard

    ops = ToolGuard(tool_bundle, user_messages=["Read README.md."], metadata={"team": "ops"})
    assert ops.check("read_file", {"path": "README.md"}).member == "ops"
    assert ops.session.metadata == {"team": "ops"}
    unknown = ToolGuard(tool_bundle, user_messages=["Read README.md."])
    decision = unknown.check("read_file", {"path": "README.md"})
    assert (decision.member, decision.fallback) == ("pooled", True)


def test_members_keep_their_own_thresholds_under_the_middlewares_default_trigger(tool_bundle: BundleGuard,
                                                                                   log: ToolLog) -> None:
    from dataclasses import replace

    from forewarn.guard.evaluation.member_tune import write_member_thresholds
    from forewarn.guard.langchain import ToolGuard
    from forewarn.guard.spec import Thresholds, Trigger, parse_spec

    bundle = tool_bundle.bundle
    assert bundle.spec.text is not None
    text = write_member_thresholds(bundle.spec.text, "meta.team", {"ops": (Thresholds(reflect=0.999, ask_human=0.998,
                                                                                      stop=0.997), None)})
    own = BundleGuard(replace(bundle, spec=parse_spec(text)))
    mw = ForewarnMiddleware(own)
    run_agent(mw, log, {"configurable": {"thread_id": "o"}, "metadata": {"team": "ops"}})
    run_agent(mw, log, {"configurable": {"thread_id": "d"}, "metadata": {"team": "dev"}})
    ops, dev = mw.get_run("o"), mw.get_run("d")
    assert ops is not None and dev is not None
    assert ops.session.guard.policy.thresholds == Thresholds(reflect=0.999, ask_human=0.998, stop=0.997)
    assert dev.session.guard.policy.thresholds == bundle.spec.guard.thresholds
    # the middleware's default trigger applies to every member's own policy
    assert ops.session.guard.policy.trigger is Trigger.INCREASE and dev.session.guard.policy.trigger is Trigger.INCREASE
    tool = ToolGuard(own, user_messages=["Read README.md."], metadata={"team": "ops"})
    assert tool.session.guard.policy.thresholds.reflect == 0.999
