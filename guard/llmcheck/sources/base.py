"""The token-source protocol: what the explorer needs from a language model.

A source works on *token sequences*: ``encode`` turns the start text into tokens,
``decode`` turns prompt + generated tokens back into text (the whole sequence at once,
so sub-word pieces and multi-byte characters come out right), and ``next_tokens``
gives, for a batch of sequences, the most probable next tokens with their probabilities.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

Token = Hashable
"""A token as a source names it: an ``int`` id (Hugging Face) or a ``str`` piece (n-gram, OpenAI)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One possible next token.

    Attributes:
        token: the source's token (id or piece).
        prob: its probability under the model, given the sequence so far.
        piece: the token's own text, for display only (states are decoded whole).
        eos: whether the token ends the text (end of sequence).
    """

    token: Token
    prob: float
    piece: str
    eos: bool = False


@dataclass(frozen=True, slots=True)
class TokenDistribution:
    """The top of a next-token distribution, most probable first.

    ``candidates`` holds at least the requested ``top_k`` tokens when the model has that
    many with non-zero probability (fewer otherwise). ``complete`` is true when they are
    the model's whole support, so nothing is missing beyond them.
    """

    candidates: tuple[Candidate, ...]
    complete: bool = False


class TokenSource(ABC):
    """A language model seen as next-token distributions.

    Subclasses set ``name`` (shown in reports) and ``max_batch`` (how many sequences one
    model call may carry).
    """

    name: str = "source"
    max_batch: int = 16

    @abstractmethod
    def encode(self, text: str) -> tuple[Token, ...]:
        """The tokens of a start text."""

    @abstractmethod
    def decode(self, tokens: Sequence[Token]) -> str:
        """The text of a whole token sequence (prompt and generated tokens together)."""

    @abstractmethod
    def next_tokens(self, sequences: Sequence[Sequence[Token]], top_k: int) -> list[TokenDistribution]:
        """One model call: the top-``top_k`` next tokens after each sequence.

        Args:
            sequences: at most ``max_batch`` token sequences.
            top_k: how many of the most probable tokens to return, at least.

        Returns:
            one distribution per sequence, in order.
        """

    def close(self) -> None:  # noqa: B027 - optional hook, most sources hold nothing
        """Release what the source holds (HTTP clients, ...)."""

    def __enter__(self) -> TokenSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
