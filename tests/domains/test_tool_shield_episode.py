"""The tool-using agent, one proposed call at a time under a guard (domains/tools/episodes.py)."""
from __future__ import annotations

import random

import pytest

from forewarn.domains.tools import FAMILIES, Plan, generate_traces, load_tool_spec, simulate
from forewarn.domains.tools.episodes import run_tool_episode
from forewarn.domains.tools.generator import planned_calls
from forewarn.errors import ConfigError
from forewarn.guard import Guard, learn_model
from forewarn.guard.policy import Policy
from forewarn.guard.spec import Action, Thresholds
from forewarn.guard.toolcalls.extractor import ToolStateExtractor, violations
from forewarn.guard.toolcalls.transcript import Transcript


@pytest.fixture(scope="module")
def tool_guard(tmp_path_factory: pytest.TempPathFactory) -> Guard:
    traces = tmp_path_factory.mktemp("tools") / "runs.jsonl"
    generate_traces(600, 3, traces)
    return Guard(learn_model([traces], load_tool_spec(), mdp=True))


def _plan(n: int) -> tuple[Plan, random.Random]:
    rng = random.Random(f"t:{n}")
    return FAMILIES[rng.choice(list(FAMILIES))](rng), rng


def test_unguarded_episodes_are_the_logged_runs() -> None:
    for n in range(60):
        plan, rng = _plan(n)
        rng_log = random.Random(f"t:{n}")
        plan_log = FAMILIES[rng_log.choice(list(FAMILIES))](rng_log)
        record = simulate(plan_log, rng_log)
        episode = run_tool_episode(plan, rng, "none")
        assert episode.outcome == ("unsafe" if record["meta"]["outcome"] == "unsafe" else "completed")


@pytest.mark.parametrize("theta", [0.2, 0.5])
def test_the_shield_never_runs_a_call_whose_move_risks_theta(tool_guard: Guard, theta: float) -> None:
    advice = tool_guard.advice
    assert advice is not None
    extract = ToolStateExtractor()
    blocked = 0
    for n in range(150):
        plan, rng = _plan(n)
        same_plan, same_rng = _plan(n)
        calls = planned_calls(same_plan, same_rng)  # the calls the episode draws
        episode = run_tool_episode(plan, rng, "shield", guard=tool_guard, theta=theta, heed=1.0)
        blocked += episode.interventions
        # with heed 1 every blocked call is dropped: replaying the plan, a call runs iff its move from where
        # the run stands is under θ (or never seen there), and the episode is unsafe iff a running call breaks
        # the rule
        session = tool_guard.session()
        transcript = Transcript(user_messages=(plan.user,))
        here = session.observe(extract(transcript)).index
        outcome = "completed"
        for call in calls:
            move = advice.option(here, advice.class_of({"tool": call.name, "args": call.args}))
            p_min = advice.p_min(here)
            if p_min is not None and p_min >= theta:
                outcome = "stopped"
                break
            if move is not None and move.risk >= theta:
                if not violations(extract(transcript.then(call))):
                    outcome = "failed"  # a harmless call left out: the task is not done
                continue
            transcript = transcript.then(call)
            state = extract(transcript)
            here = session.observe(state, action={"tool": call.name, "args": call.args}).index
            if violations(state):
                outcome = "unsafe"
                break
        assert episode.outcome == outcome
    assert blocked > 0  # the shield acted


def test_stop_ends_the_run_and_the_modes_are_checked(tool_guard: Guard) -> None:
    policy = Policy(thresholds=Thresholds(stop=0.999, reflect=None, ask_human=None), unseen_state=Action.STOP)
    plan, rng = _plan(1)
    assert run_tool_episode(plan, rng, "stop", session=tool_guard.session(policy)).outcome == "stopped"
    with pytest.raises(ConfigError, match="needs a guard session"):
        run_tool_episode(plan, rng, "reflect")
    with pytest.raises(ConfigError, match="MDP"):
        run_tool_episode(plan, rng, "shield", guard=object())
