"""An OpenAI-compatible completion endpoint as a token source (vLLM, llama.cpp server, hosted APIs).

Uses ``POST {base}/completions`` with ``max_tokens=1`` and ``logprobs=k``: the answer's
``top_logprobs`` are the next-token distribution. A batch of prefixes goes as one
request with a list of prompts (servers that refuse lists are asked one prompt at a time).
Token strings are joined to make texts; ``bytes:\\xNN`` tokens (partial UTF-8 characters)
are joined as bytes first.

It is also a *scorer* for the model agents (:meth:`OpenAISource.score`, as ``GGUFSource.score``): the
log-likelihood of each candidate continuation after a prompt. With ``method="logprobs"`` (the default)
each candidate goes as ``prompt + continuation`` with ``echo: true`` and ``logprobs``: the server
returns the log-probability of every token of the text it was sent, and the continuation's are summed
— the model's own likelihood, as in process. Endpoints that give no log-probabilities (most chat APIs)
can use ``method="sample"``, a weaker estimate: ``samples`` completions of the prompt at temperature 1
(seeded), and each candidate scored ``log((count + ½) / (samples + ½·k))`` by how many of them begin
with it (k candidates). It costs ``samples`` requests per step and sees only what the model writes
often; a candidate it never writes gets the same small score as every other one it never writes.
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
        method: how :meth:`score` scores candidates, ``logprobs`` or ``sample`` (the module's doc).
        samples: completions per step with ``method="sample"``.
        seed: the first sample's seed (the n-th is ``seed + n``; the server must honour ``seed``).
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, max_batch: int = 16,
                 eos_tokens: Iterable[str] | None = None, timeout: float = 60.0,
                 client: httpx.Client | None = None, method: str = "logprobs", samples: int = 20,
                 seed: int = 0) -> None:
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
        self.method = method
        self.samples = samples
        self.seed = seed
        self.evaluations = 0  # requests made by score(), for the time-per-step figures
        if method not in ("logprobs", "sample") or samples < 1:
            raise SourceError(f"method={method!r} must be 'logprobs' or 'sample', and samples={samples!r} at least 1")

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

    def reset(self) -> None:
        """Nothing to forget: every request carries its whole text."""

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}/completions"
        try:
            response = self._client.post(url, json={"model": self.model, **body})
        except httpx.HTTPError as exc:
            raise SourceError(f"cannot reach {url}: {exc}") from exc
        if response.status_code != 200:
            raise SourceError(f"{url} answered HTTP {response.status_code}: {response.text[:200]}",
                              status=response.status_code)
        self.evaluations += 1
        answer: dict[str, Any] = response.json()
        return answer

    def score(self, prompt: str, continuations: Sequence[str]) -> list[float]:
        """``log P(continuation | prompt)`` of each continuation (by ``method``; see the module's doc)."""
        if self.method == "sample":
            return self._sampled(prompt, continuations)
        return [self._echoed(prompt, text) for text in continuations]

    def _echoed(self, prompt: str, continuation: str) -> float:
        """The sum of the continuation's token log-probabilities, read from the echo of ``prompt + continuation``.

        The echo ends with the one token generated after the text; the continuation's tokens are the
        ones before it whose strings make up the continuation exactly (a token that straddles the
        prompt's end is an error: the endpoint tokenized the two together differently).
        """
        url = f"{self.base_url}/completions"
        answer = self._post({"prompt": prompt + continuation, "max_tokens": 1, "echo": True, "logprobs": 1,
                             "temperature": 0.0})
        try:
            choice = answer["choices"][0]
            tokens: list[str] = choice["logprobs"]["tokens"]
            values: list[float | None] = choice["logprobs"]["token_logprobs"]
            echoed: str = choice["text"]
        except (KeyError, IndexError, TypeError) as exc:
            raise SourceError(f"{url} did not echo the text's log-probabilities (is 'echo' with 'logprobs' "
                              f"supported?): {str(answer)[:200]}") from exc
        if not echoed.startswith(prompt + continuation):
            raise SourceError(f"{url} echoed a text that does not begin with the one sent")
        end, tail = len(tokens), echoed[len(prompt) + len(continuation):]
        while end > 0 and tail:  # the generated token(s) after the text
            end -= 1
            if not tail.endswith(tokens[end]):
                raise SourceError(f"{url} echoed tokens that do not make up the generated text {tail!r}")
            tail = tail[:len(tail) - len(tokens[end])]
        text, total = "", 0.0
        while len(text) < len(continuation) and end > 0:
            end -= 1
            text = tokens[end] + text
            value = values[end]
            if value is None:
                raise SourceError(f"{url} gave no log-probability for the token {tokens[end]!r}")
            total += value
        if text != continuation:
            raise SourceError(f"{url} tokenized {continuation!r} together with the prompt's end ({text!r}); "
                              "score a continuation that starts a new token (e.g. with a space)")
        return total

    def _sampled(self, prompt: str, continuations: Sequence[str]) -> list[float]:
        counts = [0] * len(continuations)
        wanted = [c.strip() for c in continuations]
        for n in range(self.samples):
            answer = self._post({"prompt": prompt, "max_tokens": 64, "temperature": 1.0, "seed": self.seed + n,
                                 "stop": ["\n"]})
            try:
                written = str(answer["choices"][0]["text"]).strip()
            except (KeyError, IndexError, TypeError) as exc:
                raise SourceError(f"{self.base_url}/completions returned no text: {str(answer)[:200]}") from exc
            for i, candidate in enumerate(wanted):
                if written == candidate:
                    counts[i] += 1
                    break
        k = len(continuations)
        return [math.log((c + 0.5) / (self.samples + 0.5 * k)) for c in counts]

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
