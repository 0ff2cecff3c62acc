"""Replay on Spark: the model is broadcast, the executors replay runs, the driver summarises.

Each partition rebuilds the guard from the broadcast model file (its predicates
compiled once per partition) and replays its runs with :func:`guard.replay.replay_run`,
the single-process code; the per-run results (the risk at every replayed step, the
first violation, the run's ``meta``) come back in reading order and
:func:`guard.replay.summarize` makes the figures. So they are the single-process
figures, to the last digit.

The parsing, predicates and decisions — the work that grows with the logs — run on the
executors; the driver keeps one float per replayed step (about 8 bytes a step plus
the run's ``meta``), which bounds the replay of one driver to some 10⁸ steps.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from ...errors import TraceError
from ..predicates import PythonPredicate
from ..replay import Enforcement, ReplayReport, horizon_of, min_increase_of, replay_run, summarize
from ..spec import Action, Trigger
from ..traces import Run
from .read import Place, errors_in_order, map_runs, place_error

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..bundle_guard import BundleGuard
    from ..runtime import Guard


def replay_spark(source: DataFrame | Sequence[str], guard: Guard | BundleGuard, thetas: Sequence[float], *,
                 spark: SparkSession | None = None, period: float | None = None,
                 python_predicates: Mapping[str, PythonPredicate] | None = None,
                 split_bytes: int | None = None, enforcement: Enforcement | str = Enforcement.LOOKAHEAD,
                 trigger: Trigger | str | None = None) -> ReplayReport:
    """:func:`guard.replay.replay` on runs read by Spark (files, directories or a DataFrame).

    A bundle guard replays each run on the member its ``meta`` picks, as the local replay.

    Raises:
        TraceError: the first malformed run in reading order (as the local replay).
    """
    from ..bundle_guard import BundleGuard
    from .session import spark_session

    session = spark or spark_session()
    document = guard.bundle.to_document() if isinstance(guard, BundleGuard) else guard.model.to_document()
    model = session.sparkContext.broadcast(orjson.dumps(document))
    # the Python predicates as resolved here: the workers need not have registered them
    functions = {**guard.predicates.python_functions, **(python_predicates or {})}
    try:  # a bundle's own policy override (None: each member's spec), as its members use it
        replayer = _Replayer(model, guard.policy_override if isinstance(guard, BundleGuard) else guard.policy, functions)
        records, _ = map_runs(session, source, replayer, period=period, split_bytes=split_bytes, sum_by_key=False)
    finally:
        model.destroy()
    errors = errors_in_order(records)
    if errors:
        raise errors[0]
    replays = [r for _, r in sorted(records, key=lambda record: record[0])]
    return summarize(replays, thetas, unseen_alarms=guard.policy.unseen_state is not Action.ALLOW,
                     horizon=horizon_of(guard.property), enforcement=enforcement,
                     min_increase=min_increase_of(trigger or guard.policy.trigger, guard.policy.min_increase))


@dataclass(frozen=True)
class _Replayer:
    """One partition's replay: the guard is rebuilt there from the broadcast model file."""

    model: Any  # a Broadcast of the model file's bytes
    policy: Any
    python_predicates: Mapping[str, PythonPredicate] | None

    def __call__(self, runs: Iterator[tuple[Place, Run | TraceError]]) -> Iterator[tuple[Any, Any]]:
        from ..bundle import GuardBundle, parse_model_or_bundle
        from ..bundle_guard import BundleGuard
        from ..runtime import Guard

        loaded = parse_model_or_bundle(self.model.value, "<broadcast model>")
        kind = BundleGuard if isinstance(loaded, GuardBundle) else Guard
        guard = kind(loaded, policy=self.policy, python_predicates=self.python_predicates)  # type: ignore[arg-type]
        for place, run in runs:
            try:
                if isinstance(run, TraceError):
                    raise run
                yield place, replay_run(guard, run)
            except TraceError as exc:
                yield place_error(place, exc)
                return  # the driver raises the first error
