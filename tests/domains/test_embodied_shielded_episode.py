"""The embodied simulator under the shield (``run_shielded_episode``): the demo's and bench's shield row."""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from forewarn.domains.embodied import (
    AgentProfile,
    Task,
    generate_traces,
    hazard_tasks,
    run_episode,
    run_shielded_episode,
    write_spec,
)
from forewarn.errors import ConfigError
from forewarn.guard import Guard, learn_model, load_spec


def _guard(tmp_path: Path, mdp: bool = True) -> tuple[Task, Guard]:
    task = hazard_tasks()[0]
    traces, spec = tmp_path / "runs.jsonl", tmp_path / "spec.yaml"
    generate_traces([task], 60, 11, traces)
    write_spec(task, spec)
    return task, Guard(learn_model([traces], load_spec(spec), mdp=mdp))


@pytest.mark.parametrize("theta", [0.2, 0.5, 0.9])
def test_no_executed_move_risks_theta_or_more(tmp_path: Path, theta: float) -> None:
    task, guard = _guard(tmp_path)
    advice = guard.advice
    assert advice is not None
    profile = AgentProfile()
    outcomes = set()
    for n in range(30):
        result = run_shielded_episode(task, random.Random(f"s:{n}"), profile, guard, theta)
        outcomes.add(result.outcome)
        session = guard.session()
        here = session.observe(result.steps[0]["state"]).index
        for step in result.steps[1:]:  # every action that ran: its move from where the run stood
            move = advice.option(here, advice.class_of(step["action"]))
            assert move is None or move.risk < theta
            p_min = advice.p_min(here)
            assert p_min is None or p_min < theta  # a state with no move under θ is never left
            here = session.observe(step["state"], action=step["action"]).index
        if result.outcome == "stopped":
            p_min = advice.p_min(here)
            assert p_min is not None and p_min >= theta
    assert outcomes  # the episodes ran


def test_a_shield_that_blocks_nothing_is_the_unguarded_episode(tmp_path: Path) -> None:
    # at θ above every risk the shield never acts: the same seed gives the same steps as no guard
    task, guard = _guard(tmp_path)
    profile = AgentProfile()
    for n in range(10):
        plain = run_episode(task, random.Random(f"p:{n}"), profile)
        shielded = run_shielded_episode(task, random.Random(f"p:{n}"), profile, guard, 1.01)
        assert shielded.outcome == plain.outcome and shielded.interventions == 0
        assert [s.get("action") for s in shielded.steps] == [s.get("action") for s in plain.steps]


def test_the_shield_needs_the_mdp(tmp_path: Path) -> None:
    task, guard = _guard(tmp_path, mdp=False)
    with pytest.raises(ConfigError, match=r"learning\.mdp"):
        run_shielded_episode(task, random.Random(0), AgentProfile(), guard, 0.5)
