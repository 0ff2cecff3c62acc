"""Token sources: one protocol, several adapters (n-gram, GGUF, Hugging Face, OpenAI-compatible).

``open_source("ngram:corpus.txt")``, ``open_source("gguf:model.gguf")`` (``gguf:package``: the model
the ``llm`` extra installs), ``open_source("openai:http://127.0.0.1:8000/v1#model")``, or any other
string: a local Hugging Face model directory or name.
"""
from __future__ import annotations

from typing import Any

from .base import Candidate, Token, TokenDistribution, TokenSource
from .ngram import NgramSource

__all__ = ["Candidate", "Token", "TokenDistribution", "TokenSource", "NgramSource", "open_source"]


def open_source(spec: str, **options: Any) -> TokenSource:
    """A token source from ``ngram:FILE``, ``gguf:FILE``, ``gguf:package``, ``openai:URL#MODEL`` or a
    Hugging Face path or name.

    Args:
        spec: the source, as ``forewarn llmcheck --model`` takes it.
        options: passed to the adapter (``order``/``smoothing`` for n-gram, ``eos_tokens``,
            ``max_batch``, ``api_key`` for OpenAI, ``max_batch``/``device`` for Hugging Face,
            ``n_ctx``/``n_threads``/``max_candidates`` for GGUF).
    """
    if spec.startswith("ngram:"):
        return NgramSource.from_file(spec[len("ngram:"):], **options)
    if spec.startswith("gguf:"):
        from .gguf import GGUFSource

        return GGUFSource(spec[len("gguf:"):], **options)
    if spec.startswith("openai:"):
        from .openai import OpenAISource

        return OpenAISource.from_spec(spec[len("openai:"):], **options)
    from .hf import HFSource

    return HFSource(path=spec.removeprefix("hf:"), **options)
