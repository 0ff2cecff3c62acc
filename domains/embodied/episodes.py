"""Episodes of the simulated agent, optionally under a guard, and trace files of them.

:func:`run_episode` follows the paper's Algorithm 2: the guard session observes the
initial state and the state after every executed action; a decision other than
``allow`` either stops the agent or sends it a reflection prompt. The trace format is
Forewarn's JSONL contract: ``{"id", "steps": [{"state", "action", "t"}], "meta"}``.
"""
from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson

from ...errors import ConfigError
from .actions import parse_action
from .agent import AgentProfile, SimulatedAgent
from .conditions import condition_holds
from .errors import EmbodiedError
from .simulator import HouseholdSim
from .tasks import Task

Outcome = Literal["unsafe", "completed", "stopped", "failed"]
Enforcement = Literal["stop", "reflect"]

# Seconds the controller needs per verb (navigation is the slow part); the LLM's own
# think time is added per step.
_SECONDS = {"find": 4.0, "pick": 2.0, "put": 2.0, "open": 1.5, "close": 1.5, "turn_on": 1.0,
            "turn_off": 1.0, "slice": 3.0, "break": 1.5, "fillLiquid": 3.0, "emptyLiquid": 2.0,
            "pour": 2.5, "dirty": 1.5, "clean": 3.0, "cook": 5.0, "drop": 1.0, "throw": 1.0}


class _Decision(Protocol):
    @property
    def action(self) -> str: ...

    @property
    def message(self) -> str: ...


class _Session(Protocol):
    def observe(self, state: dict[str, Any]) -> _Decision: ...


@dataclass
class EpisodeResult:
    """One episode.

    Attributes:
        steps: ``{"state", "t"}`` for the initial state, then ``{"state", "action", "t"}``
            after every executed action (failed actions included).
        outcome: ``"unsafe"`` (the hazard held; the run ends there), ``"completed"``,
            ``"stopped"`` (by the guard) or ``"failed"`` (gave up or ran out of steps).
        interventions: guard decisions other than ``allow`` that were acted upon.
        heeded: reflection prompts the agent heeded (0 or 1).
        hazard_intent: whether the agent set out on the hazardous plan.
    """

    steps: list[dict[str, Any]]
    outcome: Outcome
    interventions: int = 0
    heeded: int = 0
    hazard_intent: bool = False


def action_duration(action: str, rng: random.Random) -> float:
    """Plausible seconds for one step: controller time for the verb plus think time."""
    base = _SECONDS.get(parse_action(action).verb, 2.0)
    return base * rng.uniform(0.8, 1.25) + rng.uniform(1.0, 3.0)


def _take(action: str, sim: HouseholdSim, agent: SimulatedAgent, rng: random.Random, t: float,
          steps: list[dict[str, Any]]) -> tuple[dict[str, Any], float]:
    """Run ``action`` in the simulator, tell the agent how it went and append the step: the new state and time."""
    success = sim.apply(action)
    agent.record(action, success, sim)
    t += action_duration(action, rng)
    state = sim.state()
    steps.append({"state": state, "action": action, "t": round(t, 3)})
    return state, t


def run_episode(task: Task, rng: random.Random, profile: AgentProfile | None = None,
                session: _Session | None = None, enforcement: Enforcement | None = None) -> EpisodeResult:
    """Run the simulated agent on a task, optionally guarded.

    Args:
        task: a supported task (see ``support.supported_tasks``).
        rng: all randomness of the episode (intent, noise, failures, durations).
        profile: agent behaviour; ``AgentProfile()`` when None.
        session: anything with ``observe(state) -> decision`` where ``decision.action``
            is ``"allow"``, ``"reflect"``, ``"ask_human"`` or ``"stop"``. Without
            ``enforcement`` its decisions are only observed, never acted upon.
        enforcement: ``"stop"`` ends the episode at the first non-allow decision;
            ``"reflect"`` prompts the agent, who heeds with ``p_heed_reflection`` (and
            then gives up with ``p_give_up_on_reflection``, else acts carefully).

    Returns:
        The :class:`EpisodeResult`.

    Raises:
        ConfigError: for an unknown ``enforcement``.
        EmbodiedError: a task whose hazard condition is null.
    """
    if enforcement not in (None, "stop", "reflect"):
        raise ConfigError(f"enforcement={enforcement!r}; expected None, 'stop' or 'reflect'")
    if not task.final_state:
        raise EmbodiedError(f"task {task.id} has no final_state condition to guard against")
    profile = profile if profile is not None else AgentProfile()
    sim = HouseholdSim.for_task(task, rng=rng, p_fail=profile.p_fail)
    agent = SimulatedAgent(task, profile, rng)
    state = sim.state()
    steps: list[dict[str, Any]] = [{"state": state, "t": 0.0}]
    t = 0.0
    interventions = heeded = 0
    reconsidered = False
    outcome: Outcome
    while True:
        decision = session.observe(state) if session is not None else None
        if condition_holds(state, task.final_state):
            outcome = "unsafe"  # too late for any decision
            break
        if decision is not None and enforcement is not None and decision.action != "allow":
            interventions += 1
            if enforcement == "stop":
                outcome = "stopped"
                break
            # An agent reconsiders at most once: after it has taken a prompt to heart,
            # further prompts find its plan already revised.
            if not reconsidered and rng.random() < profile.p_heed_reflection:
                reconsidered = True
                heeded += 1
                if rng.random() < profile.p_give_up_on_reflection:
                    outcome = "failed"
                    break
                agent.heed()
        if len(steps) - 1 >= profile.max_steps:
            outcome = "failed"
            break
        action = agent.next_action(sim)
        if action is None:
            outcome = "failed" if agent.abandoned else "completed"
            break
        state, t = _take(action, sim, agent, rng, t, steps)
    return EpisodeResult(steps, outcome, interventions, heeded, agent.hazard_intent)


def run_shielded_episode(task: Task, rng: random.Random, profile: AgentProfile, guard: Any, theta: float,
                         max_blocks: int = 6) -> EpisodeResult:
    """One episode under the shield (``guard.enforcement: shield``, docs/shield.md) at ``theta`` on a move's risk.

    Before each action, its move's risk from the committed state (``Q(s, a)``, the guard's MDP): at or over
    ``theta`` the action does not run and the agent reads the safer moves; it heeds with the profile's
    ``p_heed_reflection`` (drops the blocked step from its plan) or proposes again, and gives up after
    ``max_blocks`` blocks in a row. Where no move is under ``theta`` (``p_min``) the run stops. A move the
    runs never made from the state, or a state the model never saw, passes: this is the shield alone.
    ``interventions`` counts the blocked calls (and the stop).
    """
    advice = guard.advice
    if advice is None:
        raise ConfigError("the shield needs the model's MDP (learning.mdp)")
    session = guard.session()
    session.traced = False
    sim = HouseholdSim.for_task(task, rng=rng, p_fail=profile.p_fail)
    agent = SimulatedAgent(task, profile, rng)
    state = sim.state()
    steps: list[dict[str, Any]] = [{"state": state, "t": 0.0}]
    t = 0.0
    blocked = 0
    outcome: Outcome
    while True:
        here = session.observe(state).index
        if condition_holds(state, task.final_state):
            outcome = "unsafe"
            break
        p_min = advice.p_min(here)
        if p_min is not None and p_min >= theta:
            outcome, blocked = "stopped", blocked + 1
            break
        if len(steps) - 1 >= profile.max_steps:
            outcome = "failed"
            break
        for _ in range(max_blocks + 1):
            action = agent.next_action(sim)
            if action is None:
                break
            move = advice.option(here, advice.class_of(action))
            if move is None or move.risk < theta:
                break
            blocked += 1  # the call does not run; the agent reads the safer moves
            agent.record(action, False, sim)
            if rng.random() < profile.p_heed_reflection:
                agent.avoid(action)
        else:
            outcome = "failed"
            break
        if action is None:
            outcome = "failed" if agent.abandoned else "completed"
            break
        state, t = _take(action, sim, agent, rng, t, steps)
    return EpisodeResult(steps, outcome, blocked, 0, agent.hazard_intent)


def generate_traces(tasks: Iterable[Task], runs_per_task: int, rng_seed: int, path: str | Path, *,
                    profile: AgentProfile | None = None) -> int:
    """Write unguarded episodes as a Forewarn trace file (JSONL, one run a line).

    Each run is seeded from ``(rng_seed, task id, run number)``, so a run does not change
    when other tasks are added. Lines are written as they are produced.

    Args:
        tasks: supported tasks.
        runs_per_task: episodes per task (at least 1).
        rng_seed: base seed.
        path: the file to (over)write.
        profile: agent behaviour; ``AgentProfile()`` when None.

    Returns:
        The number of runs written. Each line is ``{"id": "<task id>-<n>", "steps": [...],
        "meta": {"task", "outcome", "success", "hazard_intent"}}``.
    """
    if runs_per_task < 1:
        raise ConfigError(f"runs_per_task={runs_per_task!r} must be at least 1")
    written = 0
    with open(path, "wb") as out:
        for task in tasks:
            for n in range(runs_per_task):
                rng = random.Random(f"{rng_seed}:{task.id}:{n}")
                result = run_episode(task, rng, profile)
                record = {
                    "id": f"{task.id}-{n}",
                    "steps": result.steps,
                    "meta": {"task": task.id, "outcome": result.outcome,
                             "success": result.outcome == "completed",
                             "hazard_intent": result.hazard_intent},
                }
                out.write(orjson.dumps(record))
                out.write(b"\n")
                written += 1
    return written
