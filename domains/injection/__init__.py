"""A prompt-injection domain: an agent on files, git and web pages whose documents sometimes carry injections.

Typical use::

    from forewarn.domains.injection import SPEC_PATH, generate_traces
    generate_traces(1000, seed=0, path="injection-runs.jsonl")

Eight tasks (:mod:`.tasks`); eight attacker goals × eight phrasing families of injections
(:mod:`.attacks`); a simulated agent that follows an injection with a probability set by its
phrasing, and a state whose ``harm`` lists what the attacker got done (:mod:`.agent`). The
unsafe condition is ``size(state.harm) > 0``. docs/injection.md says more.
"""
from __future__ import annotations

from pathlib import Path

import orjson

from .agent import HttpPages, RunPlan, generate_runs, initial_state, next_state, plan_run, play
from .attacks import GOALS, PHRASINGS, Injection, injection
from .tasks import TASKS, Task

__all__ = ["GOALS", "HttpPages", "Injection", "PHRASINGS", "RunPlan", "SPEC_PATH", "TASKS", "Task", "generate_runs",
           "generate_traces", "initial_state", "injection", "next_state", "plan_run", "play"]

SPEC_PATH = Path(__file__).with_name("spec.yaml")


def generate_traces(n: int, seed: int, path: str | Path, **options: object) -> int:
    """Write ``n`` generated runs to ``path`` as Forewarn JSONL (options: :func:`generate_runs`'s); returns ``n``."""
    with open(path, "wb") as out:
        for record in generate_runs(n, seed, **options):  # type: ignore[arg-type]
            out.write(orjson.dumps(record) + b"\n")
    return n
