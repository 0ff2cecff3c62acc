"""LLM-output checking (LLMCHECKER): the α-k-bounded DTMC of an LLM's text generation,
verified with PCTL through Storm.

Parts: a token source (:mod:`~guard.llmcheck.sources`), the bounded explorer
(:func:`explore`), quantifications (:mod:`~guard.llmcheck.quantify`), the check
(:func:`check_explored`, or everything at once with :func:`check_llm`), sweeps, and a
guard (:class:`LLMCheckGuard`). ``transformers`` is imported only by the Hugging Face source.
"""
from __future__ import annotations

from .chain import Budget, ExploredModel, ExploreSettings, ExploreStats, State, StateKind
from .dtmc import CheckResult, Scope, check_explored, prism_text
from .errors import LLMCheckError, QuantificationError, QueryError, SourceError
from .explore import DistributionCache, explore, top_alpha_k
from .guard import LLMCheckGuard
from .pipeline import LLMCheckReport, Outcome, SweepRow, check_llm, sweep
from .quantify import (
    Quantification,
    available_quantifications,
    make_quantification,
    register_quantification,
)
from .query import Query, parse_query
from .sources import Candidate, NgramSource, TokenDistribution, TokenSource, open_source

__all__ = [
    "TokenSource", "Candidate", "TokenDistribution", "NgramSource", "open_source",
    "ExploreSettings", "Budget", "DistributionCache", "explore", "top_alpha_k", "ExploredModel", "ExploreStats", "State",
    "StateKind",
    "Quantification", "make_quantification", "register_quantification", "available_quantifications",
    "Query", "parse_query", "Scope", "CheckResult", "check_explored", "prism_text",
    "check_llm", "LLMCheckReport", "Outcome", "sweep", "SweepRow",
    "LLMCheckGuard",
    "LLMCheckError", "SourceError", "QueryError", "QuantificationError",
]
