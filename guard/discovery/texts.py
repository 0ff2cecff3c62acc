"""Candidates over text: the words and short phrases a text holds, cues of an instruction, lengths.

A text field (a tool's output, an argument, an instruction, a message) is almost never the
same twice: equality with one whole text tells one run, and cannot tell a run the training
runs never showed (one attack's confirmation, one attack's query). What recurs across
texts are their words and short phrases — ``state.tool_output.contains("before you finish")``
— so a field is read as text when its values average at least :data:`TEXT_WORDS` words, and
offers, instead of equality with its values:

* ``x.contains("phrase")`` for phrases of 1 to :data:`MAX_PHRASE_WORDS` words written as the
  texts write them (case kept: CEL's ``contains`` is exact and cheap, and its Python twin
  ``phrase in text`` gives the same bit on every step), the most frequent and the most telling
  (a z-score of the outcome, as for a field's values);
* phrase sets, ``["a", "b"].exists(p, x.contains(p))``: the phrases whose steps belong to runs that
  violate far more often, seen in violating runs of at least two groups, pooled into one bit and
  scored held out as value sets are (:mod:`.valuesets`): each fold's bit is the set chosen without
  that fold, so a phrase only the held-out groups showed (one attack's wording) tells them nothing;
* the shape of an instruction to an agent (:mod:`.shapes`): ``x.matches(PATTERN)`` for an automated
  reader addressed and an action named in one sentence, or an action on a URL, an address or an account;
* the count of instruction cues it holds (:data:`CUES`: words that address the reader and
  tell them what to do), ``size(CUES.filter(c, x.contains(c))) > t``;
* its length, ``size(x) > t``, at the deciles.

Equality is proposed only with values of at most :data:`MAX_EQUAL_WORDS` words, in a text
field or any other (:func:`short`).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from statistics import NormalDist
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from .._cel_regex import search
from .columns import Column, _quote, path_text
from .shapes import compiled_shapes
from .valuesets import MIN_GROUPS, wilson_lower

TEXT_WORDS = 4.0  # mean words per value from which a string field is read as text
MAX_EQUAL_WORDS = 3  # equality is proposed with values of at most this many words
MAX_PHRASE_WORDS = 3
MAX_PHRASES = 12  # frequent phrases, and as many telling ones, proposed per field
MAX_SET_PHRASES = 400  # phrases a set may hold before those a shorter one contains are dropped
MAX_EXACT = 400  # phrases (the most frequent and the most telling) whose steps are read exactly
EXACT_BUDGET = 4_000_000_000  # characters scanned to read phrases exactly (a few seconds): fewer phrases on more text
# Words with which a text addresses its reader and tells them what to do: fixed, never learned from the
# runs (each in lower case and capitalised: ``contains`` is exact)
CUES = ("ignore", "instead", "must", "immediately", "now", "make sure", "do not", "don't", "you are",
        "assistant", "before you", "please", "important", "urgent", "required", "always", "never", "forget")
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'-]*")
_SPLIT = re.compile(r"\S+")


def cue_forms() -> tuple[str, ...]:
    """The cues as the CEL list holds them: each in lower case and capitalised."""
    return tuple(dict.fromkeys(f for c in CUES for f in (c, c[0].upper() + c[1:])))


def short(value: str) -> bool:
    """Whether equality with ``value`` may be proposed: at most :data:`MAX_EQUAL_WORDS` words."""
    return len(_SPLIT.findall(value)) <= MAX_EQUAL_WORDS


def is_text(values: list[Any]) -> bool:
    """Whether a string column is text: its distinct values average at least :data:`TEXT_WORDS` words."""
    distinct = [v for v in set(values) if v.__class__ is str]
    if not distinct:
        return False
    return sum(len(_SPLIT.findall(v)) for v in distinct) / len(distinct) >= TEXT_WORDS


def phrases_of(text: str) -> set[str]:
    """The phrases of 1 to :data:`MAX_PHRASE_WORDS` words of ``text``, each a substring of it: words
    (letters and digits, inner apostrophes and hyphens) that a single space separates."""
    out: set[str] = set()
    matches = list(_WORD.finditer(text))
    for i, m in enumerate(matches):
        out.add(m.group())
        end = m.end()
        for j in range(i + 1, min(i + MAX_PHRASE_WORDS, len(matches))):
            nxt = matches[j]
            if nxt.start() != end + 1 or text[end] != " ":
                break
            out.add(text[m.start():nxt.end()])
            end = nxt.end()
    return out


def _list_literal(items: list[str] | tuple[str, ...]) -> str:
    return "[" + ", ".join(_quote(i) for i in items) + "]"


class Add(Protocol):
    """The builder's ``add``: column, expression, name, description, bits over all steps, held-out bits or None,
    and whether it is a fixed pattern (:attr:`.candidates.Candidate.fixed`)."""

    def __call__(self, column: Column, expr: str, name: str, description: str, bits_all: NDArray[np.bool_],
                 held_out: NDArray[np.bool_] | None = None, fixed: bool = False) -> None: ...


def text_candidates(column: Column, scored: NDArray[np.int64], outcome: NDArray[np.float64] | None,
                    min_support: int, add: Add, name: Callable[..., str], sets: Any, factors: tuple[float, ...]
                    ) -> None:
    """Propose the candidates of a text column (see the module's doc) through ``add``.

    Args:
        column: a string column that :func:`is_text`.
        scored: indices of the scored steps.
        outcome: 1.0 on each scored step of a violating run (None: frequent phrases only).
        min_support: scored steps a phrase must be seen on.
        add: the builder's ``add``.
        name: makes a spec name of parts.
        sets: the folds' :class:`~.valuesets.ValueSets` (None: no phrase sets).
        factors: the value sets' factors.
    """
    values = column.values
    # (the builder guards a missing field with has(); a null text has no contains either)
    text = path_text(column.path)
    reads = f"{text} != null && " if column.missing else ""
    def guarded(column: Column, expr: str, name: str, description: str, bits_all: NDArray[np.bool_],
                held_out: NDArray[np.bool_] | None = None, fixed: bool = False) -> None:
        add(column, reads + expr, name, description, bits_all, held_out, fixed)

    add_text: Add = add if not reads else guarded
    field = list(column.path[1:]) if column.path[0] == "state" else list(column.path)
    distinct = list(dict.fromkeys(v for v in values if v.__class__ is str))
    if not distinct:
        return
    index = {v: i for i, v in enumerate(distinct)}
    codes = np.fromiter((index.get(v, -1) if v.__class__ is str else -1 for v in values), dtype=np.int64,
                        count=len(values))
    at = codes[scored]
    # (distinct value, phrase) pairs, and the scored steps each distinct value is on
    phrase_index: dict[str, int] = {}
    value_rows: list[int] = []
    phrase_cols: list[int] = []
    for v, value in enumerate(distinct):
        for p in phrases_of(value):
            value_rows.append(v)
            phrase_cols.append(phrase_index.setdefault(p, len(phrase_index)))
    phrases = list(phrase_index)
    # a phrase of one character, or without a letter, is part of too many texts by chance
    usable = np.fromiter((len(p) >= 2 and any(ch.isalpha() for ch in p) for p in phrases), dtype=np.bool_,
                         count=len(phrases))
    steps_of_value = np.bincount(at[at >= 0], minlength=len(distinct))
    vr, pc = np.asarray(value_rows, dtype=np.int64), np.asarray(phrase_cols, dtype=np.int64)
    support = np.bincount(pc, weights=steps_of_value[vr], minlength=len(phrases)) if len(pc) else np.zeros(0)
    eligible = np.flatnonzero((support >= min_support) & (support <= len(scored) - min_support) & usable)
    # the pairs again, exactly as CEL reads them: a phrase is in every text that contains it ("id" in "provide");
    # one scan of all the texts joined per phrase (a phrase holds no NUL, so no match spans two texts)
    # (of the phrases with the support: the most frequent, and the most telling by their words)
    exact = max(2 * MAX_PHRASES, min(MAX_EXACT, EXACT_BUDGET // max(sum(map(len, distinct)), 1)))
    frequent = [int(c) for c in eligible[np.argsort(-support[eligible], kind="stable")][:2 * MAX_PHRASES]]
    telling = [] if outcome is None else _telling(eligible, vr, pc, at, outcome, len(distinct), set(frequent),
                                                  exact - len(frequent))
    phrases = [phrases[c] for c in (frequent + telling)[:exact]]
    joined = "\x00".join(distinct)
    starts = np.cumsum([0] + [len(v) + 1 for v in distinct[:-1]])
    rows_parts: list[NDArray[np.int64]] = []
    cols_parts: list[NDArray[np.int64]] = []
    for c, phrase in enumerate(phrases):
        if "\x00" in phrase:
            continue
        at_chars = np.fromiter((m.start() for m in re.finditer(re.escape(phrase), joined)), dtype=np.int64)
        hit = np.unique(np.searchsorted(starts, at_chars, side="right") - 1)
        rows_parts.append(hit)
        cols_parts.append(np.full(len(hit), c, dtype=np.int64))
    vr = np.concatenate(rows_parts) if rows_parts else np.zeros(0, dtype=np.int64)
    pc = np.concatenate(cols_parts) if cols_parts else np.zeros(0, dtype=np.int64)
    support = np.bincount(pc, weights=steps_of_value[vr], minlength=len(phrases)) if len(pc) else np.zeros(0)
    eligible = np.flatnonzero((support >= min_support) & (support <= len(scored) - min_support))

    def spread(per_value: NDArray[np.bool_]) -> NDArray[np.bool_]:
        out = np.zeros(len(values), dtype=np.bool_)
        out[codes >= 0] = per_value[codes[codes >= 0]]
        return out

    def holding(members: list[int]) -> NDArray[np.bool_]:
        """Each step's bit: its text contains one of these phrases (by code), from the exact pairs."""
        per_value = np.zeros(len(distinct), dtype=np.bool_)
        per_value[vr[np.isin(pc, members)]] = True
        return spread(per_value)

    chosen = [int(c) for c in eligible[np.argsort(-support[eligible], kind="stable")[:MAX_PHRASES]]]
    if outcome is not None and len(eligible) > MAX_PHRASES:
        chosen += _telling(eligible, vr, pc, at, outcome, len(distinct), set(chosen), MAX_PHRASES)
    for c in chosen:
        phrase = phrases[c]
        add_text(column, f"{text}.contains({_quote(phrase)})", name(*field, "says", phrase),
            f"{text} contains {phrase!r}", holding([c]), None)
    if sets is not None and len(eligible) >= 3:
        _phrase_sets(column, text, field, scored, at, vr, pc, phrases, eligible, min_support, add_text, name, sets,
                     factors, holding)
    forms = cue_forms()
    cue_counts = np.fromiter((sum(f in v for f in forms) for v in distinct), dtype=np.int64, count=len(distinct))
    counted = cue_counts[at[at >= 0]]
    cue_list = _list_literal(forms)
    for t in np.unique(counted)[:-1].tolist()[:6]:
        add_text(column, f"size({cue_list}.filter(c, {text}.contains(c))) > {t}", name(*field, "cues", "above", str(t)),
            f"{text} holds more than {t} instruction cue(s)", spread(cue_counts > t), None)
    for shape, says, pattern, _ in compiled_shapes():  # (s40-inj) the shape of an instruction to an agent
        # what the predicate will answer (RE2, linear in the text: the runs' texts are an attacker's too)
        shaped = np.fromiter((search(v, pattern) for v in distinct), dtype=np.bool_, count=len(distinct))
        add_text(column, f"{text}.matches({_quote(pattern)})", name(*field, shape), f"{text} {says}",
                 spread(shaped), None, True)
    sizes = np.fromiter((len(v) for v in distinct), dtype=np.int64, count=len(distinct))
    lengths = sizes[at[at >= 0]]
    if len(lengths):
        for t in np.unique(np.quantile(lengths, (0.1, 0.3, 0.5, 0.7, 0.9), method="lower")).tolist():
            add_text(column, f"size({text}) > {t}", name(*field, "longer", str(t)), f"{text} is longer than {t}",
                spread(sizes > t), None)  # CEL's size of a string counts code points, as len does


def _telling(eligible: NDArray[np.int64], vr: NDArray[np.int64], pc: NDArray[np.int64], at: NDArray[np.int64],
             outcome: NDArray[np.float64], n_values: int, taken: set[int], limit: int) -> list[int]:
    """The ``limit`` eligible phrases whose steps' outcome differs most from the rest (a z-score), not yet taken."""
    p = float(outcome.mean()) if len(outcome) else 0.0
    if not 0.0 < p < 1.0:
        return []
    on = at >= 0
    steps = np.bincount(at[on], minlength=n_values).astype(np.float64)
    bad = np.bincount(at[on], weights=outcome[on], minlength=n_values)
    size = int(pc.max()) + 1
    n = np.bincount(pc, weights=steps[vr], minlength=size)
    u = np.bincount(pc, weights=bad[vr], minlength=size)
    z = np.abs(u - n * p) / np.maximum(np.sqrt(n * p * (1 - p)), 1e-12)
    ranked = eligible[np.argsort(-z[eligible], kind="stable")]
    return [int(c) for c in ranked if int(c) not in taken][:max(limit, 0)]


def _phrase_sets(column: Column, text: str, field: list[str], scored: NDArray[np.int64], at: NDArray[np.int64],
                 vr: NDArray[np.int64], pc: NDArray[np.int64], phrases: list[str], eligible: NDArray[np.int64],
                 min_support: int, add: Add, name: Callable[..., str], sets: Any, factors: tuple[float, ...],
                 holding: Callable[[list[int]], NDArray[np.bool_]]) -> None:
    """One phrase-set candidate per factor: the (scored step, phrase) pairs go to :class:`~.valuesets.ValueSets`
    as a list field's (step, element) pairs do."""
    keep = np.isin(pc, eligible)
    vr, pc = vr[keep], pc[keep]
    # expand (value, phrase) pairs to (scored step, phrase) pairs: steps sorted by value
    positions = np.flatnonzero(at >= 0)
    order = positions[np.argsort(at[positions], kind="stable")]
    n_values = int(max(at.max(initial=-1), vr.max(initial=-1))) + 2  # every value code, and one past the last
    starts = np.searchsorted(at[order], np.arange(n_values))
    rows_parts: list[NDArray[np.int64]] = []
    codes_parts: list[NDArray[np.int64]] = []
    by_value = np.argsort(vr, kind="stable")
    vr, pc = vr[by_value], pc[by_value]
    bounds = np.searchsorted(vr, np.arange(n_values))
    for v in np.unique(vr).tolist():
        on_steps = order[starts[v]:starts[v + 1]]
        if not len(on_steps):
            continue
        its = pc[bounds[v]:bounds[v + 1]]
        rows_parts.append(np.repeat(on_steps, len(its)))
        codes_parts.append(np.tile(its, len(on_steps)))
    if not rows_parts:
        return
    rows, codes = np.concatenate(rows_parts), np.concatenate(codes_parts)
    for factor in factors:
        final = _choose(rows, codes, len(phrases), sets, factor, min_support, None)
        if not len(final):
            continue
        members = _outermost([phrases[c] for c in final.tolist()])
        code_of = {p: c for c, p in enumerate(phrases)}
        held_out = np.zeros(len(scored), dtype=np.bool_)
        for f in range(sets.folds):
            chosen = _choose(rows, codes, len(phrases), sets, factor, min_support, f)
            in_fold = np.zeros(len(scored), dtype=np.bool_)
            in_fold[rows[np.isin(codes, chosen)]] = True
            held_out[sets.fold == f] = in_fold[sets.fold == f]
        shown = ", ".join(map(repr, members[:4])) + (", …" if len(members) > 4 else "")
        add(column, f"{_list_literal(members)}.exists(p, {text}.contains(p))",
            name(*field, "says", "risky", f"{factor:g}x"),
            f"{text} contains one of {len(members)} phrases whose steps violate >= {factor:g}x as often ({shown})",
            holding([code_of[m] for m in members]), held_out)


def _choose(rows: NDArray[np.int64], codes: NDArray[np.int64], size: int, sets: Any, factor: float,
            min_support: int, without: int | None) -> NDArray[np.int64]:
    """The phrases whose training steps (those not in fold ``without``) belong to violating runs at least
    ``factor`` times as often as training steps overall (a one-sided Wilson lower bound, 95 % over all the
    phrases tried), seen on
    violating runs of at least :data:`MIN_GROUPS` groups: a phrase one group of runs alone showed (one
    attack's wording, one task's document) stays out. The :data:`MAX_SET_PHRASES` with the highest bound."""
    y, fold, group = sets.y, sets.fold, sets.group
    steps = np.ones(len(y), dtype=np.bool_) if without is None else fold != without
    if not steps.any():
        return np.zeros(0, dtype=np.int64)
    base = float(y[steps].mean())
    if not 0.0 < base < 1.0:
        return np.zeros(0, dtype=np.int64)
    keep = steps[rows]
    r, c = rows[keep], codes[keep]
    n = np.bincount(c, minlength=size).astype(np.float64)
    u = np.bincount(c, weights=y[r], minlength=size).astype(np.float64)
    width = int(group.max()) + 1
    bad = y[r] > 0
    pairs = np.unique(c[bad] * width + group[r[bad]])
    groups = np.bincount(pairs // width, minlength=size)
    lower = np.zeros(size)
    seen = n > 0
    # hundreds of phrases are tried: the bound is taken at 95 % over all of them (Bonferroni), or common
    # words would get in by chance
    tried = max(int(np.sum(n >= min_support)), 1)
    lower[seen] = wilson_lower(u[seen], n[seen], NormalDist().inv_cdf(1.0 - 0.05 / tried))
    chosen = np.flatnonzero((n >= min_support) & (groups >= MIN_GROUPS) & (lower >= factor * base))
    if len(chosen) > MAX_SET_PHRASES:
        chosen = chosen[np.argsort(-lower[chosen], kind="stable")[:MAX_SET_PHRASES]]
    return np.sort(chosen)


def _outermost(phrases: list[str]) -> list[str]:
    """The phrases none of the others is part of, sorted: a text that contains "Ignore all" contains "Ignore",
    so the longer adds nothing to "contains one of these"."""
    kept = [p for p in phrases if not any(q != p and q in p for q in phrases)]
    return sorted(kept)
