"""The search: add, one at a time, the predicate that most improves held-out prediction.

Each round scores, on the same grouped folds as ``forewarn evaluate``
(:func:`guard.evaluation.folds.split_folds`), the current abstraction refined by

* every *global* candidate (a field, a value, a threshold: :mod:`.candidates`), and
* a *local split* for each abstract state whose runs end differently (visited enough,
  with both outcomes): the state's own condition (the fewest of its predicates' literals
  that pick out the same steps) and the candidate that best separates its steps by
  outcome — so an abstraction too coarse in one place is refined there only.

Candidates are first ranked by how much they separate outcomes in the data (in-sample,
one ``bincount`` each); the best are scored held-out (:class:`.scoring.HeldOut`). The
best held-out objective wins the round if it gains at least ``min_gain``, lowers the
held-out Brier score by at least ``min_brier_gain`` (relative), and lowers it in every fold
but one (every fold, with two), and its gain is significant over the groups of runs: the
paired z-score of the per-group changes in held-out squared error, or in violating runs flagged
at the target (:meth:`.scoring.HeldOut.detection_z`), is at least ``min_z``,
which :func:`required_z` sets from the number of candidates tried: the one-sided 5 % level,
Bonferroni-corrected (3.0 for 40 candidates, 3.9 for 1,200). The fixed patterns of :mod:`.shapes` are a
family of their own, corrected for their own number (one a text field: 2.1 for three text fields): they are the same whatever the
runs, so the hundreds of phrases read off the runs do not raise their bar. The winner of a round is the
best of *all* candidates — the in-sample ranking that shortlists them reads the held-out
folds too — so a fixed threshold lets noise through as the candidates grow: 150 runs with
1,200 candidates, of which all but a dozen are noise, added noise fields at z 2–3.
Otherwise the next best is tried, and when none qualifies the search
stops: a split that does not pay off on held-out runs is not made. ``max_predicates``
and ``time_limit`` bound it.
"""
from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

import numpy as np
from numpy.typing import NDArray

from .._cel_fields import _mask, without_comments
from .candidates import Candidate
from .scoring import HeldOut, Score

SHORTLIST = 32  # global candidates scored held-out per round
PREFILTER_STEPS = 40_000  # steps the in-sample ranking reads (a fixed random sample beyond that)
LOCAL_STATES = 8  # states offered a local split per round
LEVEL = 0.05  # chance of accepting a round's best noise candidate, over all the candidates tried


def required_z(tried: int, level: float = LEVEL) -> float:
    """The paired z-score a gain needs when it is the best of ``tried`` candidates: the one-sided
    ``level`` point, Bonferroni-corrected (it grows like √(2 ln tried))."""
    return NormalDist().inv_cdf(1.0 - level / max(tried, 1))


@dataclass(frozen=True)
class Literal_:
    """A predicate's value in a state, as CEL: ``expr`` when true, ``!(expr)`` when false."""

    cel: str | None  # None: not expressible in CEL (a Python predicate, a monitor)
    bits: NDArray[np.bool_]  # the predicate over scored steps, as the search scores it (held out, for a value set)
    final: NDArray[np.bool_] | None = None  # what CEL computes, where it differs from ``bits``

    @property
    def computed(self) -> NDArray[np.bool_]:
        return self.bits if self.final is None else self.final


@dataclass(frozen=True)
class Step:
    """One accepted predicate and the held-out figures before and after it."""

    name: str
    cel: str
    description: str
    local: bool
    before: Score
    after: Score
    bits: NDArray[np.bool_]  # what CEL computes on each scored step


@dataclass
class SearchResult:
    steps: list[Step]
    base: Score
    final: Score
    stopped: str  # why the search stopped
    rounds: int = 0
    # (cel, Brier, detection) of the offers that did not pay off, each once: listed at the round that first
    # rejected it, with the figures of the last round that scored it (over the most predicates)
    rejected: list[tuple[str, float, float]] = field(default_factory=list)
    key: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # final state of each step
    states: int = 0


def _impurity(n: NDArray[np.float64], u: NDArray[np.float64]) -> NDArray[np.float64]:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, u - u * u / np.maximum(n, 1.0), 0.0)


def _compact(key: NDArray[np.int64]) -> tuple[NDArray[np.int64], int]:
    values, inverse = np.unique(key, return_inverse=True)
    return inverse.astype(np.int64).reshape(-1), len(values)


def _fold_briers(scorer: HeldOut, risk: NDArray[np.float64]) -> NDArray[np.float64]:
    squared = (risk - scorer.y) ** 2
    sums = np.bincount(scorer.fold, weights=squared, minlength=scorer.folds)
    counts = np.bincount(scorer.fold, minlength=scorer.folds)
    return np.asarray(sums / np.maximum(counts, 1), dtype=np.float64)


def search(scorer: HeldOut, base_key: NDArray[np.int64], candidates: Sequence[Candidate],
           literals: list[Literal_], *, max_predicates: int, min_gain: float, deadline: float,
           min_visits: int, min_brier_gain: float = 0.005, min_z: float | None = None,
           on_round: Callable[[int], None] | None = None) -> SearchResult:
    """Greedy forward selection with local splits (see the module's doc).

    Args:
        scorer: the held-out scorer of the scored steps.
        base_key: the user's abstraction at each scored step (predicates and monitor states).
        candidates: global candidates.
        literals: the user's predicates over scored steps (their CEL for local conditions).
        deadline: ``time.monotonic()`` past which no new round starts.
        min_z: the significance a gain needs (None: :func:`required_z` of the candidates).
        on_round: called with the number of predicates chosen after each round (progress).
    """
    # fixed patterns (a handful, the same whatever the runs) are one family, the candidates read off the runs
    # another, each corrected for its own number: the phrases' hundreds do not drown the few shapes
    fixed = sum(c.fixed for c in candidates)
    min_z_fixed = required_z(fixed) if min_z is None else min_z
    if min_z is None:
        min_z = required_z(len(candidates) - fixed)
    count = len(scorer.y)
    y = scorer.y
    key, states = _compact(base_key)
    current = scorer.score(key, states)
    base = current
    steps: list[Step] = []
    pool = list(candidates)
    # the in-sample ranking reads a fixed sample of the steps: it only has to put the good candidates
    # in the shortlist, which is then scored held-out on every step
    if count > PREFILTER_STEPS:
        sample = np.sort(np.random.default_rng(0).choice(count, PREFILTER_STEPS, replace=False))
    else:
        sample = np.arange(count)
    sample_bits: dict[int, NDArray[np.bool_]] = {}
    literal_pool = list(literals)
    result = SearchResult(steps, base, base, "no candidate improved held-out prediction")
    rejected_at: dict[str, int] = {}  # cel -> its place in result.rejected (a round rejects an offer again)

    def reject(cel: str, score: Score) -> None:
        entry = (cel, score.brier, score.detection)
        if cel in rejected_at:
            result.rejected[rejected_at[cel]] = entry
        else:
            rejected_at[cel] = len(result.rejected)
            result.rejected.append(entry)
    while True:
        if len(steps) >= max_predicates:
            result.stopped = f"--max-predicates {max_predicates} reached"
            break
        if time.monotonic() > deadline:
            result.stopped = "--time-limit reached"
            break
        result.rounds += 1
        n_state = np.bincount(key, minlength=states).astype(np.float64)
        u_state = np.bincount(key, weights=y, minlength=states).astype(np.float64)
        key_s, y_s = key[sample], y[sample]
        impurity_s = _impurity(np.bincount(key_s, minlength=states).astype(np.float64),
                               np.bincount(key_s, weights=y_s, minlength=states).astype(np.float64))
        impurity = _impurity(n_state, u_state)
        # states worth a local split: both outcomes, enough visits on each side to learn from
        mixed = np.flatnonzero((u_state > 0) & (u_state < n_state) & (n_state >= 2 * min_visits))
        mixed = mixed[np.argsort(-impurity[mixed])][:LOCAL_STATES]
        gains = np.zeros(len(pool))
        per_state = np.zeros((len(pool), len(mixed)))
        for i, candidate in enumerate(pool):
            bits = sample_bits.get(id(candidate))
            if bits is None:
                bits = sample_bits[id(candidate)] = candidate.scored_bits(count)[sample]
            split = key_s * 2 + bits
            n = np.bincount(split, minlength=2 * states).astype(np.float64)
            u = np.bincount(split, weights=y_s, minlength=2 * states).astype(np.float64)
            after = _impurity(n, u).reshape(states, 2).sum(axis=1)
            reduction = impurity_s - after
            gains[i] = reduction.sum()
            if len(mixed):
                per_state[i] = reduction[mixed]
        offers: list[Offer] = []
        for i in np.argsort(-gains)[:SHORTLIST]:
            if gains[i] <= 0:
                break
            c = pool[i]
            offers.append(Offer(c.name, c.cel, c.description, False, c.scored_bits(count), c.bits(count), c.fixed))
        for j, state in enumerate(mixed):
            if not len(pool):
                break
            best = int(np.argmax(per_state[:, j]))
            if per_state[best, j] <= 0:
                continue
            split_offer = _local_split(key == state, literal_pool, pool[best], count)
            if split_offer is not None:
                offers.append(split_offer)
        scored_offers: list[tuple[Score, Offer]] = []
        for offer in offers:
            if time.monotonic() > deadline and scored_offers:
                break
            scored_offers.append((scorer.score(key * 2 + offer.scored, 2 * states, current.risk), offer))
        scored_offers.sort(key=lambda pair: pair[0].objective)
        accepted = None
        for refined, offer in scored_offers:
            if current.objective - refined.objective < min_gain:
                break
            if pays_off(scorer, current, refined, min_brier_gain=min_brier_gain,
                        min_z=min_z_fixed if offer.fixed else min_z):
                accepted = (refined, offer)
                break
            reject(offer.cel, refined)
        if accepted is None:
            if scored_offers and not result.rejected:
                top, top_offer = scored_offers[0]
                reject(top_offer.cel, top)
            break
        refined, offer = accepted
        steps.append(Step(offer.name, offer.cel, offer.description, offer.local, current, refined, offer.final))
        key, states = _compact(key * 2 + offer.scored)
        current = refined
        literal_pool.append(Literal_(offer.cel, offer.scored, offer.final))
        pool = [c for c in pool if c.cel != offer.cel]
        if on_round is not None:
            on_round(len(steps))
    result.final = current
    result.key, result.states = key, states
    return result


def pays_off(scorer: HeldOut, current: Score, refined: Score, *, min_brier_gain: float, min_z: float) -> bool:
    """Whether a refinement's held-out gain is real: the Brier score falls by ``min_brier_gain`` (relative),
    in every fold but one (every fold, with two), and significantly over the groups of runs — the fall
    in squared error, or the gain at the target (violating runs flagged at the target's false alarms):
    a predicate that tells the few runs that go wrong apart moves the second far more than the first,
    whose changes on every safe step swamp it."""
    required = scorer.folds - 1 if scorer.folds >= 3 else scorer.folds
    improved = int(np.sum(_fold_briers(scorer, refined.risk) < _fold_briers(scorer, current.risk)))
    return (refined.brier < current.brier * (1.0 - min_brier_gain) and improved >= required
            and max(scorer.paired_z(current.risk, refined.risk),
                    scorer.detection_z(current.risk, refined.risk)) >= min_z)


@dataclass(frozen=True)
class Offer:
    """A predicate offered in a round: ``scored`` is what the search scores, ``final`` what CEL computes."""

    name: str
    cel: str
    description: str
    local: bool
    scored: NDArray[np.bool_]
    final: NDArray[np.bool_]
    fixed: bool = False  # a fixed pattern's (:attr:`.candidates.Candidate.fixed`)


def _local_split(in_state: NDArray[np.bool_], literals: list[Literal_], candidate: Candidate,
                 count: int) -> Offer | None:
    """``condition && candidate``: the state's condition as the fewest literals that select the same steps."""
    chosen: list[tuple[str, NDArray[np.bool_], NDArray[np.bool_]]] = []
    for literal in literals:
        if literal.cel is None:
            continue
        value = literal.bits[in_state]
        if value.all():
            chosen.append((_group(literal.cel), literal.bits, literal.computed))
        elif not value.any():
            chosen.append((_negate(literal.cel), ~literal.bits, ~literal.computed))
    if not chosen:
        return None
    scored_bits, final_bits = candidate.scored_bits(count), candidate.bits(count)

    def conjunction(parts: list[tuple[str, NDArray[np.bool_], NDArray[np.bool_]]],
                    final: bool = False) -> NDArray[np.bool_]:
        out = (final_bits if final else scored_bits).copy()
        for _, b, f in parts:
            out &= f if final else b
        return out

    target = conjunction(chosen)
    for part in list(chosen):  # drop what selects nothing more
        trial = [p for p in chosen if p is not part]
        if trial and np.array_equal(conjunction(trial), target):
            chosen = trial
    if np.array_equal(target, scored_bits):  # the condition adds nothing: the global candidate is offered
        return None
    cel = " && ".join([text for text, _, _ in chosen] + [_group(candidate.cel)])
    where = " and ".join(text for text, _, _ in chosen)
    return Offer(f"{candidate.name}_where_{len(chosen)}", cel,
                 f"{candidate.description}, where {where} (a local split)", True, target, conjunction(chosen, True))


_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")


def _negate(cel: str) -> str:
    cel = without_comments(cel)  # (a spec's predicate may end in a comment, which would swallow the rest)
    if cel.startswith("!") and (_PLAIN.match(cel[1:]) or _wrapped(cel[1:])):
        # !!x is x (in CEL too: an error stays an error), grouped as a conjunction's part
        return _group(cel[2:-1] if cel[1] == "(" else cel[1:])
    return f"!{cel}" if _PLAIN.match(cel) else f"!({cel})"


def _wrapped(cel: str) -> bool:
    """Whether ``cel`` is one parenthesised group: ``(…)`` whose first parenthesis closes at its end."""
    masked = _mask(cel)  # (parentheses inside string literals do not count)
    if not (masked.startswith("(") and masked.endswith(")")):
        return False
    depth = 0
    for ch in masked[:-1]:
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            return False
    return True


def _group(cel: str) -> str:
    """``cel`` in parentheses unless it is one selection or comparison without && or ||."""
    cel = without_comments(cel)
    return cel if ("&&" not in cel and "||" not in cel and not cel.startswith("!")) else f"({cel})"
