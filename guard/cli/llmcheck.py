"""``forewarn llmcheck``: bounded PCTL checking of an LLM's text generation.

The lead wires it in ``guard/cli.py`` with ``register(app)``. Heavy imports (stormpy,
transformers) happen inside the command, so ``forewarn --help`` stays fast.
"""
from __future__ import annotations

import importlib
import math
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from ..output_files import check_output, write_output
from ..results import Method
from ._options import Format, MkdirOption, check_positive_int, check_precision


class ExportFormat(str, Enum):
    prism = "prism"


class ScopeOption(str, Enum):
    generated = "generated"
    full = "full"




def parse_sweep(items: list[str]) -> dict[str, list[float]]:
    """``["alpha=0.5,0.8", "k=3,5"]`` (or one string with spaces) → ``{"alpha": [...], "k": [...]}``."""
    from ..llmcheck.errors import LLMCheckError  # the llmcheck package (its explorer, Storm) loads on use

    grid: dict[str, list[float]] = {}
    for item in (part for entry in items for part in entry.split()):
        name, sep, values = item.partition("=")
        if not sep or name not in ("alpha", "k", "depth"):
            raise LLMCheckError(f"--sweep: expected alpha=..., k=... or depth=... with comma-separated values, "
                                f"got {item!r}")
        try:
            grid[name] = [float(v) for v in values.split(",") if v.strip()]
        except ValueError as exc:
            raise LLMCheckError(f"--sweep: {item!r} has a value that is not a number") from exc
        if not grid[name]:
            raise LLMCheckError(f"--sweep: no value in {item!r}")
        if name in ("k", "depth") and any(not v.is_integer() for v in grid[name]):
            raise LLMCheckError(f"--sweep: {name} takes integers, got {values!r}")
    return grid


def llmcheck(
    model: Annotated[str | None, typer.Option("--model", "-m", help="Token source: a Hugging Face model path or "
                                                 "name, 'gguf:FILE.gguf', 'gguf:package' (the llm extra's model), "
                                                 "'openai:URL#MODEL', or 'ngram:TEXTFILE'.")] = None,
    prompt: Annotated[str | None, typer.Option("--prompt", help="The start text.")] = None,
    property: Annotated[str | None, typer.Option("--property", "-p", help="PCTL query over quantification "
                                                    "labels, e.g. 'P=? [F \"gender_bias>0\"]'.")] = None,
    quantify: Annotated[list[str] | None, typer.Option("--quantify", "-q", help="Quantification "
                        "[ALIAS=]KIND[:ARG], repeatable (built-ins named in the property are added).")] = None,
    alpha: Annotated[float, typer.Option(help="Cumulative probability at which a state stops adding tokens.")] = 0.8,
    k: Annotated[int, typer.Option(
        "--k", help="Most next tokens per state (tokens tied with the k-th are kept too).")] = 5,
    depth: Annotated[int, typer.Option(help="L: most tokens generated.")] = 5,
    scope: Annotated[ScopeOption, typer.Option(help="Quantify the generated text only, or the full text.")]
    = ScopeOption.generated,
    max_states: Annotated[int | None, typer.Option(help="Budget: stop expanding at this many states.")] = None,
    max_calls: Annotated[int | None, typer.Option(help="Budget: most prefixes sent to the model.")] = None,
    max_seconds: Annotated[float | None, typer.Option(help="Budget: seconds of exploration.")] = None,
    batch_size: Annotated[int | None, typer.Option(help="Prefixes per model call.")] = None,
    ngram_order: Annotated[int, typer.Option(help="n of the n-gram source.")] = 3,
    ngram_smoothing: Annotated[float, typer.Option(help="Unigram weight mixed into the n-gram source.")] = 0.0,
    eos_token: Annotated[list[str] | None, typer.Option(help="End-of-text token string (openai source), "
                                                           "repeatable.")] = None,
    method: Annotated[Method, typer.Option(help="Storm method.")] = Method.SOUND,
    precision: Annotated[float, typer.Option(help="Solver precision.")] = 1e-9,
    bounds: Annotated[bool, typer.Option(help="Compute the interval for the unexplored mass.")] = True,
    top: Annotated[int, typer.Option(help="Most likely satisfying / violating texts to show.")] = 5,
    export: Annotated[ExportFormat | None, typer.Option(help="Also write the explored model.")] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File for --export "
                                                   "(default llmcheck.prism).")] = None,
    sweep: Annotated[list[str] | None, typer.Option(help="Sweep, e.g. 'alpha=0.5,0.8,0.9 k=3,5,15'.")] = None,
    plugin: Annotated[list[str] | None, typer.Option(help="Import a module that registers quantifications.")]
    = None,
    list_quantifications: Annotated[bool, typer.Option("--list-quantifications", help="List quantifications.")]
    = False,
    format: Annotated[Format, typer.Option("--format")] = Format.table,
    more_sweep: Annotated[list[str] | None, typer.Argument(
        help="More sweep axes after --sweep, e.g. --sweep alpha=0.5,0.8 k=3,5,15.", metavar="AXES")]
    = None,
    mkdir: MkdirOption = False,
) -> None:
    """Check what an LLM is likely to write: the α-k-bounded DTMC of its generation, verified by Storm."""
    from ..llmcheck.errors import LLMCheckError
    from ..llmcheck.quantify import available_quantifications

    check_precision(precision)
    if export is not None:
        check_output(output or Path("llmcheck.prism"), inputs=[], mkdir=mkdir)
    check_positive_int(max_states, "--max-states")
    check_positive_int(max_calls, "--max-calls")
    if max_seconds is not None and not (math.isfinite(max_seconds) and max_seconds > 0):
        raise LLMCheckError(f"--max-seconds: expected a positive number of seconds, got {max_seconds:g}")
    if top < 0:
        raise LLMCheckError(f"--top: expected 0 or more texts, got {top}")

    for module in plugin or []:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise LLMCheckError(f"--plugin: cannot import {module!r}: {exc}") from exc
    if list_quantifications:
        for name, description in available_quantifications().items():
            sys.stdout.write(f"{name:22} {description}\n")
        return
    if model is None or prompt is None or property is None:
        missing = [flag for flag, v in (("--model", model), ("--prompt", prompt), ("--property", property))
                   if v is None]
        raise LLMCheckError(f"llmcheck needs {', '.join(missing)}")
    if more_sweep and not sweep:
        raise LLMCheckError(f"unexpected argument(s) {' '.join(more_sweep)}; sweep axes follow --sweep")
    from ..llmcheck.chain import Budget, ExploreSettings
    from ..llmcheck.dtmc.build import Scope
    from ..llmcheck.sources import open_source

    options: dict[str, Any] = {}
    if model.startswith("ngram:"):
        options = {"order": ngram_order, "smoothing": ngram_smoothing}
    elif model.startswith("openai:") and eos_token:
        options = {"eos_tokens": eos_token}
    source = open_source(model, **options)
    if batch_size is not None:
        if batch_size < 1:
            raise LLMCheckError(f"--batch-size must be at least 1, got {batch_size}")
        source.max_batch = batch_size
    budget = Budget(max_states, max_calls, max_seconds)
    common: dict[str, Any] = {"quantifications": quantify or [], "budget": budget, "scope": Scope(scope.value),
                              "method": method, "precision": precision}
    with source:
        if sweep:
            _run_sweep(source, prompt, property, parse_sweep(sweep + (more_sweep or [])), alpha, k, depth,
                       common, format)
            return
        from ..llmcheck.pipeline import check_llm

        report = check_llm(source, prompt, property, settings=ExploreSettings(alpha, k, depth), bounds=bounds,
                           **common)
    exported = None
    if export is ExportFormat.prism:
        from ..llmcheck.dtmc.build import prism_text

        exported = output or Path("llmcheck.prism")
        write_output(exported, prism_text(report.model, report.result.labeling))
    from ..llmcheck.report import print_json, render_report

    if format is Format.json:
        data = report.to_dict(top)
        data["export"] = None if exported is None else str(exported)
        print_json(data)
    else:
        render_report(report, top=top, exported=exported)


def _run_sweep(source: Any, prompt: str, property: str, grid: dict[str, list[float]], alpha: float, k: int,
               depth: int, common: dict[str, Any], format: Format) -> None:
    from ..llmcheck.pipeline import sweep as run_sweep
    from ..llmcheck.report import print_json, render_sweep

    rows = run_sweep(source, prompt, property, alphas=grid.get("alpha", [alpha]),
                     ks=[int(v) for v in grid.get("k", [k])], depths=[int(v) for v in grid.get("depth", [depth])],
                     **common)
    if format is Format.json:
        print_json({"property": property, "prompt": prompt, "source": source.name,
                    "points": [r.to_dict() for r in rows]})
    else:
        render_sweep(rows, property=property)


def register(app: typer.Typer) -> None:
    """Add the ``llmcheck`` command to the ``forewarn`` app."""
    app.command("llmcheck")(llmcheck)
