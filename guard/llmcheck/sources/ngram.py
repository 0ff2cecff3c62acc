"""A word n-gram model trained from a text file: the token source that needs no weights.

Tokens are words and punctuation marks, each with a leading space when one preceded it
in the text (``" player"``, ``","``), so decoding is joining and keeps the text's own
spacing (``rm -rf /`` stays ``rm -rf /``). Each non-empty line of the training text is one
sequence, started by ``<s>`` and ended by the end-of-sequence token ``</s>``. The next-word
distribution is the maximum-likelihood estimate of the longest context (the last
``order - 1`` tokens, shortened until it was seen in training), optionally interpolated
with the unigram distribution (``smoothing`` = its weight), so it always sums to 1.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..errors import SourceError
from .base import Candidate, Token, TokenDistribution, TokenSource

BOS = "<s>"
EOS = "</s>"
_WORD = re.compile(r"\s*(?:\w+(?:['’]\w+)*|[^\w\s])")


def tokenize_words(text: str) -> tuple[str, ...]:
    """Words and punctuation marks of ``text`` with their leading space, if any
    (``"Don't stop."`` → ``("Don't", " stop", ".")``); runs of whitespace become one space."""
    return tuple((" " + t.lstrip()) if t[:1].isspace() else t for t in _WORD.findall(text.strip()))


class NgramSource(TokenSource):
    """An n-gram language model over words.

    Args:
        sequences: training sequences, each a sequence of word tokens (no BOS/EOS).
        order: n, the length of the n-grams (2 = bigrams); at least 1.
        smoothing: weight of the unigram distribution mixed into every prediction, in [0, 1).
        name: shown in reports.
    """

    max_batch = 256

    def __init__(self, sequences: Iterable[Sequence[str]], *, order: int = 3, smoothing: float = 0.0,
                 name: str = "ngram") -> None:
        if order < 1:
            raise SourceError(f"n-gram order must be at least 1, got {order}")
        if not 0.0 <= smoothing < 1.0:
            raise SourceError(f"n-gram smoothing must lie in [0, 1), got {smoothing}")
        self.order = order
        self.smoothing = smoothing
        self.name = name
        self._counts: dict[tuple[str, ...], Counter[str]] = {}
        n_sequences = 0
        for words in sequences:
            if not words:
                continue
            n_sequences += 1
            padded = [BOS] * (order - 1) + list(words) + [EOS]
            for i in range(order - 1, len(padded)):
                word = padded[i]
                for width in range(order):  # every context length, so backing off is a look-up
                    context = tuple(padded[i - width:i])
                    self._counts.setdefault(context, Counter())[word] += 1
        if n_sequences == 0:
            raise SourceError("the n-gram training text has no words")
        self._unigram = self._normalize(self._counts[()])
        self._cache: dict[tuple[str, ...], tuple[Candidate, ...]] = {}

    @classmethod
    def from_text(cls, text: str, **options: object) -> NgramSource:
        """Train on a text: one sequence per non-empty line."""
        lines = (tokenize_words(line) for line in text.splitlines())
        return cls(lines, **options)  # type: ignore[arg-type]

    @classmethod
    def from_file(cls, path: str | Path, **options: object) -> NgramSource:
        """Train on a UTF-8 text file: one sequence per non-empty line."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise SourceError(f"cannot read the n-gram training file {str(path)!r}: {exc.strerror}") from exc
        except UnicodeDecodeError as exc:
            raise SourceError(f"the n-gram training file {str(path)!r} is not UTF-8 text (byte "
                              f"{exc.object[exc.start]:#04x} at offset {exc.start})") from exc
        options.setdefault("name", f"ngram:{path}")
        return cls.from_text(text, **options)

    @property
    def vocabulary(self) -> frozenset[str]:
        return frozenset(self._counts[()])

    @staticmethod
    def _normalize(counts: Counter[str]) -> dict[str, float]:
        total = sum(counts.values())
        return {w: c / total for w, c in counts.items()}

    def encode(self, text: str) -> tuple[Token, ...]:
        return tokenize_words(text)

    def decode(self, tokens: Sequence[Token]) -> str:
        return "".join(str(t) for t in tokens if t not in (BOS, EOS))

    def distribution(self, context: Sequence[str]) -> tuple[Candidate, ...]:
        """The whole next-token distribution after ``context`` (words), most probable first."""
        padded = ([BOS] * (self.order - 1) + [str(t) for t in context])[len(context):]
        key = tuple(padded[-(self.order - 1):]) if self.order > 1 else ()
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        for width in range(len(key), -1, -1):
            counts = self._counts.get(key[len(key) - width:])
            if counts:
                break
        probs = self._normalize(counts)  # type: ignore[arg-type]  # () is always present
        if self.smoothing:
            lam = self.smoothing
            probs = {w: (1 - lam) * probs.get(w, 0.0) + lam * p for w, p in self._unigram.items()}
        ranked = sorted(probs.items(), key=lambda wp: (-wp[1], wp[0]))
        result = tuple(Candidate(w, p, self.decode([w]), eos=w == EOS) for w, p in ranked if p > 0.0)
        self._cache[key] = result
        return result

    def next_tokens(self, sequences: Sequence[Sequence[Token]], top_k: int) -> list[TokenDistribution]:
        out = []
        for sequence in sequences:
            full = self.distribution([str(t) for t in sequence])
            # a tie at the top_k-th token runs to its end, plus the next lower token: the
            # explorer then sees where the tie ends without asking again
            m = min(top_k, len(full))
            if 0 < m < len(full) and full[m].prob == full[m - 1].prob:
                while m < len(full) and full[m].prob == full[m - 1].prob:
                    m += 1
                m = min(m + 1, len(full))
            out.append(TokenDistribution(full[:m], complete=len(full) <= m))
        return out
