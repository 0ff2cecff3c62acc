"""The tool-using agent domain: agents with shell, file, HTTP, e-mail and payment tools.

Typical use::

    from forewarn.domains.tools import SPEC_PATH, generate_traces
    from forewarn.guard import learn_model, load_spec

    generate_traces(400, seed=0, path="tool-runs.jsonl")
    model = learn_model(["tool-runs.jsonl"], load_spec(SPEC_PATH))

The hazards: a secret read and then data sent out (exfiltration), a destructive shell
command, a payment above the limit the user did not confirm, and a message to an
external recipient the user never named. :class:`ToolStateExtractor` turns what an
agent did into the state the spec reads; :func:`generate_traces` writes runs whose
states are exactly what it makes of them.

The extractor and the tool kinds are the LangChain integration's (its default state
extractor, ``forewarn.guard.langchain.extractor``; an integration never imports a
domain), re-exported here with the spec written against them.
"""
from __future__ import annotations

from ...guard.toolcalls.extractor import ToolStateExtractor, initial_state, violations
from ...guard.toolcalls.kinds import DEFAULT_INTERNAL_DOMAINS, DEFAULT_TOOL_KINDS, ToolKind
from ...guard.toolcalls.transcript import CallStatus, ExtractionError, ToolStep, Transcript
from .generator import generate_runs, generate_traces, simulate
from .spec import SPEC_PATH, load_tool_spec
from .tasks import FAMILIES, Plan, family_names

__all__ = [
    "CallStatus",
    "DEFAULT_INTERNAL_DOMAINS",
    "DEFAULT_TOOL_KINDS",
    "ExtractionError",
    "FAMILIES",
    "Plan",
    "SPEC_PATH",
    "ToolKind",
    "ToolStateExtractor",
    "ToolStep",
    "Transcript",
    "family_names",
    "generate_runs",
    "generate_traces",
    "initial_state",
    "load_tool_spec",
    "simulate",
    "violations",
]
