"""Options and their parsers that ``replay``, ``evaluate``, ``ingest`` and ``tune`` share: thresholds,
enforcement, trigger, input format and extractor, output format and report paths."""
from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Literal

import typer

from ...errors import ForewarnError, InputError
from ..ingest import LogFormat, format_names, formats, get_format
from ..replay import Enforcement
from ..spec import Trigger
from ._options import Format, OnError

# Options that replay and evaluate share.
ThetaOption = Annotated[str, typer.Option(help="Comma-separated thresholds on p_safe.")]
FormatOption = Annotated[Format, typer.Option("--format")]
ReportOption = Annotated[Path | None, typer.Option("--report", help="Write a self-contained HTML report.")]
PlotsOption = Annotated[Path | None, typer.Option("--plots", help="Write the report's figures as PNG here.")]
RunOption = Annotated[str | None, typer.Option("--run", help="Run id to draw in the risk-over-time figure.")]


def parse_input_format(text: str) -> str:
    """``--input-format``: ``auto`` or a registered format's name (read from the registry when the command runs,
    so a format registered by then is accepted); anything else is a one-line usage error listing them."""
    if text == "auto":
        return text
    try:
        return get_format(text).name
    except ForewarnError:
        raise typer.BadParameter(f"unknown format {text!r}; expected one of {', '.join(format_names())}") from None


def input_format_help() -> str:
    """``--input-format``'s help, from the registry: each format with what it reads, and the defaults it sets."""
    def one(fmt: LogFormat) -> str:
        d = fmt.defaults
        own = [f"--extractor {d.extractor}"] if d.extractor else []
        own += [f"--on-mismatch {d.on_mismatch}"] if d.on_mismatch != "error" else []
        own += [f"--on-error {d.on_error}"] if d.on_error != "stop" else []
        return f"{fmt.name} ({fmt.describe}{'; by default ' + ', '.join(own) if own else ''})"

    return ("Format of the input files: auto (per file, from its first records; says what it tried when none "
            "fits), " + ", ".join(one(f) for f in formats()) + ".")


InputFormatOption = Annotated[str, typer.Option("--input-format", parser=parse_input_format, metavar="FORMAT",
                                                help=input_format_help())]
def _extractor_help() -> str:
    agents = ", ".join(f.name for f in formats() if f.agent)
    household = ", ".join(f.name for f in formats() if f.defaults.extractor == "household")
    return (f"Agent logs ({agents}): the state extractor the guard uses, 'tools' (default), 'household' "
            + (f"({household}'s default) " if household else "") + "or MODULE:NAME.")


ExtractorOption = Annotated[str | None, typer.Option("--extractor", help=_extractor_help())]
class Mismatch(str, Enum):
    """``--on-mismatch``: a logged success the world forbids is an error, or the simulator's verdict wins."""
    error = "error"
    simulator = "simulator"


OnMismatchOption = Annotated[Mismatch | None, typer.Option(
    "--on-mismatch", help="Action logs (actions, --extractor household): a logged success the symbolic household forbids is an "
         "error, or the simulator wins and each rewrite is counted (default: error; agentspec: simulator).")]


def error_policy(value: OnError | None) -> Literal["skip", "stop"] | None:
    """``--on-error`` for the readers: None (unset) lets each file's input format choose."""
    return None if value is None else ("skip" if value is OnError.skip else "stop")


def mismatch_policy(value: Mismatch | None) -> Literal["error", "simulator"] | None:
    """``--on-mismatch`` for the readers: None (unset) lets each file's input format choose."""
    return None if value is None else ("simulator" if value is Mismatch.simulator else "error")


OnErrorOption = Annotated[OnError | None, typer.Option(
    "--on-error", help="A malformed run stops the command, or is skipped and counted in a summary on stderr "
                       "(default: stop; agentspec: skip).")]
DiscoverOption = Annotated[bool | None, typer.Option(
    "--discover/--no-discover", help="Discover predicates and action memory in each fold's training runs and learn "
                                     "that fold with them (never from its held-out runs; default: the spec's "
                                     "`discover: auto|off`); a fold whose runs cannot tell keeps the spec, said in a "
                                     "note.")]
BundleByOption = Annotated[str | None, typer.Option(
    "--bundle-by", help="Learn each fold's model as a bundle grouped by this metadata key (e.g. meta.task), "
                        "as `learn --group-by` does.")]
MinGroupRunsOption = Annotated[int, typer.Option(
    "--min-group-runs", help="With --bundle-by: runs a group needs in a fold for a model of its own.")]


def check_on_error(on_error: OnError | None, engine: object = None) -> None:
    """``--on-error skip`` is read by this process's readers; Spark's replay stops at a malformed run."""
    if on_error is OnError.skip and getattr(engine, "value", "local") == "spark":
        raise InputError("--on-error skip applies to --engine local; Spark's replay stops at a malformed run")


EnforcementOption = Annotated[str, typer.Option(
    "--enforcement", help="lookahead: a decision is taken before a step runs, so an alarm on the violating step "
                          "prevents it (the middleware, the sidecar's preview); observe: after (an alarm must "
                          "come strictly before).")]


TriggerOption = Annotated[str | None, typer.Option(
    "--trigger", help="Score alarms as this trigger acts: level (p_safe < θ) or increase (and the step raises the "
                      "run's risk by more than the spec's min_increase). Default: the spec's guard.trigger, else "
                      "level; the LangChain middleware uses increase when the spec sets none.")]


def parse_trigger(text: str | None) -> Trigger | None:
    """``level`` or ``increase`` (None: as the spec says); anything else is a one-line error."""
    if text is None:
        return None
    try:
        return Trigger(text.strip().lower())
    except ValueError:
        raise InputError(f"--trigger: expected 'level' or 'increase', got {text!r}") from None


def parse_enforcement(text: str) -> Enforcement:
    """``lookahead`` or ``observe``; anything else is a one-line error."""
    try:
        return Enforcement(text.strip().lower())
    except ValueError:
        raise InputError(f"--enforcement: expected 'lookahead' or 'observe', got {text!r}") from None


def parse_thetas(text: str) -> list[float]:
    """``"0.1,0.5"`` → ``[0.1, 0.5]``; every threshold must lie in [0, 1], and none be empty."""
    items = text.split(",")
    if any(not x.strip() for x in items):
        raise InputError(f"--theta: an empty threshold in {text!r}; expected comma-separated numbers "
                            "such as 0.1,0.5")
    try:
        thetas = [float(x) for x in items]
    except ValueError as exc:
        raise InputError(f"--theta: expected comma-separated numbers, got {text!r}") from exc
    if any(not 0.0 <= t <= 1.0 for t in thetas):  # NaN fails this too
        raise InputError(f"--theta: thresholds must lie in [0, 1], got {text!r}")
    return thetas
