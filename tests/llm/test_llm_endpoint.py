"""The model behind an OpenAI-compatible endpoint: llama-cpp-python's own server on 127.0.0.1, serving the llm
extra's GGUF, scores candidates as the in-process source computes them, and gives llmcheck the same next tokens."""
from __future__ import annotations

import math
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from _support import CLI

pytest.importorskip("llama_cpp")
pytest.importorskip("sse_starlette")
pytest.importorskip("starlette_context")
pytest.importorskip("pydantic_settings")

# one pass over prompt and continuation in both (the server with flash attention, as GGUFSource's context):
# the floats differ only by the server's float32 log-softmax against GGUFSource's float64
TOLERANCE = 2e-3
PROMPTS = ["Step 1: find Fork\nStep 2:", "Task: Pay the invoice.\nCall 1:"]
CONTINUATIONS = [" pick Fork\n", " done\n"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def endpoint(gguf: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = _free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("_openai_server.py")), "--model", str(gguf.path),
             "--host", "127.0.0.1", "--port", str(port), "--logits_all", "true", "--flash_attn", "true",
             "--n_threads", "2", "--n_ctx", "512", "--verbose", "false"], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, log.read_text(errors="replace")[-2000:]
            try:
                if httpx.get(f"{url}/models", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the llama.cpp server did not start"
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def _direct(gguf: Any, prompt: str, continuation: str) -> float:
    base = gguf.tokens_of(prompt, bos=True)
    return float(math.fsum(gguf.sequence_log_probs(base + gguf.tokens_of(continuation), len(base))))


def test_the_endpoint_scores_candidates_as_the_in_process_model_does(gguf: Any, endpoint: str) -> None:
    from forewarn.guard.llmcheck.sources.openai import OpenAISource

    source = OpenAISource(endpoint, "gemma", timeout=600)
    with source:
        for prompt in PROMPTS:
            scored = source.score(prompt, CONTINUATIONS)
            for continuation, value in zip(CONTINUATIONS, scored):
                assert value < 0 and value == pytest.approx(_direct(gguf, prompt, continuation), abs=TOLERANCE)
        # the same question as an llmcheck source: the next-token distribution
        gguf.reset()
        local = gguf.next_tokens([gguf.encode(PROMPTS[0])], 5)[0]
        remote = source.next_tokens([source.encode(PROMPTS[0])], 5)[0]
        probability = {c.piece: c.prob for c in remote.candidates}
        for candidate in local.candidates:
            assert math.log(probability[candidate.piece]) == pytest.approx(math.log(candidate.prob), abs=TOLERANCE)


def test_sampling_scores_are_smoothed_frequencies_and_repeat_under_a_seed(endpoint: str) -> None:
    from forewarn.guard.llmcheck.sources.openai import OpenAISource

    source = OpenAISource(endpoint, "gemma", method="sample", samples=4, seed=3, timeout=600)
    with source:
        first = source.score(PROMPTS[0], CONTINUATIONS)
        assert source.score(PROMPTS[0], CONTINUATIONS) == first
    counts = [math.exp(v) * (4 + 0.5 * len(CONTINUATIONS)) - 0.5 for v in first]
    assert all(c == pytest.approx(round(c), abs=1e-9) and c >= -1e-9 for c in counts)
    assert sum(round(c) for c in counts) <= 4


def test_demo_with_an_endpoint_that_does_not_answer_is_one_line_and_exit_2(forewarn_here: CLI,
                                                                         tmp_path: Path) -> None:
    done = forewarn_here("demo", "--agent", "llm", "--model", f"openai:http://127.0.0.1:{_free_port()}/v1#none",
                         "--tasks", "1", "--runs", "1", "--episodes", "1", "--out", tmp_path / "demo")
    assert done.returncode == 2 and "cannot reach" in done.stderr and len(done.stderr.strip().splitlines()) == 1
