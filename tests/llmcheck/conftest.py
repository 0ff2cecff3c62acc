from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # never reach a hub: every model here is built locally
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _llm_support import CORPUS, HAVE_HF, build_tiny_model, openai_app


@pytest.fixture(scope="session")
def corpus_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(CORPUS, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_model() -> tuple[Any, Any]:
    if not HAVE_HF:
        pytest.skip("the hf extra (torch, transformers) is not installed")
    import torch

    torch.set_num_threads(2)
    return build_tiny_model()


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_model: tuple[Any, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    model, tokenizer = tiny_model
    path = tmp_path_factory.mktemp("tiny-gpt2")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def hf_source(tiny_model: tuple[Any, Any]) -> Any:
    from forewarn.guard.llmcheck.sources.hf import HFSource

    model, tokenizer = tiny_model
    return HFSource(model, tokenizer, max_batch=16)


@pytest.fixture(scope="session")
def openai_url(hf_source: Any) -> Iterator[str]:
    """A real uvicorn server on 127.0.0.1 serving the tiny model's log-probabilities."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(openai_app(hf_source), host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test OpenAI-compatible server did not start")
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=10)
