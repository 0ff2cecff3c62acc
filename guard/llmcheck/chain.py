"""The explored chain: its states, the α-k-L settings, the budget, and what exploring cost.

States are numbered in the order they were found: 0 is the start text, the last one is
the terminal state that collects the unexplored mass.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction

from .errors import LLMCheckError
from .sources.base import Token


class StateKind(str, Enum):
    """What became of a state."""

    EXPANDED = "expanded"  # asked the model; has children (and maybe terminal mass)
    LEAF = "leaf"  # reached depth L: absorbing
    ENDED = "ended"  # the model ended the text (end-of-sequence token): absorbing
    CUT = "cut"  # the budget ran out before it was expanded: all its mass is unexplored
    TERMINAL = "terminal"  # the sink of the unexplored mass: absorbing


@dataclass(frozen=True)
class ExploreSettings:
    """The α-k-L bounds.

    Attributes:
        alpha: cumulative probability at which a state stops adding children, in (0, 1].
        k: most children per state, at least 1 (tokens tied in probability with the last one kept are kept too).
        depth: L, the most tokens generated after the start text, at least 0.
    """

    alpha: float = 0.8
    k: int = 5
    depth: int = 5

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha <= 1.0:
            raise LLMCheckError(f"alpha must lie in (0, 1], got {self.alpha}")
        if self.k < 1:
            raise LLMCheckError(f"k must be at least 1, got {self.k}")
        if self.depth < 0:
            raise LLMCheckError(f"depth must be at least 0, got {self.depth}")


@dataclass(frozen=True)
class Budget:
    """Limits on one exploration; ``None`` is no limit. Checked before each model call."""

    max_states: int | None = None
    max_calls: int | None = None
    max_seconds: float | None = None

    def exceeded(self, states: int, calls: int, seconds: float) -> str | None:
        """The name of the first limit reached, or ``None``."""
        if self.max_states is not None and states >= self.max_states:
            return "states"
        if self.max_calls is not None and calls >= self.max_calls:
            return "calls"
        if self.max_seconds is not None and seconds >= self.max_seconds:
            return "seconds"
        return None


@dataclass
class State:
    """One text of the explored chain.

    Attributes:
        index: its row in the chain.
        text: the whole decoded text (start text and continuation).
        continuation: what was generated after the start text.
        tokens: the generated tokens of the path the model is asked about.
        depth: tokens generated (every token path merged into this state has this length).
        kind: what became of it (see :class:`StateKind`).
        children: ``(state index, probability)`` of each kept next token, merged per child.
        unexplored: the mass sent to the terminal state (1 − kept mass; 1 for a cut state).
    """

    index: int
    text: str
    continuation: str
    tokens: tuple[Token, ...]
    depth: int
    kind: StateKind
    children: list[tuple[int, float]] = field(default_factory=list)
    unexplored: float = 0.0
    exact_children: list[tuple[int, Fraction]] = field(default_factory=list, repr=False)


@dataclass
class ExploreStats:
    """What an exploration cost: model calls count prefixes, batches count requests."""

    model_calls: int = 0  # prefixes sent to the model (one per expanded state not in the cache)
    batches: int = 0  # forward passes / HTTP requests
    cache_hits: int = 0
    expanded: int = 0
    merged: int = 0  # token paths that led to a text already in the chain
    seconds: float = 0.0
    model_seconds: float = 0.0
    stopped_by: str | None = None  # the budget limit that stopped exploration, if any

    @property
    def calls_per_expanded(self) -> float:
        return self.model_calls / self.expanded if self.expanded else 0.0

    @property
    def prefixes_per_batch(self) -> float:
        return self.model_calls / self.batches if self.batches else 0.0


@dataclass
class ExploredModel:
    """The α-k-bounded DTMC: states 0 (the start text) … ``terminal`` (the unexplored mass)."""

    prompt: str
    source: str
    settings: ExploreSettings
    states: list[State]
    terminal: int
    stats: ExploreStats

    @property
    def size(self) -> int:
        return len(self.states)

    def rows(self) -> list[list[tuple[int, float]]]:
        """Each state's successors with probabilities, columns ascending; rows sum to 1.

        Absorbing states (leaf, ended, terminal) have a self-loop.
        """
        out = []
        for s in self.states:
            if s.kind in (StateKind.EXPANDED, StateKind.CUT):
                row = list(s.children)
                if s.unexplored > 0.0:
                    row.append((self.terminal, s.unexplored))
                out.append(sorted(row))
            else:
                out.append([(s.index, 1.0)])
        return out

    def exact_rows(self) -> list[list[tuple[int, Fraction]]]:
        """:meth:`rows` in rationals: the model's floats exactly, terminal mass = 1 − their sum."""
        out = []
        for s in self.states:
            if s.kind in (StateKind.EXPANDED, StateKind.CUT):
                kept = sum((p for _, p in s.exact_children), Fraction(0))
                row = list(s.exact_children)
                if kept < 1:
                    row.append((self.terminal, 1 - kept))
                out.append(sorted(row))
            else:
                out.append([(s.index, Fraction(1))])
        return out

    def csr(self) -> object:
        """:meth:`rows` as a scipy CSR matrix."""
        import numpy as np
        import scipy.sparse as sp

        rows = self.rows()
        indptr = np.cumsum([0] + [len(r) for r in rows])
        indices = np.fromiter((j for r in rows for j, _ in r), dtype=np.int64, count=int(indptr[-1]))
        data = np.fromiter((p for r in rows for _, p in r), dtype=float, count=int(indptr[-1]))
        return sp.csr_matrix((data, indices, indptr), shape=(self.size, self.size))

    @property
    def transitions(self) -> int:
        return sum(len(r) for r in self.rows())

    def visit_probabilities(self) -> list[float]:
        """Probability that generation passes through each state (for absorbing ones: ends there).

        The chain is acyclic apart from the absorbing self-loops (every edge goes one token
        deeper), so this is one pass in topological order.
        """
        rows = self.rows()
        n = self.size
        indegree = [0] * n
        for i, row in enumerate(rows):
            for j, _ in row:
                if j != i:
                    indegree[j] += 1
        visit = [0.0] * n
        visit[0] = 1.0
        ready = [i for i in range(n) if indegree[i] == 0]
        seen = 0
        while ready:
            i = ready.pop()
            seen += 1
            for j, p in rows[i]:
                if j != i:
                    visit[j] += visit[i] * p
                    indegree[j] -= 1
                    if indegree[j] == 0:
                        ready.append(j)
        if seen != n:  # cannot happen: every edge goes one level deeper
            raise LLMCheckError("the explored chain has a cycle")
        return visit

    @property
    def unexplored_mass(self) -> float:
        """Probability of reaching the terminal state: the mass the bounds left unexplored."""
        return self.visit_probabilities()[self.terminal]

    def count(self, kind: StateKind) -> int:
        return sum(1 for s in self.states if s.kind is kind)
