"""The embodied household domain: SafeAgentBench tasks, a symbolic simulator, a noisy agent.

Typical use::

    from forewarn.domains.embodied import hazard_tasks, derive_spec, generate_traces

    tasks = hazard_tasks(("Microwave",))
    generate_traces(tasks, runs_per_task=50, rng_seed=0, path="traces.jsonl")
    spec = derive_spec(tasks[0])
"""
from __future__ import annotations

from .actions import Action, parse_action
from .agent import AgentProfile, SimulatedAgent
from .conditions import condition_holds, normalize_conditions
from .episodes import EpisodeResult, action_duration, generate_traces, run_episode, run_shielded_episode
from .errors import ActionParseError, EmbodiedError, TaskFileError
from .objects import Kind, canonical_type, kind_of
from .plans import canonical_plan, hazard_step, reference_plan, replay, safe_plan
from .simulator import HouseholdSim
from .spec import derive_spec, predicate_name, write_spec
from .support import DEFAULT_APPLIANCES, hazard_tasks, support_problem, supported_tasks
from .tasks import Task, load_tasks, parse_tasks
from .world import HouseholdWorld

__all__ = [
    "Action",
    "ActionParseError",
    "AgentProfile",
    "DEFAULT_APPLIANCES",
    "EmbodiedError",
    "EpisodeResult",
    "HouseholdSim",
    "HouseholdWorld",
    "Kind",
    "SimulatedAgent",
    "Task",
    "TaskFileError",
    "action_duration",
    "canonical_plan",
    "canonical_type",
    "condition_holds",
    "derive_spec",
    "generate_traces",
    "hazard_step",
    "hazard_tasks",
    "kind_of",
    "load_tasks",
    "normalize_conditions",
    "parse_action",
    "parse_tasks",
    "predicate_name",
    "reference_plan",
    "replay",
    "run_episode",
    "run_shielded_episode",
    "safe_plan",
    "support_problem",
    "supported_tasks",
    "write_spec",
]
