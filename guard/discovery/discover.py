"""``discover``: a spec with predicates found in the runs, each annotated with what it added.

The pipeline (docs/method.md, "Discovery"):

1. trace every run with the user's spec: its outcome (the user's ``unsafe`` and monitors
   decide what a violation is) and its abstract states;
2. split the runs into the same grouped folds as ``forewarn evaluate``;
3. read every field of the steps into columns and propose candidates (:mod:`.columns`,
   :mod:`.candidates`);
4. search, scoring by counting on held-out folds (:mod:`.search`, :mod:`.scoring`), then
   score remembering the last actions (:mod:`.recent`);
5. check every chosen predicate against CEL itself on every step (an expression that
   does not compute what the search scored is dropped), and let the real learner choose
   (:mod:`.confirm`): the same grouped k-fold evaluation ``forewarn evaluate`` runs, of the
   user's spec and of each configuration discovery could write (predicates with action
   memory, predicates alone, action memory alone). One is written only if it is no worse
   than the user's spec in Brier and at the target, and better significantly; otherwise
   the user's spec is returned unchanged, and the report gives every configuration's figures.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import ForewarnError, InputError, TraceError
from ..constant_predicates import ConstantPredicate, constant_in_traced
from ..evaluation.baselines import trace_run
from ..evaluation.evaluate import evaluate
from ..evaluation.folds import group_of, group_units, split_folds
from ..evaluation.tune import Target
from ..monitoring import build_monitors
from ..predicates import PredicateSet
from ..replay import Enforcement, RunReplay
from ..spec import Action, Spec, parse_spec
from ..storm import Method
from ..traces import Run, abstract_run, remembered_abstractions
from .actions import action_columns
from .adapt import plan_folds
from .afterrun import after_run, named_part
from .candidates import generate
from .columns import Skipped, build_table, path_text
from .confirm import Configuration, Figures, choose
from .recent import ActionMemory, propose_actions
from .scoring import HeldOut, Score
from .search import Literal_, SearchResult, Step, search
from .valuesets import ValueSets
from .write import NewPredicate, insert_action_memory, insert_predicates, memory_slot, unique_name

__all__ = ["Figures"]  # names other modules import through this one

MIN_GAIN = 0.005  # objective gain a predicate must bring (≈ 0.5 % of the Brier score, or 0.5 points of detection)
PENALTY = 0.25  # λ: weight of the share of held-out steps in rarely visited states
MIN_VISITS = 20  # visits below which a state's interval is too wide to mean much
MIN_BRIER_GAIN = 0.005  # relative fall of the held-out Brier score a predicate must bring
# the significance of that fall over the groups of runs (a paired z-score) grows with the candidates
# tried: search.required_z


@dataclass
class DiscoveryReport:
    """What ``discover`` found, and the spec it writes."""

    text: str  # the output spec (YAML)
    changed: bool
    added: list[Step]
    names: list[str]
    counting_before: Figures
    counting_after: Figures
    learner_before: Figures | None
    learner_after: Figures | None
    runs: int
    unsafe_runs: int
    steps: int
    fields: int
    candidates: int
    skipped: Skipped
    folds: int
    group_by: str | None
    target: Target
    stopped: str
    seconds: float
    notes: list[str] = field(default_factory=list)
    # (cel, Brier, detection): each predicate once, with the figures of the last time it was scored
    not_helping: list[tuple[str, float, float]] = field(default_factory=list)
    memory: ActionMemory | None = None  # the action memory added to learning.memory
    memory_options: list[tuple[str, Score]] = field(default_factory=list)  # every option scored
    # every configuration the real learner scored (:mod:`.confirm`), the spec's own first
    configurations: list[tuple[str, Figures]] = field(default_factory=list)
    # the spec's predicates with one value on every step of the runs (guard/constant_predicates.py)
    constant_predicates: list[ConstantPredicate] = field(default_factory=list)


def unchanged(spec: Spec, runs: Sequence[Run], traced: Sequence[RunReplay], predicates: PredicateSet, note: str, *,
              target: Target, folds: int, group_by: str | None, seconds: float) -> DiscoveryReport:
    """The report of a discovery that did not run (:mod:`.adapt`): the spec as it came, and why."""
    nothing = Figures(None, 0.0, 0.0)
    return DiscoveryReport(
        text=spec.text or "", changed=False, added=[], names=[], counting_before=nothing, counting_after=nothing,
        learner_before=None, learner_after=None, runs=len(runs), unsafe_runs=sum(t.unsafe for t in traced),
        steps=0, fields=0, candidates=0, skipped=Skipped(), folds=folds, group_by=group_by, target=target,
        stopped="not run", seconds=seconds, notes=[note], constant_predicates=constant_in_traced(traced, predicates))


def _figures(score: Score) -> Figures:
    return Figures(score.brier, score.detection, score.false_alarms)


def held_out_figures(replays: Sequence[RunReplay], target: Target, *, unseen_alarms: bool) -> Figures:
    """Detection strictly before the violation at the target (the θ :func:`choose_theta` would pick), and
    the Brier score, of a cross-validation's pooled replays."""
    safe = np.sort([r.min_p_safe(unseen_alarms, lookahead=False) for r in replays if not r.unsafe])
    unsafe = np.sort([r.min_p_safe(unseen_alarms, lookahead=False) for r in replays if r.unsafe])
    total = count = 0.0
    for r in replays:
        end = r.violation if r.violation is not None else len(r.p_unsafe)
        outcome = float(r.unsafe)
        for p in r.p_unsafe[:end]:
            if p is not None:
                total += (p - outcome) ** 2
                count += 1
    brier = total / count if count else None
    if not len(safe) or not len(unsafe):
        return Figures(brier, 0.0, 0.0)
    if target.metric == "false-alarms":
        allowed = math.floor(target.value * len(safe) + 1e-9)
        theta = safe[allowed] if allowed < len(safe) else math.inf  # flagged: p_safe < θ
        return Figures(brier, float(np.mean(unsafe < theta)), float(np.mean(safe < theta)))
    needed = max(math.ceil(target.value * len(unsafe) - 1e-9), 1)
    theta = np.nextafter(unsafe[needed - 1], math.inf)
    return Figures(brier, float(np.mean(unsafe < theta)), float(np.mean(safe < theta)))


def discover(runs: Sequence[Run], spec: Spec, *, target: Target, max_predicates: int = 8,
             time_limit: float = 600.0, folds: int = 5, group_by: str | None = None, seed: int = 0,
             min_visits: int = MIN_VISITS, confirm: bool = True, exclude: Sequence[str] = (),
             include: Sequence[str] = (), action_memory: bool = True, on_progress: Callable[[str], None] | None = None,
             on_count: Callable[[int, int], None] | None = None) -> DiscoveryReport:
    """Predicates found in ``runs`` that improve held-out prediction over ``spec``'s (see the module's doc).

    Args:
        runs: the logged runs (held in memory).
        spec: the user's spec; its predicates, ``unsafe`` and monitors are kept.
        target: what detection is measured at (``false-alarms=X`` or ``detection=Y``).
        max_predicates: predicates the search may add.
        time_limit: seconds after which no new search round starts (the confirmation is extra).
        folds, group_by, seed: the folds, as ``forewarn evaluate``'s.
        min_visits: visits below which a state counts as rare (the visit penalty).
        confirm: confirm with the real learner (grouped k-fold evaluation, before and after).
        exclude: dotted fields to propose nothing on (the ``group_by`` field is never proposed: a value
            of the grouping key sits in one fold only, so it cannot tell held-out runs anything).
        include: meta fields to propose on although their name says they are written after a run ends
            (``meta.output``, ``meta.eval``: :mod:`.afterrun`), which are otherwise left out.
        action_memory: also propose ``learning.memory.actions`` (:mod:`.recent`) when the spec sets none.
        on_progress: called with the name of each stage as it starts.
        on_count: called with (done, total) within the current stage: runs traced, search rounds out of
            ``max_predicates``, fold evaluations of the confirmation.

    Runs discovery cannot learn from (none, one-sided, too few of an outcome or of groups: :mod:`.adapt`)
    give the spec back unchanged with a note saying why; fewer groups than folds, one fold per group.

    Raises:
        ForewarnError: a bad spec or trace, a run without the grouping key.
    """
    with remembered_abstractions():  # the confirmation evaluates every configuration on the same runs
        return _discover(runs, spec, target=target, max_predicates=max_predicates, time_limit=time_limit,
                         folds=folds, group_by=group_by, seed=seed, min_visits=min_visits, confirm=confirm,
                         exclude=exclude, include=include, action_memory=action_memory, on_progress=on_progress,
                         on_count=on_count)


def _discover(runs: Sequence[Run], spec: Spec, *, target: Target, max_predicates: int, time_limit: float,
              folds: int, group_by: str | None, seed: int, min_visits: int, confirm: bool, exclude: Sequence[str],
              include: Sequence[str], action_memory: bool, on_progress: Callable[[str], None] | None,
              on_count: Callable[[int, int], None] | None) -> DiscoveryReport:
    started = time.monotonic()
    deadline = started + time_limit
    progress = on_progress or (lambda _: None)
    count = on_count or (lambda done, total: None)
    if spec.text is None:
        raise InputError("discover needs the spec's YAML text (load it with load_spec or parse_spec)")
    predicates = PredicateSet(spec)
    monitors = build_monitors(spec)
    progress("tracing runs with the spec")
    traced = []
    for run in runs:
        traced.append(trace_run(run, predicates, monitors))
        count(len(traced), len(runs))
    unsafe_runs = sum(t.unsafe for t in traced)
    groups = [group_of(run, group_by) for run in runs]
    plan = plan_folds([t.unsafe for t in traced], groups, folds, group_by)
    if plan.folds is None:
        assert plan.note is not None
        return unchanged(spec, runs, traced, predicates, plan.note, target=target, folds=folds, group_by=group_by,
                         seconds=time.monotonic() - started)
    adapted = [] if plan.note is None else [plan.note]
    folds = plan.folds
    assignment = split_folds(groups, [t.unsafe for t in traced], folds, seed=seed, key=group_by)
    fold_of_run = np.zeros(len(runs), dtype=np.int64)
    for f, members in enumerate(assignment):
        fold_of_run[members] = f
    # every step of every run (for the columns), and the scored ones: before each run's violation
    states: list[Any] = []
    actions: list[Any] = []
    run_of_all: list[int] = []
    scored: list[int] = []
    run_of_scored: list[int] = []
    base_key: list[int] = []
    abstract_bits: list[int] = []
    ids: dict[tuple[int, tuple[int, ...]], int] = {}
    for r, (run, t) in enumerate(zip(runs, traced)):
        offset = len(states)
        for step in run.steps:
            states.append(step["state"])
            actions.append(step.get("action"))
        run_of_all.extend([r] * len(run.steps))
        end = t.violation if t.violation is not None else len(t.abstract)
        for i in range(end):
            scored.append(offset + i)
            run_of_scored.append(r)
            product = (t.abstract[i], t.monitor_states[i])
            base_key.append(ids.setdefault(product, len(ids)))
            abstract_bits.append(t.abstract[i])
    progress(f"reading the fields of {len(states)} steps")
    table = build_table(states, [run.meta for run in runs], action_columns(actions),
                        np.asarray(run_of_all, dtype=np.int64))
    # (s38-text: each field of a two-field grouping, meta.attack,meta.task)
    grouping = [k.strip() for k in group_by.split(",")] if group_by else []
    excluded = [*exclude, *(k for k in grouping if k.startswith("meta."))]
    # a mistyped exclusion (meta.outcme) would leave a label in without a word
    unmatched = [e for e in exclude if not any(_under(c.path, e) for c in table.columns)]
    if excluded:
        table.columns[:] = [c for c in table.columns if not any(_under(c.path, e) for e in excluded)]
    # (s40-inj) what a log wrote once the run was over tells the outcome by construction: never a candidate
    ended = after_run([c.path for c in table.columns], include)
    if ended:
        table.columns[:] = [c for c in table.columns if c.path not in set(ended)]
    scored_idx = np.asarray(scored, dtype=np.int64)
    unsafe_arr = np.array([t.unsafe for t in traced], dtype=np.bool_)
    outcome = unsafe_arr[np.asarray(run_of_scored, dtype=np.int64)].astype(np.float64)
    group_ids: dict[str, int] = {}
    group_of_run = np.array([group_ids.setdefault(g, len(group_ids)) for g in groups], dtype=np.int64)
    run_scored = np.asarray(run_of_scored, dtype=np.int64)
    sets = ValueSets(scored_idx, outcome, fold_of_run[run_scored], group_of_run[run_scored])
    candidates = generate(table.columns, scored_idx, max(min_visits // 2, 3), outcome, sets)
    progress(f"searching {len(candidates)} candidates")
    # the counting scorer only ever counts alarms strictly before the violation: detection is warned-ahead here
    metric = "detection" if target.metric == "warned-ahead" else target.metric
    scorer = HeldOut(np.asarray(run_of_scored, dtype=np.int64), fold_of_run, unsafe_arr, metric=metric,
                     target=target.value, min_visits=min_visits, penalty=PENALTY, group_of_run=_units(runs, group_by,
                                                                                                       group_of_run))
    bits_array = np.asarray(abstract_bits, dtype=np.int64)
    literals = [Literal_(definition.cel, ((bits_array >> i) & 1).astype(np.bool_))
                for i, definition in enumerate(spec.predicates.values())]
    result = search(scorer, np.asarray(base_key, dtype=np.int64), candidates, literals,
                    max_predicates=max_predicates, min_gain=MIN_GAIN, deadline=deadline, min_visits=min_visits,
                    min_brier_gain=MIN_BRIER_GAIN, on_round=lambda done: count(done, max_predicates))
    report = DiscoveryReport(
        text=spec.text, changed=False, added=[], names=[], counting_before=_figures(result.base),
        counting_after=_figures(result.base), learner_before=None, learner_after=None, runs=len(runs),
        unsafe_runs=unsafe_runs, steps=len(scored), fields=len(table.columns), candidates=len(candidates),
        skipped=table.skipped, folds=folds, group_by=group_by, target=target, stopped=result.stopped,
        seconds=0.0, not_helping=result.rejected, constant_predicates=constant_in_traced(traced, predicates))
    report.notes.extend(adapted)
    if ended:
        names = sorted({path_text(named_part(p)) for p in ended})
        report.notes.append(f"left out {', '.join(names)}: written after a run ends (an answer, a verdict, an "
                            "outcome), unknown while it runs; --include FIELD proposes on one all the same")
    report.notes.extend(f"--exclude {e}: no field discovery reads in these runs is at or below it; nothing left out"
                        for e in unmatched)
    steps = _checked(result, runs, spec, scored_idx, report.notes)
    memory = alone = None
    if action_memory and spec.learning.memory.actions == 0 and memory_slot(spec.text):
        progress("scoring action memory")
        run_of_step = np.asarray(run_of_all, dtype=np.int64)
        # with confirmation, the best option counting offers is a candidate even short of its significance test
        if len(steps) == len(result.steps):
            memory, report.memory_options = propose_actions(
                scorer, result.key, result.final, actions, run_of_step, scored_idx, min_gain=MIN_GAIN,
                min_brier_gain=MIN_BRIER_GAIN, untested=confirm)
        else:
            report.notes.append("action memory not scored over the discovered predicates: one was left out")
        if steps and confirm:  # remembering actions over the spec's own predicates alone
            base, _ = np.unique(np.asarray(base_key, dtype=np.int64), return_inverse=True)
            alone, _ = propose_actions(scorer, np.searchsorted(base, np.asarray(base_key, dtype=np.int64)),
                                       result.base, actions, run_of_step, scored_idx, min_gain=MIN_GAIN,
                                       min_brier_gain=MIN_BRIER_GAIN, untested=True)
        elif not steps:
            alone = memory
    if not steps and memory is None and alone is None:
        report.notes.append("nothing found improves held-out prediction over the spec's predicates: "
                            "the spec is unchanged")
        report.seconds = time.monotonic() - started
        return report
    for s in steps:
        if "meta." in s.cel:
            report.notes.append(f"{s.cel!r} reads the run's meta: make sure that field is known when a run starts "
                                "(not an outcome written after it ended; leave such fields out with --exclude)")
    configurations = _configurations(spec, steps, memory, alone, target, folds, group_by)
    if not confirm:  # counting's choice: everything that passed its test
        chosen = configurations[0]
    else:
        progress(f"confirming with the real learner (grouped k-fold: the spec's own and {len(configurations)} "
                 "configuration(s))")
        # each evaluation learns and replays every fold: 2 × folds parts, the spec's own first
        parts = 2 * folds * (1 + len(configurations))
        evaluated = [0]

        def counted(phase: str, fold: int) -> None:
            count(evaluated[0] * 2 * folds + 2 * (fold - 1) + (phase == "replay"), parts)

        own = _learner(runs, spec, target, folds, group_by, seed, counted)
        before = own[0]

        def score(c: Configuration) -> tuple[Figures, list[RunReplay]]:
            evaluated[0] += 1
            return _learner(runs, parse_spec(c.text, source=spec.source or "<discovered>"), target, folds,
                            group_by, seed, counted)

        picked, tried = choose(configurations, own, score, target, {run.id: g for run, g in zip(runs, groups)},
                               {run.id: str(f) for run, f in zip(runs, fold_of_run.tolist())})
        report.configurations = [("the spec's own", before)] + [(c.name, f) for c, f, _ in tried]
        report.learner_before = report.learner_after = before
        if picked is None:
            report.notes.append(
                "the real learner confirms no discovered configuration: none is at least as good as the spec's own "
                "in Brier and at the target with a fall in squared error in every fold but one, significant over "
                "the groups of runs "
                f"({before.text(target)} with the spec's own; "
                + "; ".join(f"{f.text(target)}, z {z:.2f} with {c.name}" for c, f, z in tried)
                + "): the spec is unchanged")
            report.not_helping = _listed_once([(s.cel, s.after.brier, s.after.detection) for s in steps],
                                              report.not_helping)
            report.seconds = time.monotonic() - started
            return report
        after = next(f for c, f, _ in tried if c is picked)
        for c, figures, z in tried:
            if c is not picked:
                report.notes.append(f"not written: {c.name} ({figures.text(target)}, z {z:.2f}; the real learner "
                                    f"preferred {picked.name}, {after.text(target)})")
        if not picked.memory:
            report.not_helping = _listed_once([(c.name, f.brier if f.brier is not None else math.nan, f.detection)
                                               for c, f, _ in tried if c.memory], report.not_helping)
        chosen = picked
        report.learner_after = after
    kept = steps if chosen.predicates else []
    remembered = (memory if kept else alone) if chosen.memory else None
    text, names = _written(spec, kept, target, folds, group_by, remembered)
    if remembered is not None:
        text = insert_action_memory(text, remembered.actions, remembered.action_class,
                                    "discovered: remembering the last actions, " + _change(remembered, target, folds))
    if report.learner_before is not None and report.learner_after is not None:
        text = _with_confirmation(text, report.learner_before, report.learner_after, target)
    report.counting_after = _figures(remembered.after if remembered is not None else kept[-1].after)
    if not kept and steps:
        report.not_helping = _listed_once([(s.cel, s.after.brier, s.after.detection) for s in steps],
                                          report.not_helping)
    report.text, report.changed, report.added, report.names = text, True, kept, names
    report.memory = remembered
    report.seconds = time.monotonic() - started
    return report


def _units(runs: Sequence[Run], group_by: str | None, group_of_run: np.ndarray) -> np.ndarray:
    """The units a gain must be significant over: the groups, or with two grouping fields (s38-text) each run's
    combination of the fields it holds (an attack on a task), the folds still holding out whole first fields."""
    if not group_by or "," not in group_by:
        return group_of_run
    ids: dict[str, int] = {}
    return np.array([ids.setdefault(group_units(run, group_by), len(ids)) for run in runs], dtype=np.int64)


def _listed_once(newer: list[tuple[str, float, float]], older: list[tuple[str, float, float]]
                 ) -> list[tuple[str, float, float]]:
    """``newer`` (what was scored last: a predicate the search accepted, then the learner refused) before
    ``older``, each predicate once: the search may have rejected a predicate in a round before accepting it."""
    shown = {cel for cel, _, _ in newer}
    return newer + [entry for entry in older if entry[0] not in shown]


def _configurations(spec: Spec, steps: list[Step], memory: ActionMemory | None, alone: ActionMemory | None,
                    target: Target, folds: int, group_by: str | None) -> list[Configuration]:
    """What discovery could write, the most it found first (see :mod:`.confirm`)."""
    def text(kept: list[Step], remembered: ActionMemory | None) -> str:
        out = _written(spec, kept, target, folds, group_by, remembered)[0]
        if remembered is not None:
            out = insert_action_memory(out, remembered.actions, remembered.action_class, "discovered")
        return out

    out = []
    if steps and memory is not None:
        out.append(Configuration(f"the discovered predicates and learning.memory {memory.text()}",
                                 text(steps, memory), True, True))
    if steps:
        out.append(Configuration("the discovered predicates", text(steps, None), True, False))
    if alone is not None:
        out.append(Configuration(f"learning.memory {alone.text()} over the spec's own predicates",
                                 text([], alone), False, True))
    return out


def _change(memory: ActionMemory, target: Target, folds: int) -> str:
    before, after = memory.before, memory.after
    if target.metric == "false-alarms":
        detail = f"detection {before.detection:.1%} -> {after.detection:.1%} at <= {target.value:.0%} false alarms"
    else:
        detail = (f"false alarms {before.false_alarms:.1%} -> {after.false_alarms:.1%} at >= {target.value:.0%} "
                  "detection")
    return f"held-out Brier {before.brier:.4f} -> {after.brier:.4f}, {detail} (counting, {folds} folds)"


def _under(path: tuple[str, ...], dotted: str) -> bool:
    parts = tuple(dotted.split("."))
    return path[:len(parts)] == parts


def _checked(result: SearchResult, runs: Sequence[Run], spec: Spec, scored: np.ndarray, notes: list[str]) -> list[Step]:
    """The accepted predicates whose CEL gives, on every scored step, the values the search scored."""
    if not result.steps:
        return []
    document = spec.to_document()
    names = list(document["predicates"])
    for i, s in enumerate(result.steps):
        document["predicates"][f"discovered_{i}"] = {"cel": s.cel}
    try:
        check = PredicateSet(Spec.model_validate(document))
    except ForewarnError as exc:
        notes.append(f"the discovered predicates do not compile as CEL ({exc}); the spec is unchanged")
        return []
    width = len(names)
    values: list[int] = []
    try:
        for run in runs:
            values.extend(abstract_run(run, check))
    except TraceError as exc:
        notes.append(f"a discovered predicate fails on a step ({exc}); the spec is unchanged")
        return []
    bits = np.asarray(values, dtype=object)[scored]
    kept = []
    for i, s in enumerate(result.steps):
        computed = np.array([(int(v) >> (width + i)) & 1 for v in bits], dtype=np.bool_)
        if np.array_equal(computed, s.bits):
            kept.append(s)
        else:
            notes.append(f"left out {s.cel!r}: CEL computes other values than the search scored")
    return kept


def _learner(runs: Sequence[Run], spec: Spec, target: Target, folds: int, group_by: str | None,
             seed: int, on_progress: Callable[[str, int], None] | None = None) -> tuple[Figures, list[RunReplay]]:
    report = evaluate(runs, spec, [0.5], folds=folds, group_by=group_by, seed=seed, method=Method.TOPOLOGICAL,
                      enforcement=Enforcement.OBSERVE, on_progress=on_progress)
    replays = list(report.pooled.replays)
    return held_out_figures(replays, target, unseen_alarms=spec.guard.unseen_state is not Action.ALLOW), replays


def _written(spec: Spec, steps: Sequence[Step], target: Target, folds: int, group_by: str | None,
             memory: ActionMemory | None) -> tuple[str, list[str]]:
    taken = set(spec.predicates)
    new = []
    for s in steps:
        name = unique_name(s.name, taken)
        comment = (f"discovered: held-out Brier {s.before.brier:.4f} -> {s.after.brier:.4f}, "
                   + (f"detection {s.before.detection:.1%} -> {s.after.detection:.1%} at <= {target.value:.0%} "
                      "false alarms" if target.metric == "false-alarms" else
                      f"false alarms {s.before.false_alarms:.1%} -> {s.after.false_alarms:.1%} at >= "
                      f"{target.value:.0%} detection")
                   + f" (counting, {folds} folds)")
        new.append(NewPredicate(name, s.cel, f"discovered: {s.description}", comment))
    grouping = f"grouped by {group_by}" if group_by else "each run its own group"
    what = f"{len(steps)} predicate(s) below the spec's own" + (
        f" and learning.memory {memory.text()}" if memory is not None else "")
    header = [f"forewarn discover added {what} ({folds}-fold, {grouping}, target {target})"]
    text = insert_predicates(spec.text or "", new, header, source=spec.source or "<spec>")
    return text, [p.name for p in new]


def _with_confirmation(text: str, before: Figures, after: Figures, target: Target) -> str:
    line = f"# real learner, held out: {before.text(target)} with the spec's predicates; {after.text(target)} with these\n"
    first = text.find("\n") + 1
    return text[:first] + line + text[first:]
