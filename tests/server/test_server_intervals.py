"""Confidence intervals through the sidecar: decisions carry ci_low, ci_high and visits, and the
policy's act_on and min_visits are per-session overrides like the thresholds."""
from __future__ import annotations

from pathlib import Path

import httpx

from _sidecar import ServerThread, auth, egg_state
from forewarn.guard import Guard, Policy
from forewarn.guard.client import Client
from forewarn.guard.spec import Action, Thresholds, Trigger


def test_decisions_carry_the_interval_over_http(server: ServerThread, agent: Client, http: httpx.Client,
                                                builtin_path: Path) -> None:
    local = Guard.load(builtin_path).session()
    remote = agent.session()
    for state in (egg_state(), egg_state(holding=True), egg_state(in_microwave=True, closed=True)):
        expected = local.observe(state)
        got = remote.observe(state)
        assert expected.ci_low is not None and expected.visits is not None
        assert (got.ci_low, got.ci_high, got.visits) == (expected.ci_low, expected.ci_high, expected.visits)
        assert got.lower == expected.lower and got.upper == expected.upper  # Storm's bounds, apart
        assert got.properties[0].ci_low == expected.properties[0].ci_low
        assert got.properties[0].ci_high == expected.properties[0].ci_high
    raw = http.post(f"/v1/sessions/{remote.id}/preview", json={"state": egg_state()}, headers=auth("agent")).json()
    assert {"ci_low", "ci_high", "visits", "lower", "upper"} <= set(raw)
    assert {"ci_low", "ci_high"} <= set(raw["properties"][0])


def test_act_on_and_min_visits_are_session_overrides(agent: Client, http: httpx.Client, builtin_path: Path) -> None:
    state = egg_state(holding=True)
    decision = Guard.load(builtin_path).decide(state)
    assert decision.p_safe is not None and decision.p_unsafe is not None and decision.ci_high is not None
    assert decision.visits
    theta = 1 - (decision.p_unsafe + decision.ci_high) / 2  # between the point and the pessimistic p_safe
    # level: the first step is decided on its risk, not on its rise (the sidecar's default, increase)
    point = agent.session(Policy(Thresholds(stop=theta), unseen_state=Action.ALLOW, trigger=Trigger.LEVEL))
    upper = agent.session({"thresholds": {"stop": theta}, "act_on": "upper", "trigger": "level"})
    assert upper.info["policy"]["act_on"] == "upper"
    assert point.observe(state).action is Action.ALLOW
    assert upper.observe(state).action is Action.STOP
    thin = agent.session({"min_visits": decision.visits + 1, "unseen_state": "reflect", "trigger": "level",
                          "thresholds": {"reflect": None, "ask_human": None, "stop": None}})
    got = thin.observe(state)
    assert got.action is Action.REFLECT and "min_visits" in got.message
    (builtin,) = [m for m in agent.models() if m["name"] == "builtin"]
    assert builtin["intervals"]["method"] == "clopper_pearson+outcomes" and builtin["policy"]["min_visits"] == 0
    response = http.post("/v1/sessions", json={"policy": {"min_visits": -1}}, headers=auth("agent"))
    assert response.status_code in (400, 422) and "min_visits" in response.text
