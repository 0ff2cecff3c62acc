"""Printing llmcheck reports and sweeps (rich tables, or JSON)."""
from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import orjson
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .pipeline import LLMCheckReport, Outcome, SweepRow


def print_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")


def _p(value: float | None) -> str:
    return "–" if value is None else f"{value:.6g}"


def render_report(report: LLMCheckReport, *, top: int = 5, exported: Path | None = None,
                  console: Console | None = None) -> None:
    """The answer with its bounds, the model's size, the unexplored mass, the texts, the cost."""
    out = console or Console()
    d = report.to_dict(top)
    model, cost = cast(dict[str, Any], d["model"]), cast(dict[str, Any], d["cost"])
    table = Table(title=f"forewarn llmcheck — {escape(str(d['property']))}", show_header=False)
    table.add_row("probability", f"[bold]{_p(report.result.value)}[/]")
    table.add_row("with unexplored mass", f"[{_p(report.result.lower)}, {_p(report.result.upper)}]")
    if report.result.value_lower is not None:
        table.add_row("Storm's numerical bounds", f"[{_p(report.result.value_lower)}, {_p(report.result.value_upper)}]")
    if report.result.verdict is not None or report.result.query.bound is not None:
        table.add_row("verdict", "undecided" if report.result.verdict is None else str(report.result.verdict).lower())
    if report.result.note:
        table.add_row("note", escape(report.result.note))
    table.add_row("unexplored mass (terminal)", _p(report.unexplored_mass))
    table.add_row("source", escape(report.model.source))
    table.add_row("prompt", escape(repr(report.model.prompt)))
    s = report.model.settings
    table.add_row("α, k, depth", f"{s.alpha}, {s.k}, {s.depth}")
    table.add_row("states / transitions", f"{model['states']} / {model['transitions']}")
    table.add_row("expanded / leaves / ended / cut",
                  f"{model['expanded']} / {model['leaves']} / {model['ended']} / {model['cut']}")
    table.add_row("merged token paths", str(model["merged_paths"]))
    table.add_row("model calls / batches", f"{cost['model_calls']} / {cost['batches']} "
                  f"({cost['prefixes_per_batch']} prefixes a batch; {cost['cache_hits']} cached)")
    table.add_row("time", f"{cost['seconds']:.3f} s (model {cost['model_seconds']:.3f} s, "
                  f"Storm {cost['check_seconds']:.3f} s)")
    if cost["stopped_by"]:
        table.add_row("budget", f"stopped by the {cost['stopped_by']} limit")
    if exported is not None:
        table.add_row("exported", escape(str(exported)))
    out.print(table)
    _texts(out, "Most likely texts that satisfy the property", report.satisfying(top))
    _texts(out, "Most likely texts that violate it", report.violating(top))


def _texts(out: Console, title: str, outcomes: Sequence[Outcome]) -> None:
    if not outcomes:
        out.print(f"{title}: none in the explored model.")
        return
    table = Table(title=title)
    table.add_column("probability", justify="right")
    table.add_column("kind")
    table.add_column("continuation")
    table.add_column("values")
    for o in outcomes:
        values = ", ".join(f"{k}={v}" for k, v in o.values.items())
        table.add_row(f"{o.probability:.4g}", o.kind.value, escape(repr(o.continuation)), escape(values))
    out.print(table)


def render_sweep(rows: Sequence[SweepRow], *, property: str, console: Console | None = None) -> None:
    """One line per (α, k, depth): value, interval, unexplored mass, size, calls, time."""
    out = console or Console()
    table = Table(title=f"forewarn llmcheck sweep — {escape(property)}")
    for name in ("α", "k", "depth", "value", "lower", "upper", "unexplored", "states", "calls", "new calls", "s"):
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(str(r.alpha), str(r.k), str(r.depth), _p(r.value), _p(r.lower), _p(r.upper),
                      _p(r.unexplored_mass), str(r.states), str(r.expanded), str(r.new_calls), f"{r.seconds:.3f}")
    out.print(table)
