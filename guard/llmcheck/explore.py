"""The α-k-bounded exploration of an LLM's text generation (the paper's Algorithm 1).

From the start text, every state (a text) at depth < L asks the model once for its next
tokens and keeps the most probable ones, best first, until their probability sums to α
or k are kept (``top_alpha_k``). The rest of the mass, 1 − (kept mass), goes to one
shared *terminal* state. States at depth L are leaves; an end-of-sequence token gives an
*ended* state (the text is complete). Both are absorbing.

Done well beyond the paper:

* breadth-first, one level at a time, so a level's prefixes go to the model in batches
  (``source.max_batch`` per call), each prefix exactly once;
* states are texts: token paths that decode to the same text are merged (the first path
  found, which has the fewest tokens, is the one the model is asked about from then on);
* a :class:`Budget` (states, model calls, seconds), checked before each model call,
  stops cleanly: the prefixes not expanded become *cut* states whose whole mass goes to
  the terminal state, so no mass is ever dropped;
* a :class:`DistributionCache` shared between explorations (sweeps over α and k) answers
  repeated prefixes without a model call.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from fractions import Fraction

from guard.llmcheck.errors import LLMCheckError
from guard.llmcheck.sources.base import Candidate, Token, TokenDistribution, TokenSource

__all__ = [
    "StateKind",
    "ExploreSettings",
    "Budget",
    "State",
    "ExploreStats",
    "ExploredModel",
    "DistributionCache",
    "top_alpha_k",
    "explore",
]

REPLACEMENT = "\ufffd"  # what decoding makes of an incomplete multi-byte character


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
        k: most children per state, at least 1.
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
        depth: tokens generated along the shortest path found to this text.
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

        The chain is acyclic apart from the absorbing self-loops (a text only grows), so
        this is one pass in topological order.
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
        if seen != n:  # only a decoder that shrinks texts could make a cycle
            raise LLMCheckError("the explored chain has a cycle; the source's decode() does not extend texts")
        return visit

    @property
    def unexplored_mass(self) -> float:
        """Probability of reaching the terminal state: the mass the bounds left unexplored."""
        return self.visit_probabilities()[self.terminal]

    def count(self, kind: StateKind) -> int:
        return sum(1 for s in self.states if s.kind is kind)


def top_alpha_k(candidates: Sequence[Candidate], alpha: float, k: int) -> list[Candidate]:
    """TOP_α^k: the most probable candidates, best first, until their mass reaches α or k are kept."""
    ranked = sorted(candidates, key=lambda c: -c.prob)  # stable: ties keep the source's order
    chosen: list[Candidate] = []
    mass = 0.0
    for candidate in ranked[:k]:
        if candidate.prob <= 0.0:
            break
        chosen.append(candidate)
        mass += candidate.prob
        if mass >= alpha:
            break
    return chosen


class DistributionCache:
    """Next-token distributions by token sequence, shared by explorations of one source."""

    def __init__(self) -> None:
        self._entries: dict[tuple[Token, ...], tuple[int, TokenDistribution]] = {}

    def get(self, sequence: tuple[Token, ...], top_k: int) -> TokenDistribution | None:
        entry = self._entries.get(sequence)
        if entry is None:
            return None
        asked, dist = entry
        return dist if (asked >= top_k or dist.complete) else None

    def put(self, sequence: tuple[Token, ...], top_k: int, dist: TokenDistribution) -> None:
        self._entries[sequence] = (top_k, dist)

    def __len__(self) -> int:
        return len(self._entries)


def explore(source: TokenSource, prompt: str, settings: ExploreSettings | None = None, *,
            budget: Budget | None = None, cache: DistributionCache | None = None,
            on_level: Callable[[int, int], None] | None = None) -> ExploredModel:
    """Build the α-k-bounded DTMC of ``source`` generating after ``prompt``.

    Args:
        source: the token source (see :class:`~guard.llmcheck.sources.base.TokenSource`).
        prompt: the start text ω(0).
        settings: α, k and the depth L.
        budget: limits; when one is reached the unexpanded prefixes become cut states.
        cache: distributions already fetched (reused, and filled).
        on_level: called with (depth, states so far) after each level, for progress.

    Returns:
        the explored chain with its statistics.
    """
    settings = settings or ExploreSettings()
    budget = budget or Budget()
    started = time.perf_counter()
    stats = ExploreStats()
    prompt_tokens = tuple(source.encode(prompt))
    prompt_text = source.decode(prompt_tokens)
    states: list[State] = [State(0, prompt_text, "", (), 0, StateKind.EXPANDED)]
    by_key: dict[Hashable, int] = {("text", prompt_text): 0}
    reach = [1.0]
    frontier = [0] if settings.depth > 0 else []
    if settings.depth == 0:
        states[0].kind = StateKind.LEAF

    def continuation_of(text: str, tokens: tuple[Token, ...]) -> str:
        if text.startswith(prompt_text):
            return text[len(prompt_text):]
        return source.decode(tokens)  # a decoder that rewrote the start text: decode the new part alone

    def add_state(key: Hashable, text: str, tokens: tuple[Token, ...], depth: int, kind: StateKind) -> int:
        index = len(states)
        states.append(State(index, text, continuation_of(text, tokens), tokens, depth, kind))
        by_key[key] = index
        reach.append(0.0)
        return index

    stop: str | None = None
    for depth in range(settings.depth):
        if not frontier:
            break
        frontier.sort(key=lambda i: -reach[i])  # if the budget cuts this level, keep the likeliest
        next_frontier: list[int] = []
        position = 0
        while position < len(frontier):
            chunk_start = position
            batch: list[int] = []
            dists: dict[int, TokenDistribution] = {}
            # fill one model call with prefixes the cache does not know
            while position < len(frontier) and len(batch) < source.max_batch:
                i = frontier[position]
                cached = cache.get(prompt_tokens + states[i].tokens, settings.k) if cache is not None else None
                if cached is not None:
                    dists[i] = cached
                    stats.cache_hits += 1
                elif stop is None and (stop := budget.exceeded(len(states), stats.model_calls + len(batch),
                                                               time.perf_counter() - started)) is None:
                    batch.append(i)
                else:
                    break
                position += 1
            if batch:
                t0 = time.perf_counter()
                answers = source.next_tokens([prompt_tokens + states[i].tokens for i in batch], settings.k)
                stats.model_seconds += time.perf_counter() - t0
                if len(answers) != len(batch):
                    raise LLMCheckError(f"source {source.name!r} answered {len(answers)} distributions "
                                        f"for {len(batch)} prefixes")
                stats.batches += 1
                stats.model_calls += len(batch)
                for i, dist in zip(batch, answers):
                    dists[i] = dist
                    if cache is not None:
                        cache.put(prompt_tokens + states[i].tokens, settings.k, dist)
            for i in frontier[chunk_start:position]:
                _expand(states[i], dists[i], settings, source, prompt_tokens, states, by_key, reach,
                        add_state, next_frontier, stats)
            if stop is not None:
                break
        if stop is not None:
            for i in frontier[position:]:
                _cut(states[i])
            for i in next_frontier:  # children already made: leaves at depth L, else cut
                if depth + 1 == settings.depth:
                    states[i].kind = StateKind.LEAF
                else:
                    _cut(states[i])
            stats.stopped_by = stop
            break
        frontier = next_frontier
        if on_level is not None:
            on_level(depth + 1, len(states))
    else:
        for i in frontier:  # depth L reached: the last level are leaves
            states[i].kind = StateKind.LEAF
    terminal = len(states)
    states.append(State(terminal, "", "", (), -1, StateKind.TERMINAL))
    stats.seconds = time.perf_counter() - started
    return ExploredModel(prompt, source.name, settings, states, terminal, stats)


def _cut(state: State) -> None:
    state.kind = StateKind.CUT
    state.children = []
    state.exact_children = []
    state.unexplored = 1.0


def _expand(state: State, dist: TokenDistribution, settings: ExploreSettings, source: TokenSource,
            prompt_tokens: tuple[Token, ...], states: list[State], by_key: dict[Hashable, int],
            reach: list[float], add_state: Callable[..., int], next_frontier: list[int],
            stats: ExploreStats) -> None:
    chosen = top_alpha_k(dist.candidates, settings.alpha, settings.k)
    children: dict[int, Fraction] = {}
    child_depth = state.depth + 1
    for candidate in chosen:
        if candidate.eos:
            key: Hashable = ("ended", state.index)
            index = by_key.get(key)
            if index is None:
                index = add_state(key, state.text, state.tokens, child_depth, StateKind.ENDED)
        else:
            tokens = state.tokens + (candidate.token,)
            text = source.decode(prompt_tokens + tokens)
            # a text is its own key, unless the token added nothing visible or left a
            # character half-decoded: then texts do not identify what the model saw
            if text == state.text or REPLACEMENT in text[len(state.text) - 1:]:
                key = ("path", state.index, candidate.token)
            else:
                key = ("text", text)
            index = by_key.get(key)
            if index is None:
                index = add_state(key, text, tokens, child_depth, StateKind.EXPANDED)
                next_frontier.append(index)
            else:
                stats.merged += 1
        children[index] = children.get(index, Fraction(0)) + Fraction(candidate.prob)
        reach[index] += reach[state.index] * candidate.prob
    kept = sum(children.values(), Fraction(0))
    support = sum(1 for c in dist.candidates if c.prob > 0.0)
    if kept > 1 or (dist.complete and len(chosen) == support):
        # the whole distribution was kept (or a source overshot 1 by rounding): its floats
        # sum to 1 only up to rounding, and nothing is unexplored, so scale them to 1
        children = {j: p / kept for j, p in children.items()}
        kept = Fraction(1)
    state.exact_children = sorted(children.items())
    state.children = [(j, float(p)) for j, p in state.exact_children]
    state.unexplored = float(1 - kept)
    stats.expanded += 1
