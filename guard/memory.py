"""A little history in the learned state: a deterministic memory automaton over the abstract run.

Like a monitor (monitors/base.py), the memory reads one abstract state per step and is
deterministic, so learning (over recorded runs) and a session (step by step) reach the
same memory state. Its state is one integer packing

* the current abstract state and how many steps it has held (capped at ``dwell``), and
* the last *different* abstract state (with ``previous``);

and the chain sees only a coarse **label** of it: the dwell count in log-spaced buckets
(1, 2–3, 4–7, 8–15, … up to the cap) and the previous abstract state. A chain state is
the abstract state with its label in the bits above the predicates
(``bits | label << width``), so the model file, the product with monitors and the
decision cache keep working on plain integers; words shown to users read the predicate
bits only. Chains over these states are smoothed towards the memoryless chain's rows
(:mod:`guard.backoff`), so a history seen rarely borrows the data of its abstract state.
"""
from __future__ import annotations

from collections.abc import Iterable

from .spec import MemorySettings

__all__ = ["Memory", "build_memory"]

_COUNT_BITS = 12  # dwell counts up to 4095 (the spec's bound)


class Memory:
    """The memory automaton for a spec's ``learning.memory`` over ``width`` predicates."""

    def __init__(self, width: int, *, dwell: int | None = None, previous: bool = False) -> None:
        self.width = width
        self.cap = dwell or 1
        self.previous = previous
        self.buckets = self.cap.bit_length()  # bucket of a count c ≥ 1: c.bit_length() − 1
        self._bits_mask = (1 << (width + 1)) - 1
        self._prev_shift = _COUNT_BITS + width + 1
        self.initial = 0  # nothing read yet

    def step(self, state: int, bits: int) -> int:
        """The memory after reading abstract state ``bits``."""
        count = state & 0xFFF
        current = ((state >> _COUNT_BITS) & self._bits_mask) - 1
        if current == bits:
            return state if count >= self.cap else state + 1
        prev = current if self.previous else -1
        return 1 | (bits + 1) << _COUNT_BITS | (prev + 1) << self._prev_shift

    def label(self, state: int) -> int:
        """What the chain sees of a memory state: dwell bucket, then previous state + 1."""
        bucket = (state & 0xFFF).bit_length() - 1
        if not self.previous:
            return max(bucket, 0)
        return max(bucket, 0) + self.buckets * (state >> self._prev_shift)

    def encode(self, bits: int, state: int) -> int:
        """The chain state: predicate bits with the memory label above them."""
        return bits | self.label(state) << self.width

    def state_for(self, bits: int, label: int) -> int:
        """A memory state reading predicate ``bits`` whose :meth:`label` is ``label`` (its inverse,
        to decide for a chain state that no run has just reached, e.g. when listing states)."""
        bucket, prev = (label % self.buckets, label // self.buckets) if self.previous else (label, 0)
        return (1 << bucket) | (bits + 1) << _COUNT_BITS | prev << self._prev_shift

    def encode_run(self, abstract: Iterable[int]) -> list[int]:
        """Chain states of a whole abstract run (as a session would reach them)."""
        out = []
        state = self.initial
        for bits in abstract:
            state = self.step(state, bits)
            out.append(bits | self.label(state) << self.width)
        return out

    def successor_labels(self, label: int, src: int, dst: int) -> list[int]:
        """Labels a chain state with ``label`` over ``src`` can move to when the predicates become ``dst``."""
        bucket = label % self.buckets
        if dst == src:
            return [label] + ([label + 1] if bucket + 1 < self.buckets else [])
        return [self.buckets * (src + 1) if self.previous else 0]


def build_memory(settings: MemorySettings, width: int) -> Memory | None:
    """The spec's memory automaton, or None when the spec asks for none."""
    if not settings.enabled:
        return None
    return Memory(width, dwell=settings.dwell, previous=settings.previous)
