"""Candidate predicates from the runs' columns: each a readable CEL expression and its value on every step.

What is proposed, per kind of field (:mod:`.columns`):

* a Boolean field — the field itself;
* a number — ``x > t`` at the field's distinct values when there are few, else at its
  deciles;
* a string — ``x == v`` for its frequent values of at most a few words (and, with many, the values
  whose steps' outcome differs most from the rest); an identifier offers nothing: no value has the
  support; equality with a longer text is never proposed (it tells one run, not the next);
* a text (a string field whose values average four words or more: a tool's output, an argument,
  a message) — the phrases it contains, phrase sets, counts of instruction cues and its length
  (:mod:`.texts`);
* a list — ``v in x`` for its frequent (and most telling) elements, and ``size(x) > 0``;
* a text field (or list of text) of at least three values — also *value sets*, the values whose
  runs violate far more often pooled into one bit, scored held out (:mod:`.valuesets`).

A candidate true (or false) on fewer than ``min_support`` scored steps cannot be learned
from, and two candidates with the same values on every step are one: the first (the
simpler) is kept. The expression is what CEL would compute on each step — fields some
step lacks are guarded with ``has()`` (or ``"key" in map``) and null values with
``!= null`` — and the final choice is checked against CEL itself before it is written
(:func:`guard.discovery.search.discover`).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .columns import _CEL_RESERVED, _IDENT, MISSING, Column, _quote, path_text
from .texts import is_text, short, text_candidates
from .valuesets import FACTORS, MIN_VALUES, ValueSets, set_expression

MAX_VALUES = 12  # frequent values (or list elements) proposed per field
MAX_CARDINALITY = 200  # values of one field whose outcome association is measured (the most frequent)
_FEW_NUMBERS = 12  # up to this many distinct numbers: a threshold at each
_QUANTILES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


@dataclass(frozen=True)
class Candidate:
    """One candidate predicate: its CEL, a name for the spec, what it says in words, and its
    value on every scored step, packed (``np.packbits``)."""

    cel: str
    name: str
    description: str
    root: str  # "state", "meta" or "action"
    packed: NDArray[np.uint8]
    support: int  # scored steps where it holds
    # a value set's bit as each fold sees it, chosen without that fold (:mod:`.valuesets`); None: ``packed``
    held_out: NDArray[np.uint8] | None = None
    # a fixed pattern, the same whatever the runs (:mod:`.shapes`): the search tests these few as a family of
    # their own, not as the best of the hundreds of phrases read off the runs
    fixed: bool = False

    def bits(self, count: int) -> NDArray[np.bool_]:
        """The predicate's value on every scored step (what CEL computes)."""
        return np.unpackbits(self.packed, count=count).view(np.bool_)

    def scored_bits(self, count: int) -> NDArray[np.bool_]:
        """The value the search scores on each scored step: for a value set, the set its fold's training chose."""
        packed = self.packed if self.held_out is None else self.held_out
        return np.unpackbits(packed, count=count).view(np.bool_)


def guard_of(path: tuple[str, ...]) -> str:
    """CEL that is true when every level of ``path`` below its root is present."""
    parts = []
    for i in range(1, len(path)):
        parent, key = path_text(path[:i]), path[i]
        if _IDENT.match(key) and key not in _CEL_RESERVED:
            parts.append(f"has({parent}.{key})")
        else:
            parts.append(f"{_quote(key)} in {parent}")
    return " && ".join(parts)


def _number_text(value: float) -> str:
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def _name(*parts: str) -> str:
    text = "_".join(parts)
    text = re.sub(r"[^A-Za-z0-9_]+", "_", text).strip("_")
    text = re.sub(r"_+", "_", text)
    if not text or text[0].isdigit():
        text = "p_" + text
    return text[:60].rstrip("_")


class _Builder:
    def __init__(self, scored: NDArray[np.int64], min_support: int, outcome: NDArray[np.float64] | None) -> None:
        self.scored = scored
        self.outcome = outcome
        self.count = len(scored)
        self.min_support = min_support
        self.seen: set[bytes] = set()
        self.out: list[Candidate] = []
        self.sets: ValueSets | None = None

    def add(self, column: Column, expr: str, name: str, description: str, bits_all: NDArray[np.bool_],
            held_out: NDArray[np.bool_] | None = None, fixed: bool = False) -> None:
        bits = bits_all[self.scored]
        support = int(bits.sum())
        if support < self.min_support or self.count - support < self.min_support:
            return
        packed = np.packbits(bits)
        fingerprint = packed.tobytes()
        if fingerprint in self.seen or (~bits).tobytes() in self.seen:
            return
        self.seen.add(fingerprint)
        # a complement is the same split: remember its packed form too
        self.seen.add(np.packbits(~bits).tobytes())
        if column.missing:
            guard = guard_of(column.path)
            null = f"{path_text(column.path)} != null && " if column.kind in ("number", "list") else ""
            expr = f"{guard} && {null}{expr}"
        self.out.append(Candidate(expr, name, description, column.path[0], packed, support,
                                  None if held_out is None else np.packbits(held_out), fixed))


def generate(columns: list[Column], scored: NDArray[np.int64], min_support: int,
             outcome: NDArray[np.float64] | None = None, sets: ValueSets | None = None) -> list[Candidate]:
    """The candidates of every column (see the module's doc), deduplicated by their values on scored steps.

    Args:
        columns: the table's columns (values over all steps).
        scored: indices of the steps the search scores (before each run's violation).
        min_support: scored steps on which a candidate must hold, and must not.
        outcome: 1.0 for each scored step of a run that violates: a field of many values (or a
            list of many elements) offers its most frequent values *and* those whose steps' outcome
            differs most from the rest (a z-score), so a rare telling word is not crowded out by
            common ones.
        sets: the folds and groups of the scored steps: text fields of many values also offer value
            sets (:mod:`.valuesets`), scored with the sets each fold's training steps choose.
    """
    builder = _Builder(scored, min_support, outcome)
    builder.sets = sets
    for column in columns:
        if column.kind == "bool":
            _bools(builder, column)
    for column in columns:
        if column.kind == "string":
            _strings(builder, column)
        elif column.kind == "list":
            _lists(builder, column)
        elif column.kind == "number":
            _numbers(builder, column)
    return builder.out


def _field_name(path: tuple[str, ...]) -> list[str]:
    return list(path[1:]) if path[0] == "state" else list(path)


def _bools(b: _Builder, column: Column) -> None:
    values = column.values
    if column.missing:
        bits = np.fromiter((v is True for v in values), dtype=np.bool_, count=len(values))
    else:
        bits = np.array(values, dtype=np.bool_)
    text = path_text(column.path)
    expr = f"{text} == true" if column.missing else text
    b.add(column, expr, _name(*_field_name(column.path)), f"{text} holds", bits)


def _codes(values: list[object], scored: NDArray[np.int64]) -> tuple[NDArray[np.int64], list[object], NDArray[np.int64]]:
    """Each value's code (a dict assigns them in order of appearance), the values by code, and how many
    scored steps have each."""
    distinct = list(dict.fromkeys(values))  # at C speed, as the lookups below
    index = {v: i for i, v in enumerate(distinct)}
    codes = np.array(list(map(index.__getitem__, values)), dtype=np.int64)
    counts = np.bincount(codes[scored], minlength=len(index))
    return codes, distinct, counts


def _strings(b: _Builder, column: Column) -> None:
    text_field = is_text(column.values)
    if text_field:
        text_candidates(column, b.scored, b.outcome, b.min_support, b.add, _name, b.sets, FACTORS)
    codes, values, counts = _codes(column.values, b.scored)
    # equality (and sets of values) only with short values: one whole text cannot tell another run
    real = [c for c, v in enumerate(values) if v.__class__ is str and short(v)]
    if not real:
        return
    text = path_text(column.path)
    for code in _chosen(b, real, counts, lambda c: codes[b.scored] == c):
        value = values[code]
        assert isinstance(value, str)
        b.add(column, f"{text} == {_quote(value)}", _name(*_field_name(column.path), "is", value),
              f"{text} is {value!r}", codes == code)
    if len(real) >= MIN_VALUES and not text_field:
        at = codes[b.scored]
        text_steps = np.isin(at, np.asarray(real, dtype=np.int64))
        _value_sets(b, column, np.flatnonzero(text_steps), at[text_steps], values, codes)


def _chosen(b: _Builder, codes: list[int], counts: NDArray[np.int64],
            steps_with: Callable[[int], NDArray[np.bool_]]) -> list[int]:
    """The most frequent codes, and (with outcomes) the most telling ones among those with support."""
    frequent = sorted(codes, key=lambda c: -counts[c])
    chosen = frequent[:MAX_VALUES]
    if b.outcome is None or len(frequent) <= MAX_VALUES:
        return chosen
    y = b.outcome
    p = float(y.mean()) if len(y) else 0.0
    if not 0.0 < p < 1.0:
        return chosen
    supported = [c for c in frequent[MAX_VALUES:] if counts[c] >= b.min_support][:4 * MAX_CARDINALITY]
    z = []
    for c in supported:
        mask = steps_with(c)
        n = float(mask.sum())
        z.append(abs(float(y[mask].sum()) - n * p) / max((n * p * (1 - p)) ** 0.5, 1e-12))
    telling = [c for _, c in sorted(zip(z, supported), key=lambda pair: -pair[0])[:MAX_VALUES]]
    return chosen + telling


def _lists(b: _Builder, column: Column) -> None:
    values = column.values
    text = path_text(column.path)
    nonempty = np.fromiter((v.__class__ is list and len(v) > 0 for v in values), dtype=np.bool_, count=len(values))
    b.add(column, f"size({text}) > 0", _name(*_field_name(column.path), "nonempty"), f"{text} is not empty",
          nonempty)
    index: dict[object, int] = {}
    rows: list[int] = []
    cols: list[int] = []
    for i, v in enumerate(values):
        if v.__class__ is list and v:
            for element in set(v):
                rows.append(i)
                cols.append(index.setdefault(element, len(index)))
    if not index:
        return
    row_array, col_array = np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)
    in_scored = np.zeros(len(values), dtype=np.bool_)
    in_scored[b.scored] = True
    counts = np.bincount(col_array[in_scored[row_array]], minlength=len(index))
    elements = list(index)
    scored_rows = in_scored[row_array]

    def steps_with(code: int) -> NDArray[np.bool_]:
        mask = np.zeros(len(values), dtype=np.bool_)
        mask[row_array[scored_rows & (col_array == code)]] = True
        return np.asarray(mask[b.scored], dtype=np.bool_)

    if len(elements) >= MIN_VALUES and all(e.__class__ is str and short(e) for e in elements):
        position = np.full(len(values), -1, dtype=np.int64)
        position[b.scored] = np.arange(len(b.scored))
        _value_sets(b, column, position[row_array[scored_rows]], col_array[scored_rows], elements, None,
                    row_array, col_array)
    for code in _chosen(b, [c for c, e in enumerate(elements) if not isinstance(e, str) or short(e)], counts,
                        steps_with):
        element = elements[code]
        literal = _quote(element) if isinstance(element, str) else (
            ("true" if element else "false") if isinstance(element, bool) else _number_text(float(element)))  # type: ignore[arg-type]
        bits = np.zeros(len(values), dtype=np.bool_)
        bits[row_array[col_array == code]] = True
        b.add(column, f"{literal} in {text}", _name(*_field_name(column.path), "has", str(element)),
              f"{text} contains {element!r}", bits)


def _value_sets(b: _Builder, column: Column, rows: NDArray[np.int64], codes: NDArray[np.int64],
                values: list[object], step_codes: NDArray[np.int64] | None,
                all_rows: NDArray[np.int64] | None = None, all_codes: NDArray[np.int64] | None = None) -> None:
    """One value-set candidate per factor (:mod:`.valuesets`). ``rows``/``codes``: the (scored-step position,
    value code) pairs; ``step_codes`` (a string field) or ``all_rows``/``all_codes`` (a list field): the
    values over all steps, for the final set's bit on every step."""
    if b.sets is None:
        return
    text = path_text(column.path)
    for factor in FACTORS:
        chosen = b.sets.sets(rows, codes, values, factor, b.min_support)
        if chosen is None:
            continue
        members, held = chosen
        code_of = {v: i for i, v in enumerate(values)}
        wanted = np.asarray([code_of[v] for v in members], dtype=np.int64)
        if step_codes is not None:
            bits_all = np.isin(step_codes, wanted)
        else:
            assert all_rows is not None and all_codes is not None
            bits_all = np.zeros(len(column.values), dtype=np.bool_)
            bits_all[all_rows[np.isin(all_codes, wanted)]] = True
        held_out = np.zeros(len(b.scored), dtype=np.bool_)
        for f, member in enumerate(held):
            in_fold = b.sets.fold == f
            held_out[in_fold] = member[in_fold]
        shown = ", ".join(map(str, members[:4])) + (", …" if len(members) > 4 else "")
        b.add(column, set_expression(column, members), _name(*_field_name(column.path), "risky", f"{factor:g}x"),
              f"{text} holds one of {len(members)} values whose runs violate >= {factor:g}x as often ({shown})",
              bits_all, held_out)


def _numbers(b: _Builder, column: Column) -> None:
    values = column.values
    if column.missing:
        array = np.fromiter((math.nan if v is MISSING or v is None else float(v) for v in values),
                            dtype=np.float64, count=len(values))
    else:
        array = np.array(values, dtype=np.float64)
    scored = array[b.scored]
    scored = scored[np.isfinite(scored)]
    if not len(scored):
        return
    distinct = np.unique(scored)
    if len(distinct) <= _FEW_NUMBERS:
        thresholds = distinct[:-1]
    else:
        thresholds = np.unique(np.quantile(scored, _QUANTILES, method="lower"))
        thresholds = thresholds[thresholds < distinct[-1]]
    text = path_text(column.path)
    with np.errstate(invalid="ignore"):
        for t in thresholds.tolist():
            literal = _number_text(t)
            b.add(column, f"{text} > {literal}", _name(*_field_name(column.path), "above", literal),
                  f"{text} > {literal}", np.asarray(array > float(literal), dtype=np.bool_))
