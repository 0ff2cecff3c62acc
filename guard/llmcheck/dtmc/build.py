"""Labels on the explored chain, and the Storm models built from it.

Two models: the paper's DTMC, where the terminal state carries no label but
``terminal``; and the *bounds MDP*, where every unit of unexplored mass may continue as
any text at all: an adversary picks, at every step, which of the query's labels hold. Its
minimum and maximum probabilities bound what the full, unbounded model could give.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from typing import Any

import stormpy
from stormpy import datastructures as _ds
from stormpy import models as _models

from ...storm import build_sparse_dtmc
from ..chain import ExploredModel, StateKind
from ..errors import QueryError
from ..quantify import Quantification
from ..query import Query

MAX_BOUND_ATOMS = 8  # the bounds MDP has 2^atoms chaos states with 2^atoms choices each


class Scope(str, Enum):
    """Which text a quantification reads."""

    GENERATED = "generated"  # only what the model wrote after the start text
    FULL = "full"  # the start text and the continuation (the paper's ω)


@dataclass(frozen=True)
class Labeling:
    """Quantification values and labels of every state (the terminal state has none).

    Attributes:
        values: quantification name → one value per state (``None`` for the terminal).
        labels: Storm label name → the states that carry it.
    """

    values: dict[str, list[int | None]]
    labels: dict[str, list[int]]


def label_states(model: ExploredModel, query: Query, quantifications: Sequence[Quantification], *,
                 scope: Scope = Scope.GENERATED) -> Labeling:
    """Quantify each state's text and attach the query's labels.

    Args:
        model: the explored chain.
        query: the parsed property; its comparisons name quantifications.
        quantifications: at least those the query names (more are quantified for the report).
        scope: whether quantifications read the continuation or the whole text.
    """
    by_name = {q.name: q for q in quantifications}
    missing = [name for name in query.quantities if name not in by_name]
    if missing:
        raise QueryError(f"the property reads {', '.join(map(repr, missing))} but no such quantification is "
                         f"given (have: {', '.join(by_name) or 'none'}); add --quantify {missing[0]}")
    values: dict[str, list[int | None]] = {}
    for q in quantifications:
        memo: dict[str, int] = {}
        column: list[int | None] = []
        for s in model.states:
            if s.kind is StateKind.TERMINAL:
                column.append(None)
                continue
            text = s.continuation if scope is Scope.GENERATED else s.text
            value = memo.get(text)
            if value is None:
                value = memo[text] = q(text)
            column.append(value)
        values[q.name] = column
    labels: dict[str, list[int]] = {"init": [0]}
    for storm_name, comparison in query.comparisons.items():
        column = values[comparison.quantity]
        labels[storm_name] = [i for i, v in enumerate(column) if v is not None and comparison.holds(v)]
    kinds = {"leaf": StateKind.LEAF, "ended": StateKind.ENDED, "cut": StateKind.CUT, "terminal": StateKind.TERMINAL}
    for name, kind in kinds.items():
        labels[name] = [s.index for s in model.states if s.kind is kind]
    return Labeling(values, labels)


def build_dtmc(model: ExploredModel, labeling: Labeling, *, exact: bool = False) -> Any:
    """The paper's DTMC as a Storm sparse model (rational when ``exact``)."""
    exact_rows = model.exact_rows() if exact else None
    return build_sparse_dtmc(model.csr(), labeling.labels, exact_rows=exact_rows)


def chaos_atoms(query: Query) -> list[str]:
    """The labels an unknown continuation may take either way (not init, terminal or cut)."""
    return [a for a in query.atoms if a not in ("init", "terminal", "cut")]


def build_bounds_mdp(model: ExploredModel, labeling: Labeling, query: Query, *, exact: bool = False) -> Any:
    """The bounds MDP: unexplored mass enters a chaos gadget over the query's labels.

    States keep their indices; after them come 2^m chaos states, one per valuation of the
    m atoms. A state with unexplored mass gets one choice per valuation (where that mass
    goes); a chaos state may move to any valuation (staying = the text ended). Chaos
    states also carry ``terminal``.
    """
    atoms = chaos_atoms(query)
    if len(atoms) > MAX_BOUND_ATOMS:
        raise QueryError(f"bounds need at most {MAX_BOUND_ATOMS} distinct labels, the property has {len(atoms)}")
    n, chaos = model.size, 1 << len(atoms)
    value_type: Any = stormpy.Rational if exact else float
    one: Any = stormpy.Rational(1) if exact else 1.0

    def convert(p: Fraction | float) -> Any:
        if exact:
            f = Fraction(p)
            return stormpy.Rational(f"{f.numerator}/{f.denominator}")
        return float(p)

    rows: Sequence[Sequence[tuple[int, Any]]] = model.exact_rows() if exact else model.rows()
    builder = _ds.SparseMatrixBuilder[value_type](0, 0, 0, False, True, 0)
    row = 0
    for i, state_row in enumerate(rows):
        builder.new_row_group(row)
        explored = [(j, p) for j, p in state_row if j != model.terminal or i == model.terminal]
        unexplored = [p for j, p in state_row if j == model.terminal and i != model.terminal]
        choices = range(chaos) if unexplored else [None]
        for valuation in choices:
            for j, p in explored:
                builder.add_next_value(row, j, convert(p))
            if valuation is not None:
                builder.add_next_value(row, n + valuation, convert(unexplored[0]))
            row += 1
    for _ in range(chaos):
        builder.new_row_group(row)
        for target in range(chaos):
            builder.add_next_value(row, n + target, one)
            row += 1
    matrix = builder.build(row, n + chaos)
    state_labels = _models.StateLabeling(n + chaos)
    names = set(labeling.labels) | set(atoms) | {"terminal"}
    for name in sorted(names):
        state_labels.add_label(name)
        for state in labeling.labels.get(name, ()):
            state_labels.add_label_to_state(name, int(state))
    for valuation in range(chaos):
        state_labels.add_label_to_state("terminal", n + valuation)
        for bit, atom in enumerate(atoms):
            if valuation >> bit & 1:
                state_labels.add_label_to_state(atom, n + valuation)
    components = _models.SparseModelComponents[value_type](transition_matrix=matrix, state_labeling=state_labels)
    return _models.SparseMdp[value_type](components)


def prism_text(model: ExploredModel, labeling: Labeling, *, name: str = "llmcheck") -> str:
    """The chain as a PRISM DTMC: variable ``s`` is the state index, the query's labels kept.

    A comment before each command gives the state's text and quantification values;
    probabilities are written with ``repr`` so the floats round-trip exactly.
    """
    rows = model.rows()
    lines = [f"// {name}: the alpha-k-bounded DTMC of {model.source} after {model.prompt!r}",
             f"// alpha={model.settings.alpha} k={model.settings.k} depth={model.settings.depth}; "
             f"s={model.terminal} is the terminal state (unexplored mass)",
             "dtmc", "", "module generation", f"  s : [0..{model.size - 1}] init 0;"]
    for state, row in zip(model.states, rows):
        if state.kind is StateKind.TERMINAL:
            lines.append("  // terminal: the mass the bounds left unexplored")
        else:
            values = " ".join(f"{q}={column[state.index]}" for q, column in labeling.values.items())
            lines.append(f"  // {state.kind.value} depth={state.depth} {state.continuation!r} {values}".rstrip())
        updates = " + ".join(f"{float(p)!r}:(s'={j})" for j, p in row)
        lines.append(f"  [] s={state.index} -> {updates};")
    lines += ["endmodule", ""]
    for label, states in labeling.labels.items():
        if label == "init":  # PRISM defines "init" itself
            continue
        body = " | ".join(f"s={i}" for i in states) or "false"
        lines.append(f'label "{label}" = {body};')
    return "\n".join(lines) + "\n"
