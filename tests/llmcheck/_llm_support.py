"""Support for the llmcheck tests: a scripted token source, a brute-force checker that
enumerates every path of the α-k-bounded tree independently of the explorer, a tiny
GPT-2-style model with a word-level tokenizer built and trained locally, and an
OpenAI-compatible HTTP app that serves that model's log-probabilities.
"""
from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import pytest

from forewarn.guard.llmcheck.sources.base import Candidate, Token, TokenDistribution, TokenSource

# find_spec, not import: importing transformers takes seconds, and only the hf tests need it
HAVE_HF = all(importlib.util.find_spec(name) is not None for name in ("torch", "transformers"))
needs_hf = pytest.mark.skipif(not HAVE_HF, reason="the hf extra (torch, transformers) is not installed")

CORPUS = """\
the player won the game and he was happy .
the player lost the game and she was sad .
the player scored a goal and the crowd cheered .
the player said the game was fun .
the coach said the player was great .
the game was long and the player was tired .
she said the coach was right .
he said the crowd was loud .
the agent will run rm -rf / now .
the agent will list the files .
the agent will read the files and stop .
"""


# "there" is reached by three token paths: th+ere, the+re and t+here; "the" also directly
TABLE: dict[str, list[tuple[str | None, float]]] = {
    "": [("th", 0.4), ("the", 0.3), ("t", 0.2), ("a", 0.1)],
    "th": [("ere", 0.5), ("e", 0.3), ("is", 0.2)],
    "the": [("re", 0.6), (" cat", 0.3), (None, 0.1)],
    "t": [("here", 0.9), ("o", 0.1)],
    "there": [(" he", 0.5), (" she", 0.25), (" it", 0.25)],
    "a": [(" cat", 1.0)],
    "this": [(None, 1.0)],
    "the cat": [(" sat", 0.7), (" ran", 0.3)],
    "a cat": [(" sat", 1.0)],
}


class TableSource(TokenSource):
    """A scripted model: the continuation text → ``[(piece, probability), ...]``; ``None`` piece = end.

    Distributions depend on the text only, so merging identical texts changes nothing and
    brute force over token paths must equal the merged chain.
    """

    name = "table"

    def __init__(self, table: Mapping[str, Sequence[tuple[str | None, float]]], *, max_batch: int = 4) -> None:
        self.table = table
        self.max_batch = max_batch
        self.calls: list[int] = []  # batch sizes, one entry per model call

    def encode(self, text: str) -> tuple[Token, ...]:
        return (text,) if text else ()

    def decode(self, tokens: Sequence[Token]) -> str:
        return "".join(str(t) for t in tokens if t is not None)

    def next_tokens(self, sequences: Sequence[Sequence[Token]], top_k: int) -> list[TokenDistribution]:
        self.calls.append(len(sequences))
        out = []
        for sequence in sequences:
            rows = self.table.get(self.decode(sequence), [])
            ranked = sorted(rows, key=lambda r: -r[1])
            out.append(TokenDistribution(
                tuple(Candidate(piece, p, piece or "", eos=piece is None) for piece, p in ranked[:top_k]),
                complete=len(ranked) <= top_k))
        return out


def brute_force(source: TokenSource, prompt: str, alpha: float, k: int, depth: int,
                holds: Callable[[str], bool]) -> tuple[Fraction, Fraction, Fraction]:
    """Enumerate every token path: (P[F holds] with unexplored mass not satisfying, with it
    satisfying, the unexplored mass), exactly. ``holds`` reads the generated text."""
    prompt_tokens = tuple(source.encode(prompt))
    prompt_text = source.decode(prompt_tokens)
    value = upper = unexplored = Fraction(0)
    stack: list[tuple[tuple[Token, ...], Fraction, bool, int]] = [((), Fraction(1), False, 0)]
    while stack:
        tokens, mass, seen, d = stack.pop()
        text = source.decode(prompt_tokens + tokens)[len(prompt_text):]
        seen = seen or holds(text)
        if d == depth:
            value += mass if seen else 0
            upper += mass if seen else 0
            continue
        dist = source.next_tokens([prompt_tokens + tokens], 10**6)[0]  # the whole distribution
        # TOP_alpha^k, written again: best first, until alpha (exactly) or k, ties with the last kept kept too
        kept: list[Candidate] = []
        total = Fraction(0)
        for c in sorted((c for c in dist.candidates if c.prob > 0), key=lambda c: -c.prob):
            if kept and (len(kept) >= k or total >= Fraction(alpha)) and c.prob < kept[-1].prob:
                break
            kept.append(c)
            total += Fraction(c.prob)
        kept_mass = sum((Fraction(c.prob) for c in kept), Fraction(0))
        scale = kept_mass if (kept and dist.complete and len(kept) == len(dist.candidates)) else Fraction(1)
        for c in kept:
            p = mass * Fraction(c.prob) / scale
            if c.eos:
                value += p if seen else 0
                upper += p if seen else 0
            else:
                stack.append((tokens + (c.token,), p, seen, d + 1))
        rest = mass * (1 - kept_mass / scale)
        unexplored += rest
        upper += rest  # unexplored: satisfied if already seen, else maybe
        if seen:
            value += rest
    return value, upper, unexplored


def build_tiny_model(seed: int = 0, steps: int = 60) -> tuple[Any, Any]:
    """A 2-layer, 32-dim GPT-2 with a word-level tokenizer over :data:`CORPUS`, trained a little."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    words = sorted(set(CORPUS.split()))
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[EOS]", *words])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers leaves it untyped
        tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]")
    torch.manual_seed(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small trains faster on one thread, and other jobs share the CPU
    config = GPT2Config(vocab_size=len(vocab), n_positions=32, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=2, eos_token_id=2, pad_token_id=0)
    model = GPT2LMHeadModel(config)
    lines = [tokenizer.encode(line, add_special_tokens=False) + [2] for line in CORPUS.splitlines()]
    width = max(len(line) for line in lines)
    ids = torch.tensor([line + [0] * (width - len(line)) for line in lines])
    labels = ids.masked_fill(ids == 0, -100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-2)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        loss = model(input_ids=ids, attention_mask=(ids != 0).long(), labels=labels).loss
        loss.backward()
        optimizer.step()
    torch.set_num_threads(threads)
    model.eval()  # type: ignore[no-untyped-call]  # transformers leaves it untyped
    return model, tokenizer


def openai_app(source: Any, *, eos_text: str = "[EOS]") -> Any:
    """A FastAPI app with ``POST /v1/completions`` answering ``max_tokens=1`` with ``top_logprobs``."""
    from fastapi import FastAPI, HTTPException

    app = FastAPI()

    @app.post("/v1/completions")
    def completions(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("max_tokens") != 1 or not isinstance(body.get("logprobs"), int):
            raise HTTPException(400, "this test server answers max_tokens=1 with logprobs=k only")
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        sequences = [source.encode(p) for p in prompts]
        dists = source.next_tokens(sequences, body["logprobs"])
        choices = []
        for index, (sequence, dist) in enumerate(zip(sequences, dists)):
            base = source.decode(sequence)
            top: dict[str, float] = {}
            for c in dist.candidates:
                piece = eos_text if c.eos else source.decode(list(sequence) + [c.token])[len(base):]
                top[piece] = math.log(c.prob)
            first = next(iter(top))
            choices.append({"index": index, "text": first, "finish_reason": "length",
                            "logprobs": {"tokens": [first], "token_logprobs": [top[first]],
                                         "top_logprobs": [top], "text_offset": [len(base)]}})
        return {"id": "cmpl-test", "object": "text_completion", "model": body["model"], "choices": choices}

    return app
