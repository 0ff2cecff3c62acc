"""Logged runs of a simulated tool-using agent, in Forewarn's trace format.

A run plays one :mod:`task family <domains.tools.tasks>` plan with the noise of a real
agent on top: detours (listing files, re-reading a document, a ``git status``, a web
search) and calls that fail and are retried. Every step's state is what
:class:`~forewarn.guard.langchain.extractor.ToolStateExtractor` makes of the transcript so far,
exactly as the LangChain middleware computes it at run time; a run ends at its first
violation.
"""
from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from ...errors import ConfigError
from ...guard.toolcalls.extractor import ToolStateExtractor, violations
from ...guard.toolcalls.transcript import CallStatus, ToolStep, Transcript
from .tasks import DOCS, FAMILIES, TOPICS, Plan

_SECONDS = {"shell": 4.0, "http_get": 2.0, "http_post": 1.5, "web_search": 2.5, "send_email": 1.5,
            "read_inbox": 2.0, "pay_invoice": 3.0, "pay": 3.0}
_P_DETOUR = 0.15
_P_FAIL = 0.05


def _detour(rng: random.Random) -> ToolStep:
    roll = rng.random()
    if roll < 0.35:
        return ToolStep("list_files", {"path": "."}, result="README.md\nsrc/\ndocs/\nnotes/")
    if roll < 0.65:
        path = rng.choice(DOCS)
        return ToolStep("read_file", {"path": path}, result=f"# {path}\n(contents)")
    if roll < 0.9:
        return ToolStep("shell", {"command": rng.choice(("git status", "ls -la", "pwd", "git log -3 --oneline"))},
                        result="ok")
    return ToolStep("web_search", {"query": rng.choice(TOPICS)}, result="1. https://blog.example.com/post")


def planned_calls(plan: Plan, rng: random.Random) -> list[ToolStep]:
    """The calls the agent will make for ``plan``: its steps with a real agent's detours and failed tries."""
    calls: list[ToolStep] = []
    for planned in plan.steps:
        if rng.random() < _P_DETOUR:
            calls.append(_detour(rng))
        if rng.random() < _P_FAIL:
            calls.append(ToolStep(planned.name, planned.args, CallStatus.ERROR, "Error: the tool timed out"))
        calls.append(planned)
    return calls


def simulate(plan: Plan, rng: random.Random, extractor: ToolStateExtractor | None = None,
             run_id: str = "run") -> dict[str, Any]:
    """One run of a plan as a trace record ``{"id", "steps", "meta"}``.

    Args:
        plan: what the agent sets out to do (see :data:`domains.tools.tasks.FAMILIES`).
        rng: the run's randomness (detours, failures, timing).
        extractor: the state extractor; ``ToolStateExtractor()`` when None.
        run_id: the record's id.

    Returns:
        The record. ``meta`` holds ``task``, ``outcome`` (``"unsafe"`` or ``"safe"``),
        ``hazards`` (the violated predicates' names) and ``harm_depth`` (the index of
        the first unsafe step, or None).
    """
    extract = extractor if extractor is not None else ToolStateExtractor()
    transcript = Transcript(user_messages=(plan.user,))
    state = extract(transcript)
    steps: list[dict[str, Any]] = [{"state": state, "t": 0.0}]
    t = 0.0
    hazards: list[str] = []
    for call in planned_calls(plan, rng):
        transcript = transcript.then(call)
        state = extract(transcript)
        t += _SECONDS.get(call.name, 1.0) * rng.uniform(0.6, 1.6) + rng.uniform(1.0, 4.0)  # tool + model time
        steps.append({"state": state, "action": {"tool": call.name, "args": call.args}, "t": round(t, 3)})
        hazards = violations(state)
        if hazards:
            break
    meta = {"task": plan.task, "outcome": "unsafe" if hazards else "safe", "hazards": hazards,
            "harm_depth": len(steps) - 1 if hazards else None}
    return {"id": run_id, "steps": steps, "meta": meta}


def generate_runs(n: int, seed: int, *, families: Sequence[str] | None = None,
                  extractor: ToolStateExtractor | None = None) -> Iterator[dict[str, Any]]:
    """``n`` run records, families drawn uniformly; run ``i`` is seeded by ``(seed, i)``.

    Raises:
        ConfigError: for ``n < 1`` or an unknown family name.
    """
    if n < 1:
        raise ConfigError(f"n={n!r} must be at least 1")
    names = list(FAMILIES) if families is None else list(families)
    unknown = [f for f in names if f not in FAMILIES]
    if unknown or not names:
        raise ConfigError(f"unknown task famil{'y' if len(unknown) == 1 else 'ies'} {unknown}; known: {list(FAMILIES)}")
    extract = extractor if extractor is not None else ToolStateExtractor()
    for i in range(n):
        rng = random.Random(f"{seed}:{i}")
        plan = FAMILIES[rng.choice(names)](rng)
        yield simulate(plan, rng, extract, run_id=f"{plan.task}-{seed}-{i}")


def generate_traces(n: int, seed: int, path: str | Path, *, families: Sequence[str] | None = None,
                    extractor: ToolStateExtractor | None = None) -> int:
    """Write ``n`` generated runs to ``path`` as Forewarn JSONL; returns ``n``.

    Args:
        n: number of runs (at least 1).
        seed: base seed; the same ``(n, seed)`` writes the same file.
        path: the file to (over)write.
        families: task family names to draw from (all when None).
        extractor: the extractor whose states the runs carry; use the one your agent's
            guard uses, if you configured it (tool kinds, internal domains, limit).
    """
    written = 0
    with open(path, "wb") as out:
        for record in generate_runs(n, seed, families=families, extractor=extractor):
            out.write(orjson.dumps(record))
            out.write(b"\n")
            written += 1
    return written
