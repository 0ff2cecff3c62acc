"""``forewarn check``: a model's cached per-state values, another property checked on it, or a
PRISM file checked with Storm; as a table or as JSON."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from ...errors import UsageError
from ..model import CheckedProperty, GuardModel
from ..predicates import resolve_python_predicates
from ..results import Method
from ..spec import PropertyDef
from ._model_text import (
    MISMATCH_MARK,
    fmt,
    members_of,
    memory_document,
    mismatch_note,
    pac_document,
    pac_lines,
    state_words,
)
from ._options import Format, check_precision, out, print_json


def check(
    model: Annotated[Path, typer.Argument(help="A Forewarn model file, or a PRISM DTMC (.pm/.prism).")],
    property: Annotated[str | None, typer.Option("--property", "-p", help="PCTL property, e.g. 'P=? [F<=5 \"unsafe\"]'.")]
    = None,
    const: Annotated[str | None, typer.Option("--const", help="PRISM constants, e.g. N=16,K=2.")] = None,
    method: Annotated[Method, typer.Option(help="Storm method.")] = Method.SOUND,
    precision: Annotated[float, typer.Option(help="Solver precision.")] = 1e-6,
    format: Annotated[Format, typer.Option("--format")] = Format.table,
    group: Annotated[str | None, typer.Option(
        "--group", help="For a bundle: only this member (a group's value, or 'pooled'); default: every member.")]
    = None,
    trusted_key: Annotated[list[Path] | None, typer.Option(
        "--trusted-key", help="Require the model to be signed by this Ed25519 public key (PEM); repeatable. "
                              "Default: FOREWARN_TRUSTED_KEYS.")] = None,
) -> None:
    """Show the cached per-state values of a model (of each member of a bundle), or check another property."""
    check_precision(precision)
    if model.suffix in {".pm", ".prism"}:
        if property is None:
            raise UsageError("checking a PRISM file needs --property, e.g. --property 'P=? [F \"goal\"]'")
        from ..storm import check_prism_file  # Storm loads when a command checks, not when the CLI starts

        result = check_prism_file(model, property, constants=const, method=method, precision=precision)
        _print_prism(result, format)
        return
    if const is not None:
        raise UsageError("--const applies to PRISM files only")
    from ..bundle import load_model_or_bundle
    from ..signing import load_trusted_keys

    keys = load_trusted_keys(trusted_key) if trusted_key else None
    members = members_of(load_model_or_bundle(model, trusted_keys=keys), group)
    for spec in {id(m.spec): m.spec for m in members.values()}.values():
        # values whose predicates this process cannot evaluate guard nothing: the model is refused, as a guard does
        resolve_python_predicates(spec)
    checked = {name: _check_rows(m, property, method, precision) for name, m in members.items()}
    if format is Format.json:
        documents = {name: {"property": outcomes[0][1].formula, "method": outcomes[0][1].method.value,
                            "properties": [{"name": n, "formula": o.formula} for n, o in outcomes],
                            "intervals": None if (intervals := members[name].intervals) is None
                            else intervals.to_document(),
                            "pac": pac_document(members[name]), "states": rows}
                     for name, (outcomes, rows) in checked.items()}
        print_json(documents[None] if None in documents else {"bundle": str(model), "members": documents})
        return
    for name, (outcomes, rows) in checked.items():
        _print_check(members[name], outcomes, rows, name)


def _check_rows(loaded: GuardModel, property: str | None, method: Method, precision: float
                ) -> tuple[list[tuple[str, Any]], list[dict[str, Any]]]:
    """The checked properties of one model, and its states as ``check --format json`` lists them."""
    from ..storm import build_sparse_dtmc, check_dtmc, ctl_verdicts, labels_of, quantitative_form

    dtmc = loaded.dtmc
    if property is not None and _MDP_QUERY.match(property):  # Pmin/Pmax: the MDP beside the chain (docs/shield.md)
        if loaded.mdp is None:
            raise UsageError(f"{property}: Pmin/Pmax need the model's MDP: learn it with --mdp (learning.mdp: true)")
        from ..mdp_learn import check_mdp

        query = check_mdp(loaded.mdp, labels_of(dtmc), property, method=method, precision=precision)
        checked = [CheckedProperty(PropertyDef(name="query", formula="true"), query)]
    elif property is not None:
        # check_dtmc builds a rational model for --method exact (a float model is not exact)
        query = check_dtmc(dtmc, property, method=method, precision=precision)
        checked = [CheckedProperty(PropertyDef(name="query", formula="true"), query)]
        # a bound (P>0.4 [...]): the interval is that of the probability it compares
        numbers = property if query.verdicts is None else quantitative_form(property)
        if loaded.intervals is not None and numbers is not None:  # the same interval chain, the new question
            from dataclasses import replace

            from ..pipeline import with_intervals

            asked, _ = with_intervals(dtmc, labels_of(dtmc), [replace(checked[0], outcome=replace(
                query, formula=numbers))], method=loaded.intervals.method, delta=loaded.intervals.delta,
                entries=loaded.intervals.entries, precision=precision)
            checked = [replace(asked[0], outcome=query)]
    else:
        checked = loaded.properties
    outcomes = [(p.name, p.outcome) for p in checked]
    ci_low, ci_high = checked[0].ci_low, checked[0].ci_high
    visits = loaded.visits
    verdicts = ctl_verdicts(build_sparse_dtmc(dtmc.matrix, labels_of(dtmc)))
    monitor_rows = dtmc.monitor_states.tolist() if dtmc.monitor_states is not None else None
    monitors: dict[str, Any] = {}
    if monitor_rows is not None:
        from ..monitoring import build_monitors

        monitors = {m.name: m for m in build_monitors(loaded.spec)}
    first = outcomes[0][1]
    near = near_bound(first, property or first.formula)
    rows = []
    for i, bits in enumerate(dtmc.states):
        row: dict[str, Any] = {
            "predicates": {} if bits < 0 else {n: bool(bits >> b & 1) for b, n in enumerate(dtmc.predicates)},
            "monitors": {} if monitor_rows is None or bits < 0 else {
                name: monitors[name].describe(q) for name, q in zip(dtmc.monitors, monitor_rows[i])},
            "kind": "end" if bits < 0 else "state",
            "unsafe": bool(dtmc.unsafe[i]),
            "value": _number(first.values[i]),
            "lower": None if first.lower is None else float(first.lower[i]),
            "upper": None if first.upper is None else float(first.upper[i]),
            "ci_low": None if ci_low is None else float(ci_low[i]),
            "ci_high": None if ci_high is None else float(ci_high[i]),
            "visits": int(visits[i]),
            "ctl": {name: bool(v[i]) for name, v in verdicts.items()},
            "markov_mismatch": bool(checked[0].mismatch is not None and checked[0].mismatch[i]),
        }
        remembered = memory_document(loaded, i)
        if remembered is not None:  # learning.memory: states with the same predicates differ here
            row["memory"] = remembered
        if first.verdicts is not None:  # a state formula with a bound: Storm's verdict in this state
            row["verdict"] = bool(first.verdicts[i])
            row["near_bound"] = bool(near[i])
        if len(outcomes) > 1:
            row["properties"] = {p.name: {"value": _number(p.outcome.values[i]),
                                          "lower": None if p.outcome.lower is None else float(p.outcome.lower[i]),
                                          "upper": None if p.outcome.upper is None else float(p.outcome.upper[i]),
                                          "ci_low": None if p.ci_low is None else float(p.ci_low[i]),
                                          "ci_high": None if p.ci_high is None else float(p.ci_high[i])}
                                 for p in checked}
        rows.append(row)
    return outcomes, rows


def _print_check(loaded: GuardModel, outcomes: list[tuple[str, Any]], rows: list[dict[str, Any]],
                 member: str | None) -> None:
    first = outcomes[0][1]
    with_monitors = loaded.dtmc.monitor_states is not None
    with_intervals = loaded.intervals is not None and rows[0]["ci_low"] is not None
    # a terminal under 110 columns gets a narrower table (80 is the common one): 4 digits, the sound bounds
    # only when they differ from the value there, and EF unsafe alone (AG !unsafe is its negation)
    narrow = out.width < 110
    digits = 4 if narrow else 6
    spread = max((abs(r["upper"] - r["lower"]) for r in rows if r["lower"] is not None and r["upper"] is not None),
                 default=0.0)
    bounds = len(outcomes) == 1 and first.lower is not None and (not narrow or spread >= 0.5 * 10 ** -digits)
    title = "  ".join(f"{name}: {o.formula}" for name, o in outcomes) + f"  ({first.method.value})"
    table = Table(title=title if member is None else f"{member}: {title}")
    columns = ["#", "state"] + (["monitors"] if with_monitors else []) + ["unsafe"] \
        + [name for name, _ in outcomes] + (["lower", "upper"] if bounds else []) \
        + (["holds"] if first.verdicts is not None else []) \
        + ([f"{1 - loaded.intervals.delta:.0%} interval"] if with_intervals and loaded.intervals else []) \
        + ["visits", "EF unsafe"] + ([] if narrow else ["AG !unsafe"])
    for column in columns:
        table.add_column(column, justify="left" if column in {"state", "monitors", "unsafe"} else "right",
                         min_width=5 if column == "holds" else None)  # "false" whole, however narrow
    for i, row in enumerate(rows):
        cells = [str(i), ("end" if row["kind"] == "end" else state_words(loaded, i))
                 + (f" {MISMATCH_MARK}" if row["markov_mismatch"] else "")]
        if with_monitors:
            cells.append(", ".join(f"{k} {v}" for k, v in row["monitors"].items()))
        cells.append("yes" if row["unsafe"] else "")
        cells += [fmt(_number(o.values[i]), digits) for _, o in outcomes]
        if bounds:
            cells += [fmt(row["lower"], digits), fmt(row["upper"], digits)]
        if "verdict" in row:
            cells.append("true" if row["verdict"] else "false")
        if with_intervals:
            cells.append(f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]")
        cells.append(str(row["visits"]) if row["kind"] == "state" and not row["unsafe"] else "–")
        cells.append("yes" if row["ctl"]["EF unsafe"] else "no")
        if not narrow:
            cells.append("yes" if row["ctl"]["AG !unsafe"] else "no")
        table.add_row(*cells)
    out.print(table)
    if narrow and len(outcomes) == 1 and first.lower is not None and not bounds:
        out.print(f"Storm's sound bounds lie within {spread:.1e} of every value; a wider terminal or --format "
                  "json shows them.", highlight=False)
    if any(row["markov_mismatch"] for row in rows):
        out.print(mismatch_note(loaded), soft_wrap=True, highlight=False)
    close = [i for i, row in enumerate(rows) if row.get("near_bound")]
    if close:
        shown = ", ".join(f"#{i}" for i in close[:8]) + (", …" if len(close) > 8 else "")
        out.print(f"{len(close)} state(s) ({shown}) have a value within the solver's precision of the bound: their "
                  f"verdict may be the {first.method.value} solver's rounding, not the model's; re-check them with "
                  "--method exact", soft_wrap=True, highlight=False)
    for line in pac_lines(loaded):
        out.print(line, highlight=False)


_MDP_QUERY = re.compile(r"^\s*P(min|max)\s*(=\?|<=|>=|<|>)")
_BOUND = re.compile(r"^\s*P(?:min|max)?\s*(?:<=|>=|<|>)\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*\[")


def near_bound(outcome: Any, formula: str | None) -> np.ndarray:
    """Per state, whether a bounded formula's probability (``P~b [...]``) lies within the solver's precision
    of ``b`` (or Storm's bounds straddle it): the verdict there may be rounding. Never with ``exact``."""
    n = len(outcome.values)
    match = None if formula is None else _BOUND.match(formula)
    if match is None or outcome.verdicts is None or outcome.method is Method.EXACT:
        return np.zeros(n, dtype=bool)
    bound = float(match.group(1))
    values = np.asarray(outcome.values, dtype=float)
    low = values if outcome.lower is None else outcome.lower
    high = values if outcome.upper is None else outcome.upper
    with np.errstate(invalid="ignore"):
        near: np.ndarray = (np.abs(values - bound) <= max(outcome.precision, 1e-12)) | ((low <= bound) & (bound <= high))
    out: np.ndarray = near & np.isfinite(values)
    return out


def _number(value: float) -> float | None:
    """A per-state value for output; NaN (no probability: a Boolean state formula) is ``None``."""
    return None if value != value else float(value)


_SHOWN_INITIAL = 20


def _json_number(value: float) -> float | None:
    """JSON has no infinity or NaN: an infinite expected reward (``"infinite": true`` beside it) or
    no probability at all (a Boolean state formula) is null."""
    return float(value) if np.isfinite(value) else None


def _print_prism(result: Any, format: Format) -> None:
    """Every initial state's value (a PRISM model may have several) and, for a bounded formula,
    every state's verdict; states in the model's own variable order."""
    initial = set(result.initial_states)
    several = len(result.initial_states) > 1
    verdicts = result.verdicts

    def state(i: int, value: float) -> dict[str, Any]:
        entry: dict[str, Any] = {"index": i, "variables": result.variables[i], "value": _json_number(value)}
        if verdicts is not None:
            entry["verdict"] = bool(verdicts[i])
        return entry

    if format is Format.json:
        document: dict[str, Any] = {
            "property": result.formula,
            "initial": _json_number(result.initial),
            "initial_aggregate": f"max over {len(initial)} initial states" if several else "the initial state"}
        if verdicts is not None:
            document["verdict"] = result.verdict
        document["initial_states"] = [state(i, result.values[i]) for i in result.initial_states]
        document["states"] = [{**state(i, v), "infinite": bool(np.isinf(v)), "initial": i in initial}
                              for i, v in enumerate(result.values)]
        print_json(document)
        return
    size = f"{result.states} states, {result.transitions} transitions"

    def show(text: str) -> None:
        out.print(text, highlight=False, markup=False, soft_wrap=True)

    if verdicts is not None:
        held = [i for i in result.initial_states if verdicts[i]]
        value = "" if _json_number(result.initial) is None else (
            f" (probability {result.initial:.6g}" + (", the max" if several else "") + ")")
        where = "the initial state" if not several else f"{len(held)} of {len(result.initial_states)} initial states"
        show(f"{result.formula} is {'true' if result.verdict else 'false'}{value} in {where} ({size})")
        if several:
            for i in result.initial_states[:_SHOWN_INITIAL]:
                show(f"  {_words(result.variables[i])}  {'true' if verdicts[i] else 'false'}  {result.values[i]:.6g}")
    elif not several:
        (only,) = result.initial_states
        show(f"{result.formula} = {result.initial:.6g} in the initial state ({size}; the initial state is "
             f"{_words(result.variables[only])})")
        return
    else:
        values = result.initial_values
        show(f"{result.formula}: the model has {len(values)} initial states, each with its own value: "
             f"min {min(values):.6g}, max {max(values):.6g} (QComp reports the max) ({size})")
        for i in result.initial_states[:_SHOWN_INITIAL]:
            show(f"  {_words(result.variables[i])}  {result.values[i]:.6g}")
    if several and len(result.initial_states) > _SHOWN_INITIAL:
        show(f"  … and {len(result.initial_states) - _SHOWN_INITIAL} more (--format json lists them all)")


def _words(variables: dict[str, Any]) -> str:
    return "[" + ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in variables.items()) + "]"


def register(app: typer.Typer) -> None:
    """Add ``check`` to a typer app (``forewarn.guard.cli`` does this for ``forewarn``)."""
    app.command()(check)
