"""A learned model in words, for the commands that show one (``learn``, ``check``, ``states``,
``export``): its states, its PAC report (in words and as JSON) and a bundle's members."""
from __future__ import annotations

import functools
import math
from typing import Any

from ...errors import UsageError
from ..bundle import GuardBundle
from ..memory import Memory, build_memory
from ..model import GuardModel
from ..results import JOINT_STATES as JOINT_STATES  # the joint bound's limit, read here before the registry
from ..results import TightPAC


def fmt(value: float | None, digits: int = 4) -> str:
    """A number for a table cell; a dash where there is none."""
    return "–" if value is None else f"{value:.{digits}f}"


def state_words(model: GuardModel, index: int) -> str:
    """A state of the model's chain in words: the predicates that hold in it, or ``end``; with
    ``learning.memory``, what the state remembers after them (states that differ only there would
    otherwise read the same)."""
    bits = model.dtmc.states[index]
    if bits < 0:
        return "end"
    width = len(model.dtmc.predicates)
    words = _held(model, bits)
    memory = _memory(model)
    if memory is None:
        return words
    dwell, previous, actions = memory.label_parts(bits >> width)
    remembered = []
    if dwell is not None:
        low, high = dwell
        remembered.append(f"held {low} step{'s' if high > 1 else ''}" if low == high else f"held {low}–{high} steps")
    if previous is not None:
        remembered.append("after (start)" if previous < 0 else f"after [{_held(model, previous)}]")
    if actions is not None:
        remembered.append(f"last action{'s' if len(actions) > 1 else ''}: {', '.join(actions)}")
    return f"{words}; {'; '.join(remembered)}" if remembered else words


def memory_document(model: GuardModel, index: int) -> dict[str, Any] | None:
    """What a state remembers (``learning.memory``), for JSON; None without memory or for ``end``."""
    bits = model.dtmc.states[index]
    memory = _memory(model)
    if memory is None or bits < 0:
        return None
    dwell, previous, actions = memory.label_parts(bits >> len(model.dtmc.predicates))
    document: dict[str, Any] = {}
    if dwell is not None:
        document["dwell"] = list(dwell)
    if previous is not None:
        document["previous"] = None if previous < 0 else \
            {n: bool(previous >> b & 1) for b, n in enumerate(model.dtmc.predicates)}
    if actions is not None:
        document["actions"] = list(actions)
    return document


def _held(model: GuardModel, bits: int) -> str:
    held = [n for b, n in enumerate(model.dtmc.predicates) if bits >> b & 1]
    return ", ".join(held) if held else "no predicate holds"


@functools.lru_cache(maxsize=8)  # a bundle's members, each shown row by row
def _memory(model: GuardModel) -> Memory | None:
    """The model's memory automaton (None without ``learning.memory``)."""
    return build_memory(model.spec.learning.memory, len(model.dtmc.predicates), model.dtmc.actions or None)


def pac_words(model: GuardModel, index: int) -> str:
    """A PAC entry's chain state in words (PAC is about the chain, before any product)."""
    if model.pac_valuations is None:
        return state_words(model, index)
    held = [n for n, v in zip(model.dtmc.predicates, model.pac_valuations[index]) if v]
    return ", ".join(held) if held else "no predicate holds"


def members_of(loaded: GuardModel | GuardBundle, group: str | None) -> dict[str | None, GuardModel]:
    """The models to show: a single model (under None), a bundle's members, or the one ``--group`` names."""
    if isinstance(loaded, GuardModel):
        if group is not None:
            raise UsageError("--group applies to bundles only (this is a single model)")
        return {None: loaded}
    if group is not None:
        return {group: loaded.member(group)}
    return {name: loaded.member(name) for name in loaded.names()}


def pac_lines(model: GuardModel) -> list[str]:
    """The PAC report in words: the paper's bound, then each registered bound (guard/pac/registry.py)."""
    pac, runs = model.pac, model.provenance.get("runs")
    worst = pac.worst
    if worst is None:
        return []
    lines = [f"PAC (ε={pac.epsilon}, δ={pac.delta}), the paper's bound: {pac.satisfied_count}/{len(pac.states)} "
             f"states have enough visits; worst state {worst.state} ({pac_words(model, worst.state)}) has "
             f"{worst.visits} of {worst.required if worst.required is not None else '∞'} required"
             + ("" if pac.runs_factor is None or pac.satisfied else f" ({_more_runs(pac.runs_factor, runs)})") + "."]
    from ..pac import bounds  # learning's table (scipy): imported when a report is shown, not at the CLI's start

    confidence = f"{1 - pac.delta:.0%}"

    def verdict(bound: float, factor: float | None, limiting: list[int], sure: bool) -> str:
        if bound <= pac.epsilon:
            return f"±{bound:.3g}: met (ε = {pac.epsilon})"
        if factor is None:
            return f"±{bound:.3g}; no forecast of the runs that would meet ε = {pac.epsilon}"
        through = ", ".join(f"{i} ({pac_words(model, i)}, {_visits(model, i)} visits)" for i in limiting[:3])
        return f"±{bound:.3g}; ε = {pac.epsilon} needs {_more_runs(factor, runs)}{_how_sure(pac.delta, sure)}" + \
            (f", most of all through state {through}" if through else "")

    start = "a run's risk from its first state (the paper's Definition 4)"  # named in full the first time
    for kind in bounds():
        bound = pac.bounds.get(kind.name)
        if bound is None:
            lines.append(f"PAC, {kind.title} bound: {kind.absent(pac)}")
            continue
        note = f", {kind.note}" if kind.note else ""
        lines.append(
            f"PAC, {kind.title} bound ({confidence} confidence{note}): {start} "
            f"{verdict(bound.initial_bound, bound.initial_runs_factor, bound.initial_limiting, kind.guaranteed)}; "
            f"every state {verdict(bound.worst_bound, bound.runs_factor, bound.limiting, kind.guaranteed)}.")
        start = "from the first state"
    return lines


def _how_sure(delta: float, sure: bool) -> str:
    """What a runs forecast promises: the outcome bound's is met in ≥ 1 − δ of learnings (guard/pac/outcome.py);
    the others' is what a typical learning needs, not a guarantee."""
    return f" (met in ≥ {1 - delta:.0%} of learnings)" if sure else " (a typical learning's need, not a guarantee)"


def _more_runs(factor: float, runs: Any) -> str:
    times = f"{factor:,.0f}" if factor >= 100 else f"{factor:.3g}"
    if isinstance(runs, int) and runs > 0:
        return f"about {times}× the runs, {math.ceil(factor * runs):,} instead of {runs:,}"
    return f"about {times}× the runs"


def _visits(model: GuardModel, state: int) -> int:
    return next((s.visits for s in model.pac.states if s.state == state), 0)


def pac_document(model: GuardModel) -> dict[str, Any]:
    """The PAC report for JSON output (``check``): both bounds, the paper's labelled as such."""
    from ..pac import bounds  # learning's table (scipy): imported when a report is shown, not at the CLI's start

    pac, runs = model.pac, model.provenance.get("runs")

    def needed(factor: float | None) -> int | None:
        """factor × runs, or None where JSON has no integer for it (a crafted file's counts can reach 2⁶³)."""
        product = factor * runs if factor is not None and isinstance(runs, int) else math.nan
        count = math.ceil(product) if math.isfinite(product) else None
        return count if count is not None and abs(count) < 2**63 else None

    def bound(tight: TightPAC | None) -> dict[str, Any] | None:
        return None if tight is None else {
            "satisfied": tight.satisfied,
            "worst_bound": tight.worst_bound if math.isfinite(tight.worst_bound) else None,
            "runs_factor": tight.runs_factor, "runs_needed": needed(tight.runs_factor),
            "limiting": [{"state": i, "predicates": pac_words(model, i), "visits": _visits(model, i),
                          "required": next((s.required for s in tight.states if s.state == i), None)}
                         for i in tight.limiting],
            "initial": {"satisfied": tight.initial_satisfied,
                        "bound": tight.initial_bound if math.isfinite(tight.initial_bound) else None,
                        "runs_factor": tight.initial_runs_factor, "runs_needed": needed(tight.initial_runs_factor),
                        "limiting": [{"state": i, "predicates": pac_words(model, i), "visits": _visits(model, i)}
                                     for i in tight.initial_limiting]}}

    return {
        "epsilon": pac.epsilon, "delta": pac.delta, "runs": runs,
        "paper": {"satisfied": pac.satisfied, "states_satisfied": pac.satisfied_count, "states": len(pac.states),
                  "amplification": pac.amplification if math.isfinite(pac.amplification) else None,
                  "runs_factor": pac.runs_factor, "runs_needed": needed(pac.runs_factor)},
        # each registered bound by name, null where the file lacks it (docs/method.md; guard/pac/registry.py)
        **{kind.name: bound(pac.bounds.get(kind.name)) for kind in bounds()},
    }



MISMATCH_MARK = "(runs differ)"


def mismatch_note(model: GuardModel) -> str:
    """What a state marked :data:`MISMATCH_MARK` means, with the test's level."""
    level = None if model.intervals is None else model.intervals.markov_level
    at = "" if level is None else f" (a test at family-wise level {level:g})"
    return (f"{MISMATCH_MARK}: runs here differ by more than the state shows: the chain's risk and what the runs "
            f"that passed through the state went on to do disagree{at}, so the abstraction misses something "
            "that matters here (a kind of run, some history); the value and interval there are the runs' own "
            "first-visit frequency and its Clopper–Pearson interval, which need no Markov assumption")


# a state seen fewer times than this is thin when the spec sets no guard.min_visits (discover's rare state)
THIN_VISITS = 20


def thin_line(model: GuardModel) -> str | None:
    """Where the data is thin, in one line: the states (of those the PAC report covers) seen fewer than
    ``guard.min_visits`` times (else :data:`THIN_VISITS`), the fewest first. None without such states to count."""
    states = model.pac.states
    if not states:
        return None
    below = model.spec.guard.min_visits or THIN_VISITS
    thin = sorted((s for s in states if s.visits < below), key=lambda s: (s.visits, s.state))
    if not thin:
        return f"No thin state: each of the {len(states)} states was seen at least {below} times."
    named = ", ".join(f"{s.state} ({pac_words(model, s.state)}; {s.visits} visits)" for s in thin[:3])
    more = f" and {len(thin) - 3} more" if len(thin) > 3 else ""
    return (f"Thin: {len(thin)} of {len(states)} states seen fewer than {below} times, their risks resting on few "
            f"runs: state {named}{more}.")


def enough_runs_line(model: GuardModel) -> str | None:
    """"Do I have enough runs?" in one line: the risk of a run from its start (the paper's Definition 4) under the
    tightest bound the model file has (the last registered it holds: outcome, else joint, else …), with
    the runs that would meet ε. None when the chain has no state to bound."""
    pac, runs = model.pac, model.provenance.get("runs")
    if pac.worst is None:
        return None
    from ..pac import bounds  # learning's table (scipy): imported when a report is shown, not at the CLI's start

    chosen = next(((kind, pac.bounds[kind.name]) for kind in reversed(bounds()) if kind.name in pac.bounds), None)
    if chosen is None:
        return "Enough runs? This model file has no tighter PAC bound (written by an older Forewarn); re-learn."
    kind, bound = chosen
    where = (f"a run's risk from its start is within ±{bound.initial_bound:.3g} (PAC, {kind.title} bound, "
             f"{1 - pac.delta:.0%} confidence)")
    if bound.initial_satisfied:
        return f"Enough runs? Yes for ε = {pac.epsilon}: {where}."
    factor = bound.initial_runs_factor
    forecast = ("no forecast of the runs that would meet it" if factor is None else
                f"ε needs {_more_runs(factor, runs)}{_how_sure(pac.delta, kind.guaranteed)}")
    return f"Enough runs? Not for ε = {pac.epsilon}: {where}; {forecast}."
