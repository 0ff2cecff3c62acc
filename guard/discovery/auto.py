"""Discovery on every learning (issue 39): the spec a model is learned with, extended from its training runs.

``discover: auto`` in a spec, or ``--discover`` on ``learn``, ``evaluate`` and ``tune``, runs
:func:`.discover.discover` on the runs a model is about to be learned from, and learns with what it
writes: the spec unchanged when nothing helps, or when the runs cannot tell (:mod:`.adapt`), with
one line saying so. ``evaluate`` and ``tune`` call it inside each fold on that fold's training runs
only (:func:`fold_discovery`), so no held-out figure is scored by predicates its own runs chose.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..evaluation.tune import Target, parse_target
from ..spec import Spec, parse_spec
from ..traces import Run
from .discover import DiscoveryReport, discover

DEFAULT_TARGET = "false-alarms=0.1"  # what `forewarn discover` measures detection at by default


def wanted(spec: Spec, flag: bool | None) -> bool:
    """Whether learning discovers first: ``--discover``/``--no-discover`` when given, else the spec's ``discover``."""
    return spec.discover == "auto" if flag is None else flag


@dataclass(frozen=True)
class Discovered:
    """The spec to learn with, and the discovery that made it."""

    spec: Spec
    report: DiscoveryReport

    def line(self) -> str:
        """What discovery did, in one line (the notes say why when it changed nothing)."""
        r = self.report
        where = f"over {r.runs} runs ({r.unsafe_runs} violate)"
        if not r.changed:
            why = "; ".join(r.notes[-1:]) or "the spec is unchanged"
            return f"discovery {where}: {why}"
        added = f"{len(r.added)} predicate(s)" + ("" if not r.names else f" ({', '.join(r.names)})")
        memory = "" if r.memory is None else f" and learning.memory {r.memory.text()}"
        return f"discovery {where}, {r.folds}-fold: added {added}{memory}"


def discover_for_learning(runs: Sequence[Run], spec: Spec, *, group_by: str | None = None, folds: int = 5,
                          seed: int = 0, target: Target | None = None, time_limit: float = 600.0,
                          on_progress: Callable[[str], None] | None = None,
                          on_count: Callable[[int, int], None] | None = None) -> Discovered:
    """``spec`` extended with what discovery finds in ``runs`` (or ``spec`` itself, and why, when nothing).

    Args:
        runs: the runs the model is about to be learned from (and nothing else).
        group_by: runs sharing this dotted path's value stay in one of discovery's folds (``None``: each run).
        folds, seed: discovery's own folds (fewer groups than folds: one fold per group).
        target: what detection is measured at (default :data:`DEFAULT_TARGET`).
    """
    chosen = target or parse_target(DEFAULT_TARGET)
    report = discover(runs, spec, target=chosen, folds=folds, group_by=group_by, seed=seed, time_limit=time_limit,
                      on_progress=on_progress, on_count=on_count)
    learned = parse_spec(report.text, source=spec.source or "<discovered>") if report.changed else spec
    return Discovered(learned, report)


@dataclass
class FoldDiscovery:
    """Discovery inside each fold of a cross-validation (``evaluate``'s ``fold_spec``); one line per fold."""

    spec: Spec
    group_by: str | None = None
    folds: int = 5
    seed: int = 0
    target: Target | None = None
    on_progress: Callable[[str], None] | None = None
    lines: list[str] = field(default_factory=list)

    def __call__(self, train: list[Run], fold: int) -> Spec:
        report = discover_for_learning(
            train, self.spec, group_by=self.group_by, folds=self.folds, seed=self.seed, target=self.target,
            on_progress=None if self.on_progress is None else (lambda text: self._say(fold, text)))
        self.lines.append(f"fold {fold}: {report.line()}")
        return report.spec

    def _say(self, fold: int, text: str) -> None:
        assert self.on_progress is not None
        self.on_progress(f"fold {fold}: discovering: {text}")


def fold_discovery(spec: Spec, *, group_by: str | None = None, folds: int = 5, seed: int = 0,
                   target: Target | None = None, on_progress: Callable[[str], None] | None = None) -> FoldDiscovery:
    """A ``fold_spec`` for :func:`..evaluation.evaluate.evaluate` that discovers on each fold's training runs;
    its ``lines`` say, per fold, what discovery added or why it left the spec unchanged."""
    return FoldDiscovery(spec, group_by, folds, seed, target, on_progress)
