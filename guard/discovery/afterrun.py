"""Fields of a run's ``meta`` written after the run ended: never candidates unless asked for.

A run's ``meta`` is one value per run, so a field there is constant within the run. Most such
fields are known when the run starts (the task, the scene, the user's instruction), but logs also
carry what was written once the run was over: the agent's final answer (AgentSpec's ``output``), a
grader's verdict (``eval``), the run's outcome (``success``, ``outcome``, ``violations``), the
errors gathered over its steps. Those tell the outcome by construction, and a guard never has them
while the run is going: on AgentSpec's logs discovery picked ``meta.output.contains("broken")``.

Which is which cannot be read from the values (an instruction is as constant, and as distinct per
run, as a final answer), so they are named: a meta field whose path holds one of
:data:`AFTER_RUN_NAMES` (``meta.output``, ``meta.record.eval``, ``meta.eval.score``) is left out by
default, and discovery says so in a note. ``include`` names the fields a user knows to be there at
the start all the same.
"""
from __future__ import annotations

from collections.abc import Sequence

# keys that name what a log writes once a run is over: its answer, its grading, its outcome. Matched
# without case on every key of a meta path below ``meta``.
AFTER_RUN_NAMES = frozenset({
    "output", "outputs", "final_output", "final_answer", "answer", "response", "result", "results",
    "outcome", "outcomes", "success", "succeeded", "successful", "failed", "failure", "failures", "error", "errors",
    "eval", "evals", "evaluation", "evaluations", "verdict", "verdicts", "judgement", "judgment", "grade", "graded",
    "score", "scores", "reward", "rewards", "return", "label", "labels", "violation", "violations", "violated",
    "hazard", "hazards", "unsafe", "safe", "done", "completed", "duration", "end_time", "ended_at",
})


def _under(path: Sequence[str], field: str) -> bool:
    parts = tuple(field.split("."))
    return tuple(path[:len(parts)]) == parts


def after_run(paths: Sequence[tuple[str, ...]], include: Sequence[str] = ()) -> list[tuple[str, ...]]:
    """The meta paths among ``paths`` that name a field written after the run ended (see the module's doc),
    those at or below a field of ``include`` apart."""
    return [p for p in paths
            if p[0] == "meta" and any(k.lower() in AFTER_RUN_NAMES for k in p[1:])
            and not any(_under(p, field) for field in include)]


def named_part(path: Sequence[str]) -> tuple[str, ...]:
    """The path down to its first key that names an after-run field (``meta.record.eval.score`` →
    ``meta.record.eval``): what a note names."""
    for i, key in enumerate(path):
        if i and key.lower() in AFTER_RUN_NAMES:
            return tuple(path[:i + 1])
    return tuple(path)
