"""Errors of the tool-using agent domain: the extractor's error is the integration's
(:class:`guard.langchain.transcript.ExtractionError`), re-exported under its old name."""
from __future__ import annotations

from forewarn.guard.langchain.transcript import ExtractionError

__all__ = ["ExtractionError"]
