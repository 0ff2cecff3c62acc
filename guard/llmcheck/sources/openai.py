"""An OpenAI-compatible completion endpoint as a token source (vLLM, llama.cpp server, hosted APIs).

Uses ``POST {base}/completions`` with ``max_tokens=1`` and ``logprobs=k``: the answer's
``top_logprobs`` are the next-token distribution. A batch of prefixes goes as one
request with a list of prompts (servers that refuse lists are asked one prompt at a time).
Token strings are joined to make texts; ``bytes:\\xNN`` tokens (partial UTF-8 characters)
are joined as bytes first.
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Sequence
from typing import Any

from ..._extras import extra_error

try:
    import httpx
except ModuleNotFoundError as exc:
    raise extra_error("llmcheck", "the openai token source", exc) from None

from ..errors import SourceError
from .base import Candidate, Token, TokenDistribution, TokenSource

DEFAULT_EOS_TOKENS = frozenset({"<|endoftext|>", "</s>", "<|eot_id|>", "<|im_end|>", "<eos>", "<|end|>",
                                "<end_of_turn>"})
_BYTES = re.compile(r"\\x([0-9a-fA-F]{2})")


class OpenAISource(TokenSource):
    """Next-token log-probabilities from ``{base_url}/completions``.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the model name the server expects.
        api_key: sent as a bearer token; default: the ``OPENAI_API_KEY`` environment variable.
        max_batch: prompts per request.
        eos_tokens: token strings that end the text.
        timeout: seconds per request.
        client: an ``httpx.Client`` to use instead of a new one.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, max_batch: int = 16,
                 eos_tokens: Iterable[str] | None = None, timeout: float = 60.0,
                 client: httpx.Client | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.max_batch = max_batch
        self.name = f"openai:{self.base_url}#{model}"
        self.eos_tokens = frozenset(eos_tokens) if eos_tokens is not None else DEFAULT_EOS_TOKENS
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._own_client = client is None
        self._client = client or httpx.Client(timeout=timeout, headers=headers)
        self._lists = True  # whether the server takes a list of prompts

    @classmethod
    def from_spec(cls, spec: str, **options: Any) -> OpenAISource:
        """From ``URL#MODEL`` (the part after ``openai:``)."""
        url, sep, model = spec.rpartition("#")
        if not sep or not url or not model:
            raise SourceError(f"expected 'openai:URL#MODEL', e.g. 'openai:http://127.0.0.1:8000/v1#my-model', "
                              f"got 'openai:{spec}'")
        return cls(url, model, **options)

    def close(self) -> None:
        if self._own_client:
            self._client.close()

    def encode(self, text: str) -> tuple[Token, ...]:
        return (text,)  # the server tokenizes; the start text is one opaque piece here

    def decode(self, tokens: Sequence[Token]) -> str:
        return _join(tokens)

    def next_tokens(self, sequences: Sequence[Sequence[Token]], top_k: int) -> list[TokenDistribution]:
        prompts = [_join(s) for s in sequences]
        if self._lists and len(prompts) > 1:
            try:
                return self._request(prompts, top_k)
            except SourceError as exc:
                if exc.status not in (400, 422):
                    raise
                self._lists = False
        out: list[TokenDistribution] = []
        for prompt in prompts:
            out.extend(self._request([prompt], top_k))
        return out

    def _request(self, prompts: list[str], top_k: int) -> list[TokenDistribution]:
        body = {"model": self.model, "prompt": prompts if len(prompts) > 1 else prompts[0], "max_tokens": 1,
                "logprobs": top_k, "temperature": 1.0, "echo": False, "n": 1}
        url = f"{self.base_url}/completions"
        try:
            response = self._client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise SourceError(f"cannot reach {url}: {exc}") from exc
        if response.status_code != 200:
            raise SourceError(f"{url} answered HTTP {response.status_code}: {response.text[:200]}",
                              status=response.status_code)
        try:
            choices = sorted(response.json()["choices"], key=lambda c: c.get("index", 0))
            out = [self._distribution(choice["logprobs"]["top_logprobs"][0]) for choice in choices]
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise SourceError(f"{url} did not return top log-probabilities (is 'logprobs' supported?): "
                              f"{response.text[:200]}") from exc
        if len(out) != len(prompts):
            raise SourceError(f"{url} returned {len(out)} choices for {len(prompts)} prompts")
        return out

    def _distribution(self, top: dict[str, float]) -> TokenDistribution:
        ranked = sorted(top.items(), key=lambda kv: -kv[1])
        candidates = tuple(Candidate(token, math.exp(lp), _join([token]), eos=token in self.eos_tokens)
                           for token, lp in ranked if lp is not None and math.isfinite(lp))
        return TokenDistribution(candidates)


def _join(tokens: Sequence[Token]) -> str:
    """Concatenate token strings; ``bytes:\\xNN...`` tokens contribute raw bytes."""
    if not any(isinstance(t, str) and t.startswith("bytes:") for t in tokens):
        return "".join(str(t) for t in tokens)
    data = bytearray()
    for token in tokens:
        text = str(token)
        if text.startswith("bytes:"):
            data.extend(bytes(int(h, 16) for h in _BYTES.findall(text)))
        else:
            data.extend(text.encode("utf-8"))
    return data.decode("utf-8", errors="replace")
