"""Reading logged runs: the contract's JSONL, one run a line, streamed.

Every line is checked before anything of it is used; a bad line raises a
:class:`TraceError` naming the file, the line and the field.
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..errors import InputError, PredicateError, TraceError
from .predicates import PredicateSet

MAX_RESAMPLED_STEPS = 1_000_000  # steps one resampled run may have


@dataclass(frozen=True, slots=True)
class Run:
    """One logged run. ``steps`` are the validated step objects of the line."""

    id: str
    steps: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = "<traces>"
    line: int = 0

    def states(self) -> Iterator[dict[str, Any]]:
        for step in self.steps:
            yield step["state"]

    def times(self) -> list[float | None]:
        return [step.get("t") for step in self.steps]


def read_runs(path: str | Path, *, digest: Any = None,
              on_bad: Callable[[TraceError], None] | None = None, source: str | None = None) -> Iterator[Run]:
    """Yield the runs of a JSONL trace file one at a time (the file may exceed memory).

    Args:
        digest: a ``hashlib`` object fed every byte read, so provenance needs no second pass.
        on_bad: called with a malformed line's error, and reading goes on; None raises it.
        source: the name errors give the file (default: ``path``).

    Raises:
        TraceError: for a line that is not a valid run.
    """
    source = str(path) if source is None else source
    try:
        handle = open(path, "rb")  # noqa: SIM115 - opened apart from `with` to tell a read error from a bad line
    except OSError as exc:
        raise TraceError(f"cannot read traces: {exc.strerror}", source=source) from exc
    with handle:
        for number, raw in enumerate(handle, start=1):
            if digest is not None:
                digest.update(raw)
            if raw.isspace():  # as not raw.strip(), without copying a long line
                continue
            if on_bad is None:
                yield parse_run(raw, source=source, line=number)
                continue
            try:
                run = parse_run(raw, source=source, line=number)
            except TraceError as exc:
                on_bad(exc)
                continue
            yield run


def parse_run(raw: bytes | str, *, source: str = "<traces>", line: int = 0) -> Run:
    """Validate one JSON line as a run."""
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise TraceError(f"not valid JSON ({exc})", source=source, line=line) from exc
    return parse_document(document, source=source, line=line)


def parse_document(document: Any, *, source: str = "<traces>", line: int = 0) -> Run:
    """Validate one decoded JSON value (a line of JSONL, a row of a table) as a run."""
    if not isinstance(document, dict):
        raise TraceError(f"a run must be a JSON object, got {_kind(document)}", source=source, line=line)
    steps = document.get("steps")
    if not isinstance(steps, list):
        raise TraceError("missing or not a list" if steps is None else f"expected a list, got {_kind(steps)}",
                         source=source, line=line, field="steps")
    if not steps:
        raise TraceError("a run needs at least one step", source=source, line=line, field="steps")
    # orjson gives exact types, so these class tests accept what _check_step accepts
    for index, step in enumerate(steps):
        if step.__class__ is not dict or step.get("state").__class__ is not dict:
            _check_step(step, index, source, line)
        t = step.get("t")
        if t is not None and t.__class__ is not float and t.__class__ is not int:
            _check_step(step, index, source, line)
        action = step.get("action")
        if action is not None and action.__class__ is not str and action.__class__ is not dict:
            _check_step(step, index, source, line)
    run_id = document.get("id", f"line-{line}")
    if not isinstance(run_id, (str, int)) or run_id.__class__ is bool:
        raise TraceError(f"expected a string, got {_kind(run_id)}", source=source, line=line, field="id")
    meta = document.get("meta", {})
    if not isinstance(meta, dict):
        raise TraceError(f"expected an object, got {_kind(meta)}", source=source, line=line, field="meta")
    return Run(id=str(run_id), steps=steps, meta=meta, source=source, line=line)


def _check_step(step: Any, index: int, source: str, line: int) -> None:
    """Raise the error for a step that is not valid."""
    where = f"steps[{index}]"
    if not isinstance(step, dict):
        raise TraceError(f"expected an object, got {_kind(step)}", source=source, line=line, field=where)
    state = step.get("state")
    if not isinstance(state, dict):
        problem = "missing" if "state" not in step else f"expected a JSON object, got {_kind(state)}"
        raise TraceError(problem, source=source, line=line, field=f"{where}.state")
    t = step.get("t")
    if t is not None and (t.__class__ is bool or not isinstance(t, (int, float))):
        raise TraceError(f"expected a number of seconds, got {_kind(t)}", source=source, line=line,
                         field=f"{where}.t")
    action = step.get("action")
    if action is not None and not isinstance(action, (str, dict)):
        raise TraceError(f"expected a string or an object, got {_kind(action)}", source=source, line=line,
                         field=f"{where}.action")


def resample(run: Run, period: float) -> Run:
    """The run sampled every ``period`` seconds by zero-order hold (fixed-period steps).

    Step k is at time ``t0 + k·period`` and carries the latest logged state at or before
    that time, so "K steps" means K·period seconds. A state that lasted less than a
    period between two sample times is not seen: choose a period no longer than the
    shortest state that matters. A step's ``action`` is kept on the first sample that
    holds its state.

    Raises:
        TraceError: a step without ``t``, or times that go backwards.
    """
    if not (period > 0 and math.isfinite(period)):
        raise InputError(f"period must be a positive number of seconds, got {period}")
    times: list[float] = []
    for index, step in enumerate(run.steps):
        t = step.get("t")
        if t is None:
            raise TraceError("resampling needs a time 't' on every step", source=run.source, line=run.line,
                             field=f"steps[{index}].t")
        if times and t < times[-1]:
            raise TraceError(f"time goes backwards ({t} after {times[-1]})", source=run.source, line=run.line,
                             field=f"steps[{index}].t")
        times.append(float(t))
    start = times[0]
    # the grid reaches the last logged time: a final state between grid points is held
    # at the next grid point rather than lost (it may be the violation)
    span = (times[-1] - start) / period
    if not span < MAX_RESAMPLED_STEPS:  # a tiny period would fill memory, not sharpen the model (inf too)
        raise TraceError(f"resampling every {period:g} s makes {span + 1:.3g} steps of this run (at most "
                         f"{MAX_RESAMPLED_STEPS:,}); choose a longer period (--period)",
                         source=run.source, line=run.line)
    count = math.ceil(span - 1e-9) + 1
    out: list[dict[str, Any]] = []
    held = 0
    for k in range(count):
        now = start + k * period
        fresh = False
        while held + 1 < len(times) and times[held + 1] <= now + 1e-9:
            held += 1
            fresh = True
        step = {"state": run.steps[held]["state"], "t": round(now, 9)}
        if (fresh or k == 0) and run.steps[held].get("action") is not None:
            step["action"] = run.steps[held]["action"]
        out.append(step)
    return Run(id=run.id, steps=out, meta=run.meta, source=run.source, line=run.line)


# (id of the run, the predicates' definitions) -> (the run, its abstract states), inside remembered_abstractions
_REMEMBERED: ContextVar[dict[tuple[int, tuple[Any, ...]], tuple[Run, tuple[int, ...]]] | None] = ContextVar(
    "forewarn_remembered_abstractions", default=None)


@contextmanager
def remembered_abstractions() -> Iterator[None]:
    """Within it, :func:`abstract_run` evaluates a run's predicates once per predicate definitions.

    Cross-validation abstracts each run once to trace it, again in every fold that learns from it and
    again to replay it, and discovery's confirmation does so for every configuration: on states as large
    as a household's (every object with its properties) evaluating the predicates was most of the time
    (issue 38: ``discover`` on AgentSpec's logs). The memo holds the runs it saw and ends with the block;
    nested blocks share the outermost one's.
    """
    if _REMEMBERED.get() is not None:
        yield
        return
    token = _REMEMBERED.set({})
    try:
        yield
    finally:
        _REMEMBERED.reset(token)


def abstract_run(run: Run, predicates: PredicateSet) -> list[int]:
    """The run's abstract states, one bit mask per step (predicates may read the run's ``meta``
    and each step's ``action``); computed once per run and predicate definitions inside
    :func:`remembered_abstractions`."""
    memo = _REMEMBERED.get()
    if memo is None:
        return _abstract_run(run, predicates)
    key = (id(run), predicates.definitions)
    known = memo.get(key)
    if known is None or known[0] is not run:
        known = (run, tuple(_abstract_run(run, predicates)))
        memo[key] = known
    return list(known[1])


def _abstract_run(run: Run, predicates: PredicateSet) -> list[int]:
    evaluate = predicates.evaluate
    meta = run.meta
    out: list[int] = []
    append = out.append
    try:
        if predicates.reads_action:
            for step in run.steps:
                append(evaluate(step["state"], meta, step.get("action")))
        else:
            for step in run.steps:
                append(evaluate(step["state"], meta))
    except PredicateError as exc:
        field = f"meta (run {run.id!r})" if exc.where == "meta" else \
            f"steps[{len(out)}].{'action' if exc.where == 'action' else 'state'} (run {run.id!r})"
        raise TraceError(str(exc), source=run.source, line=run.line, field=field) from exc
    return out


def file_digest(path: str | Path) -> str:
    """SHA-256 of a file, read in blocks, for a model's provenance."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
             int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)
