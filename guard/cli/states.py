"""``forewarn states`` and ``forewarn export``: a learned chain's states, as a table, JSON or CSV,
and the chain itself with its labels, as PRISM or DRN."""
from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from ...errors import UsageError
from ..bundle import GuardBundle
from ..model import GuardModel
from ..output_files import check_output, write_output
from ._model_text import MISMATCH_MARK, fmt, members_of, mismatch_note, state_words
from ._options import MkdirOption, out, print_json


class StatesFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


def states(
    model: Annotated[Path, typer.Argument(help="A Forewarn model file or bundle.")],
    group: Annotated[str | None, typer.Option(
        "--group", help="For a bundle: only this member (a group's value, or 'pooled'); default: every member.")]
    = None,
    format: Annotated[StatesFormat, typer.Option("--format", help="table, json or csv.")] = StatesFormat.table,
) -> None:
    """List the model's abstract states: visits, risk, the action each triggers, the most likely path to unsafe."""
    from ..bundle import POOLED, load_model_or_bundle
    from ..policy import Policy
    from ..runtime import Guard
    from ..states import state_rows

    members = members_of(load_model_or_bundle(model), group)
    # a bundle's member acts under its own thresholds where the spec gives it some (guard.member_thresholds)
    policies = {name: Policy.from_settings(m.spec.guard, None if name in (None, POOLED) else name)
                for name, m in members.items()}
    tables = {name: (m, state_rows(m, Guard(m, policy=policies[name]))) for name, m in members.items()}
    bundle = not (len(members) == 1 and None in members)
    if format is StatesFormat.json:
        def one(name: str | None, m: GuardModel, rows: list[Any]) -> dict[str, Any]:
            return {"property": m.outcome.formula, "spec": m.spec.name,
                    "thresholds": policies[name].thresholds.model_dump(),
                    "properties": [{"name": n, "formula": f, "thresholds": t.model_dump()}
                                   for n, f, t in _guarded(m, policies[name])],
                    "unseen_state": m.spec.guard.unseen_state.value,
                    "states": [{**r.to_dict(), **_moves_document(m, r.index)} for r in rows]}
        if not bundle:
            print_json(one(None, *tables[None]))
        else:
            print_json({"bundle": str(model), "members": {name: one(name, *t) for name, t in tables.items()}})
        return
    if format is StatesFormat.csv:
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        several = any(len(m.properties) > 1 for m, _ in tables.values())  # which property each row's figures are
        writer.writerow((["member"] if bundle else []) + ["index", "state", "monitors", "unsafe", "visits",
                        "runs_started", "p_unsafe", "lower", "upper", "ci_low", "ci_high", "action", "threshold",
                        "path", "path_probability", "markov_mismatch"] + (["property"] if several else []))
        for name, (m, rows) in tables.items():
            for r in rows:
                writer.writerow(([name] if bundle else []) + [
                    r.index, state_words(m, r.index), "; ".join(f"{k} {v}" for k, v in r.monitors.items()),
                    str(r.unsafe).lower(), r.visits, r.runs_started, r.p_unsafe, _blank(r.lower), _blank(r.upper),
                    _blank(r.ci_low), _blank(r.ci_high), r.action, _blank(r.threshold),
                    "" if r.path is None else " ".join(map(str, r.path)), _blank(r.path_probability),
                    str(r.mismatch).lower()] + ([r.property] if several else []))
        return
    for name, (m, rows) in tables.items():
        monitors = bool(m.dtmc.monitors)
        guarded = _guarded(m, policies[name])
        several = len(guarded) > 1
        # each guarded property with the thresholds it acts on (its own, or the guard's)
        title = "\n".join(f"{'' if name is None else f'{name}: '}{f'{n}: ' if several else ''}{f}; act when "
                          f"p_safe < θ: " + ", ".join(f"{a.value} {t}" for a, t in thresholds.items())
                          for n, f, thresholds in guarded)
        table = Table(title=title)
        columns = ["#", "state"] + (["monitors"] if monitors else []) + ["visits"] + (["property"] if several else []) \
            + ["p_unsafe", "bounds", "interval", "action", "most likely path to unsafe"] \
            + (["Pmin", "next moves: risk, interval, ×visits"] if _has_moves(m) else [])
        for column in columns:
            table.add_column(column, justify="right" if column in {"#", "visits", "p_unsafe"} else "left")
        for r in rows:
            cells = [str(r.index), state_words(m, r.index) + (" (unsafe)" if r.unsafe else "")
                     + (f" {MISMATCH_MARK}" if r.mismatch else "")]
            if monitors:
                cells.append(", ".join(f"{k} {v}" for k, v in r.monitors.items()))
            path = "unreachable" if r.path is None else (
                "here" if len(r.path) == 1 else " → ".join(f"#{i}" for i in r.path) + f"  ({r.path_probability:.3g})")
            cells += [str(r.visits)] + ([r.property or ""] if several else []) + [
                fmt(r.p_unsafe), _interval(r.lower, r.upper), _interval(r.ci_low, r.ci_high), r.action, path]
            if _has_moves(m):
                moves = _moves_document(m, r.index)
                cells += [fmt(moves["p_min"]), "; ".join(
                    f"{a['action_class']} {a['risk']:.3f} {_interval(a['ci_low'], a['ci_high'])} ×{a['visits']}"
                    for a in moves["next_moves"])]
            table.add_row(*cells)
        out.print(table)
        if any(r.mismatch for r in rows):
            out.print(mismatch_note(m), soft_wrap=True, highlight=False)
    several = any(len(m.properties) > 1 for m, _ in tables.values())
    out.print("visits: departures observed from the state; "
              + ("property: the guarded property calling for the most severe action there, whose figures the row "
                 "shows; " if several else "")
              + "bounds: Storm's numerical bounds; interval: the "
              "statistical interval where the model has one; path: the single most probable sequence of "
              "transitions into an unsafe state (its probability, a lower bound of p_unsafe).", soft_wrap=True)


def _has_moves(m: GuardModel) -> bool:
    return m.mdp is not None and m.mdp.risk is not None


def _moves_document(m: GuardModel, index: int) -> dict[str, Any]:
    """With the model's MDP (docs/shield.md): the state's Pmin, Pmax and each next move (action class) with
    its risk, interval and visits, safest first; nothing without one."""
    mdp = m.mdp
    if mdp is None or mdp.risk is None or mdp.pmin is None:
        return {}
    from ..mdp import ANY

    start, stop = int(mdp.choices[index]), int(mdp.choices[index + 1])
    visits = mdp.visits
    moves = [{"action_class": mdp.classes[int(mdp.choice_class[c])], "risk": float(mdp.risk[c]),
              "ci_low": None if mdp.risk_low is None else float(mdp.risk_low[c]),
              "ci_high": None if mdp.risk_high is None else float(mdp.risk_high[c]),
              "visits": round(float(visits[c]))} for c in range(start, stop)]
    moves = sorted((a for a in moves if a["action_class"] != ANY), key=lambda a: (a["risk"], a["action_class"]))
    return {"p_min": float(mdp.pmin[index]), "p_max": None if mdp.pmax is None else float(mdp.pmax[index]),
            "next_moves": moves}


def _guarded(m: GuardModel, policy: Any) -> list[tuple[str, str, Any]]:
    """Each guarded property: its name, its query and the thresholds it acts on (its own, else the policy's),
    as the guard reads them (``Guard._rules_of``)."""
    return [(p.name, p.outcome.formula, policy.thresholds if p.definition.thresholds is None
             else p.definition.thresholds) for p in m.properties]


def _blank(value: float | None) -> str | float:
    return "" if value is None else value


def _interval(low: float | None, high: float | None) -> str:
    return "–" if low is None or high is None else f"[{low:.4f}, {high:.4f}]"


class ExportFormat(str, Enum):
    prism = "prism"
    drn = "drn"


def export(
    model: Annotated[Path, typer.Argument(help="A Forewarn model file.")],
    format: Annotated[ExportFormat, typer.Option("--format", help="prism or drn.")] = ExportFormat.prism,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File to write (default: stdout).")]
    = None,
    group: Annotated[str | None, typer.Option(
        "--group", help="For a bundle: the member to export (a group's value, or 'pooled').")] = None,
    mkdir: MkdirOption = False,
) -> None:
    """Export the learned chain with its labels (unsafe, end, predicates) as PRISM or DRN."""
    from ..bundle import load_model_or_bundle

    if output is not None:
        check_output(output, inputs=[model], mkdir=mkdir)
    found = load_model_or_bundle(model)
    if isinstance(found, GuardBundle) and group is None:
        raise UsageError(f"{model} is a bundle: choose the member to export with --group "
                         f"({', '.join(found.names()[:6])}{', …' if len(found.names()) > 6 else ''})")
    loaded = next(iter(members_of(found, group).values()))
    if format is ExportFormat.prism:
        from ..storm import prism_text  # Storm loads when a command exports, not when the CLI starts

        text = prism_text(loaded.dtmc, name=loaded.spec.name)
    else:  # Storm writes DRN to a path only: a scratch file, then written like any output
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.drn"
            from ..storm import export_drn

            export_drn(loaded.dtmc, path)
            text = path.read_text(encoding="utf-8")
    if output is None:
        sys.stdout.write(text)
    else:
        write_output(output, text)


def register(app: typer.Typer) -> None:
    """Add ``states`` and ``export`` to a typer app, in this order (``forewarn.guard.cli`` does this for ``forewarn``)."""
    app.command()(states)
    app.command()(export)
