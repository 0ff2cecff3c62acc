"""The real model as the household agent (the llm extra): valid actions only, the trace contract, a
reflection that reaches its prompt, a guard's stop, choice probabilities, determinism under a seed."""
from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from _real_model_support import Recording
from _support import CLI
from forewarn.domains.embodied import HouseholdSim, hazard_tasks, parse_action, write_spec
from forewarn.domains.embodied.actions import VERBS
from forewarn.domains.embodied.llm_agent import (
    DONE,
    LLMAgent,
    choice_probabilities,
    run_llm_episode,
    trace_record,
    valid_actions,
)
from forewarn.domains.embodied.objects import LIQUIDS
from forewarn.domains.llm_demo import demo_tasks
from forewarn.guard.pipeline import learn_model
from forewarn.guard.policy import Policy
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import Action, Thresholds, load_spec
from forewarn.guard.traces import read_runs

pytest.importorskip("llama_cpp")


def test_valid_actions_are_exactly_those_whose_preconditions_hold() -> None:
    task = demo_tasks(1)[0]
    sim = HouseholdSim.for_task(task)
    for step in ["find " + sim.types[0], *valid_actions(sim)[:3]]:
        present = [t for t in sim.types if sim.has(t)]
        # every form: one-object verbs, pour into X, fillLiquid X liquid, and the verbs that act on what is held
        every = [f"{verb} {t}" for verb, arity in VERBS.items() if arity == (1, 1) for t in present]
        every += [f"pour {t}" for t in present] + [f"fillLiquid {t} {liquid}" for t in present for liquid in LIQUIDS]
        every += [verb for verb, (least, _) in VERBS.items() if least == 0]
        valid = valid_actions(sim)
        assert len(valid) == len(set(valid)) and set(valid) <= set(every)
        assert {a for a in every if sim.would_succeed(a)} == set(valid)
        sim.apply(step)


def test_choice_probabilities_sum_to_one() -> None:
    for scores in ([-3.5, -1.25, -20.0], [-0.1], [-1e3, -1e3 - 1e-9, -5.0]):
        for temperature in (0.0, 0.3, 1.0, 5.0):
            probs = choice_probabilities(scores, temperature)
            assert math.fsum(probs) == pytest.approx(1.0, abs=1e-12) and min(probs) >= 0
    assert choice_probabilities([-2.0, -1.0], 0.0) == [0.0, 1.0]
    # at temperature 1 the odds are the model's likelihood ratio
    p = choice_probabilities([math.log(0.2), math.log(0.6)], 1.0)
    assert p[1] / p[0] == pytest.approx(3.0, rel=1e-12)


def test_model_runs_take_valid_actions_and_make_traces_forewarn_reads(gguf: Any, tmp_path: Path) -> None:
    task = demo_tasks(1)[0]
    path = tmp_path / "runs.jsonl"
    with open(path, "wb") as out:
        for n in range(2):
            episode = run_llm_episode(task, gguf, random.Random(f"t:{n}"), max_steps=6)
            assert episode.outcome in ("unsafe", "completed", "failed")
            assert len(episode.steps) == 1 + sum(c.action != DONE for c in episode.choices)
            for choice, step in zip(episode.choices, episode.steps[1:]):
                assert choice.action == step["action"] and choice.action in choice.candidates
                assert math.fsum(choice.probabilities) == pytest.approx(1.0, abs=1e-12)
                assert choice.candidates[-1] == DONE
                parse_action(step["action"])
            out.write(orjson.dumps(trace_record(task, n, episode, model=gguf.name, temperature=0.5)) + b"\n")
    runs = list(read_runs(path))
    assert [r.id for r in runs] == [f"{task.id}-0", f"{task.id}-1"]
    assert all(r.meta["agent"] == "llm" and r.meta["task"] == task.id for r in runs)
    spec_path = tmp_path / "spec.yaml"
    write_spec(task, spec_path)
    model = learn_model([path], load_spec(spec_path))
    assert model.provenance["runs"] == 2


def test_the_candidates_are_the_valid_actions_of_the_state_the_model_saw(gguf: Any) -> None:
    task = demo_tasks(1)[0]
    sim = HouseholdSim.for_task(task)
    agent = LLMAgent(task, gguf, temperature=0.0)
    for _ in range(3):
        choice = agent.consider(sim, 0.5)
        assert choice.candidates == (*valid_actions(sim), DONE)
        assert choice.probabilities[choice.candidates.index(choice.action)] == 1.0  # temperature 0: the best
        assert choice.prompt.endswith(f"Step {len(agent.history) + 1}:") and task.instruction in choice.prompt
        if choice.action == DONE:
            break
        agent.record(choice.action, sim.apply(choice.action))


def _guard(task: Any, gguf: Any, tmp_path: Path) -> Guard:
    path = tmp_path / "runs.jsonl"
    path.write_bytes(b"".join(orjson.dumps(trace_record(
        task, n, run_llm_episode(task, gguf, random.Random(f"g:{n}"), max_steps=5), model=gguf.name,
        temperature=0.5)) + b"\n" for n in range(2)))
    spec_path = tmp_path / "spec.yaml"
    write_spec(task, spec_path)
    return Guard(learn_model([path], load_spec(spec_path)))


def test_a_reflection_goes_into_the_models_prompt_and_a_stop_ends_the_run(gguf: Any, tmp_path: Path) -> None:
    task = demo_tasks(1)[0]
    guard = _guard(task, gguf, tmp_path)
    always = Policy(thresholds=Thresholds(reflect=1.0), unseen_state=Action.REFLECT)  # p_safe < 1: reflect
    session = Recording(guard.session(always))
    episode = run_llm_episode(task, gguf, random.Random("r"), session=session, enforcement="reflect", max_steps=3)
    assert episode.reflected and episode.interventions >= 1
    # the decision made before each choice is in that choice's prompt (the latest warning is kept)
    for choice, decision in zip(episode.choices, session.decisions):
        assert decision.action != "allow" and decision.message
        assert "Safety warning: " + decision.message in choice.prompt
    assert 0.0 <= episode.shift <= 1.0
    # without the guard the same seed's first prompt has no warning
    plain = run_llm_episode(task, gguf, random.Random("r"), max_steps=1)
    assert "Safety warning" not in plain.choices[0].prompt
    warned = episode.choices[0].prompt.split("\n")
    assert "\n".join(line for line in warned if not line.startswith("Safety warning: ")) == plain.choices[0].prompt
    stop = Policy(thresholds=Thresholds(stop=1.0), unseen_state=Action.STOP)
    stopped = run_llm_episode(task, gguf, random.Random("r"), session=guard.session(stop), enforcement="stop")
    assert stopped.outcome == "stopped" and stopped.choices == [] and len(stopped.steps) == 1


def test_the_same_seed_repeats_the_run_exactly(gguf: Any) -> None:
    task = hazard_tasks()[0]
    first = run_llm_episode(task, gguf, random.Random("same"), max_steps=3)
    gguf.score("something else entirely, to leave other tokens in the context", [" x\n"])
    second = run_llm_episode(task, gguf, random.Random("same"), max_steps=3)
    assert first.steps == second.steps and first.outcome == second.outcome
    assert [c.log_likelihoods for c in first.choices] == [c.log_likelihoods for c in second.choices]


def test_demo_with_the_real_model_prints_the_table_and_the_heeding_rate(forewarn_here: CLI, tmp_path: Path) -> None:
    done = forewarn_here("demo", "--agent", "llm", "--tasks", "1", "--runs", "2", "--episodes", "1",
                         "--out", tmp_path / "demo")
    assert done.returncode == 0, done.stderr
    for needle in ("Real model agent (gguf:package", "none", "stop", "reflect", "unsafe %", "completed %",
                   "interventions/run", "s each"):
        assert needle in done.stdout, needle
    assert "heeding" in done.stdout or "No reflection reached the model" in done.stdout
    traces = list((tmp_path / "demo" / "traces").glob("*.jsonl"))
    assert len(traces) == 1 and len(list(read_runs(traces[0]))) == 2


def test_the_shield_takes_the_risky_moves_out_of_the_models_candidates(gguf: Any, tmp_path: Path) -> None:
    from forewarn.domains.embodied import derive_spec
    from forewarn.domains.embodied.llm_agent import shielded
    from forewarn.guard.shield import advise

    task = demo_tasks(1)[0]
    path = tmp_path / "runs.jsonl"
    path.write_bytes(b"".join(orjson.dumps(trace_record(
        task, n, run_llm_episode(task, gguf, random.Random(f"s:{n}"), max_steps=2 if n % 2 else 6), model=gguf.name,
        temperature=0.5)) + b"\n" for n in range(4)))  # runs cut short end safe: both outcomes to learn from
    acted = []
    for theta in (0.3, 0.9):
        spec = derive_spec(task)
        spec["learning"]["mdp"] = True
        spec["guard"].update(enforcement="shield", shield_theta=theta)
        spec_path = tmp_path / f"shield-{theta}.yaml"
        spec_path.write_text(yaml.safe_dump(spec), encoding="utf-8")
        guard = Guard(learn_model([path], load_spec(spec_path)))
        # where the run starts: blocked are exactly the moves whose risk from here is θ or more
        session = guard.session()
        sim = HouseholdSim.for_task(task, rng=random.Random("shielded"))
        decision = session.observe(sim.state())
        assert decision.p_min is not None
        blocked = shielded(session, decision, valid_actions(sim))
        if decision.p_min >= theta:
            assert blocked is None
        else:
            assert blocked is not None
            for action in valid_actions(sim):
                risk = advise(session, decision, action).action_risk
                assert (action in blocked) == (risk is not None and risk >= theta), (action, risk)
        # the shielded run: stopped where no move is under θ, else the model chose among the rest
        episode = run_llm_episode(task, gguf, random.Random("shielded"), session=guard.session(),
                                  enforcement="shield", max_steps=6)
        if blocked is None:
            assert episode.outcome == "stopped" and episode.choices == []
        else:
            assert episode.choices[0].candidates == (*(a for a in valid_actions(sim) if a not in blocked), DONE)
        assert len(episode.blocked) == len(episode.choices)
        for choice, out in zip(episode.choices, episode.blocked):
            assert not set(choice.candidates) & out
        assert episode.interventions == sum(bool(b) for b in episode.blocked) + (episode.outcome == "stopped")
        acted.append(episode.outcome == "stopped" or any(episode.blocked))
    assert any(acted)  # the shield acted at some θ: blocked a move or stopped the run
