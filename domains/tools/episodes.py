"""Episodes of the simulated tool-using agent under a guard, one proposed call at a time (docs/shield.md).

The agent plays a task family's plan with the logged runs' noise (:func:`~.generator.planned_calls`):
before each call runs, a guard may act on it. The modes are ``bench/shield.py``'s:

* ``none``: every call runs; the run ends at its first violation;
* ``stop``: the session observes each state; a decision other than ``allow`` ends the run;
* ``reflect``: such a decision prompts the agent, who heeds with ``heed`` (at most once) and then turns
  careful — it leaves out the calls of its plan that would break the rule (what the embodied agent's
  safe plan is) — or gives up with ``give_up``; ``reflect+advice`` is the same with ``give_up = 0``;
* ``shield``: before a call, its move's risk from where the run stands (``Q(s, a)``, the MDP): at or over
  θ the call does not run, the agent heeds (drops that call from its plan) with ``heed`` or proposes it
  again, and gives up after ``max_blocks`` blocks of one call; where no move is under θ the run stops.

An episode is ``completed`` when no violation happened and every call of the plan that breaks no rule
ran: a careful agent that leaves out only the harmful calls completes its task; one whose harmless
call was blocked and dropped does not (``failed``).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

from ...errors import ConfigError
from ...guard.toolcalls.extractor import ToolStateExtractor, violations
from ...guard.toolcalls.transcript import Transcript
from .generator import planned_calls
from .tasks import Plan

Mode = Literal["none", "stop", "reflect", "shield"]


@dataclass(frozen=True)
class ToolEpisode:
    """One guarded episode: its outcome (``unsafe``, ``completed``, ``stopped``, ``failed``) and the
    guard's interventions (decisions acted on; under the shield, the calls blocked and a stop)."""

    outcome: str
    interventions: int


def run_tool_episode(plan: Plan, rng: random.Random, mode: Mode, *, guard: Any = None, session: Any = None,
                     theta: float = 0.5, heed: float = 0.7, give_up: float = 0.2, max_blocks: int = 6,
                     extractor: ToolStateExtractor | None = None) -> ToolEpisode:
    """Play ``plan`` (its calls drawn from ``rng`` as the logged runs' are) under ``mode``.

    ``session`` (stop, reflect): observes each state; ``guard`` (shield): its MDP's advice; ``theta``: the
    shield's bound on a move's risk.
    """
    if mode not in ("none", "stop", "reflect", "shield"):
        raise ConfigError(f"mode={mode!r}; expected none, stop, reflect or shield")
    if mode in ("stop", "reflect") and session is None:
        raise ConfigError(f"mode {mode!r} needs a guard session")
    advice = None
    if mode == "shield":
        advice = getattr(guard, "advice", None)
        if advice is None:
            raise ConfigError("the shield needs the model's MDP (learning.mdp)")
        session = guard.session()
        session.traced = False
    extract = extractor if extractor is not None else ToolStateExtractor()
    transcript = Transcript(user_messages=(plan.user,))
    state = extract(transcript)
    calls = planned_calls(plan, rng)
    careful = reconsidered = False
    interventions = 0
    skipped_harmless = False
    decision = session.observe(state) if session is not None else None
    for call in calls:
        if mode in ("stop", "reflect") and decision is not None and decision.action != "allow":
            interventions += 1
            if mode == "stop":
                return ToolEpisode("stopped", interventions)
            if not reconsidered and rng.random() < heed:
                reconsidered = careful = True
                if rng.random() < give_up:
                    return ToolEpisode("failed", interventions)
        following = transcript.then(call)
        harmful = bool(violations(extract(following)))
        if careful and harmful:
            continue  # the careful agent leaves it out
        if advice is not None and decision is not None:
            here = decision.index
            p_min = advice.p_min(here)
            if p_min is not None and p_min >= theta:
                return ToolEpisode("stopped", interventions + 1)
            move = advice.option(here, advice.class_of({"tool": call.name, "args": call.args}))
            dropped = False
            blocks = 0
            while move is not None and move.risk >= theta:
                interventions += 1
                blocks += 1
                if rng.random() < heed:
                    dropped = True
                    break
                if blocks > max_blocks:
                    return ToolEpisode("failed", interventions)
            if dropped:
                skipped_harmless = skipped_harmless or not harmful
                continue
        transcript = following
        state = extract(transcript)
        if session is not None:
            decision = session.observe(state, action={"tool": call.name, "args": call.args})
        if violations(state):
            return ToolEpisode("unsafe", interventions)
    return ToolEpisode("failed" if skipped_harmless else "completed", interventions)
