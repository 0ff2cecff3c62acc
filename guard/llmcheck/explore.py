"""The α-k-bounded exploration of an LLM's text generation (the paper's Algorithm 1).

From the start text, every state (a text) at depth < L asks the model once for its next
tokens and keeps the most probable ones, best first, until their probability sums to α
or k are kept (``top_alpha_k``). The rest of the mass, 1 − (kept mass), goes to one
shared *terminal* state. States at depth L are leaves; an end-of-sequence token gives an
*ended* state (the text is complete). Both are absorbing.

Done well beyond the paper:

* breadth-first, one level at a time, so a level's prefixes go to the model in batches
  (``source.max_batch`` per call), each prefix exactly once;
* states are texts at a depth: token paths of the same length that decode to the same
  text are merged into one state (the first path found is the one the model is asked
  about from then on). Paths of different lengths are not merged, so the depth bound
  keeps meaning "L tokens" and the chain is the exact quotient of the paper's tree;
* a :class:`Budget` (states, model calls, seconds), checked before each model call,
  stops cleanly: the prefixes not expanded become *cut* states whose whole mass goes to
  the terminal state, so no mass is ever dropped;
* a :class:`DistributionCache` shared between explorations (sweeps over α and k) answers
  repeated prefixes without a model call.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from fractions import Fraction

from .chain import Budget, ExploredModel, ExploreSettings, ExploreStats, State, StateKind
from .errors import LLMCheckError
from .sources.base import Candidate, Token, TokenDistribution, TokenSource

REPLACEMENT = "\ufffd"  # what decoding makes of an incomplete multi-byte character


def token_key(token: Token) -> tuple[int, int | str]:
    """A total order on tokens: ids by number, pieces by text (the end token ``None`` last)."""
    if isinstance(token, bool) or token is None:
        return (2, repr(token))
    if isinstance(token, int):
        return (0, token)
    return (1, str(token))


def rank_key(candidate: Candidate) -> tuple[float, tuple[int, int | str]]:
    """Most probable first; equal probabilities by :func:`token_key`, never by the source's order."""
    return (-candidate.prob, token_key(candidate.token))


def top_alpha_k(candidates: Sequence[Candidate], alpha: float, k: int) -> list[Candidate]:
    """TOP_α^k: the most probable candidates, best first, until their mass reaches α or k are kept;
    a candidate *tied* with the last one kept (the same float probability) is kept too.

    So the kept set never depends on how a source orders equal tokens: it is a union of
    whole probability levels, and may hold more than k tokens or overshoot α by a tie.
    The mass is summed exactly (the floats as rationals) and compared with α exactly.
    """
    ranked = sorted((c for c in candidates if c.prob > 0.0), key=rank_key)
    chosen: list[Candidate] = []
    mass, target = Fraction(0), Fraction(alpha)
    for candidate in ranked:
        if (len(chosen) >= k or mass >= target) and candidate.prob != chosen[-1].prob:
            break
        chosen.append(candidate)
        mass += Fraction(candidate.prob)
    return chosen


def may_hide_ties(dist: TokenDistribution, chosen: Sequence[Candidate], asked: int) -> bool:
    """Whether tokens tied with the last kept one may lie beyond what the source returned:
    it returned all it was asked for, the distribution is not known complete, all of it was
    kept, and the mass left (1 − what was returned, with 1e-6 for the source's rounding)
    could still hold one more token of that probability."""
    positive = [c.prob for c in dist.candidates if c.prob > 0.0]
    if dist.complete or len(dist.candidates) < asked or not 0 < len(chosen) == len(positive):
        return False
    return sum(positive) + positive[-1] <= 1.0 + 1e-6


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
    by_key: dict[Hashable, int] = {("text", prompt_text, 0): 0}
    # exact (rational) reach probabilities: the frontier order must not hang on float rounding
    reach = [Fraction(1)]
    asked = settings.k + 1  # one more than k: a tie at the k-th token shows in the answer
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
        reach.append(Fraction(0))
        return index

    stop: str | None = None
    for depth in range(settings.depth):
        if not frontier:
            break
        # if the budget cuts this level, keep the likeliest; equal ones by their token path
        frontier.sort(key=lambda i: (-reach[i], tuple(map(token_key, states[i].tokens))))
        next_frontier: list[int] = []
        position = 0
        while position < len(frontier):
            chunk_start = position
            batch: list[int] = []
            dists: dict[int, TokenDistribution] = {}
            # fill one model call with prefixes the cache does not know
            while position < len(frontier) and len(batch) < source.max_batch:
                i = frontier[position]
                cached = cache.get(prompt_tokens + states[i].tokens, asked) if cache is not None else None
                if cached is not None and may_hide_ties(
                        cached, top_alpha_k(cached.candidates, settings.alpha, settings.k), len(cached.candidates)):
                    cached = None  # a cached answer too short to settle a tie: ask again
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
                wider, asking = asked, batch
                while asking:  # rarely more than once: only while a tie runs past the answer's end
                    t0 = time.perf_counter()
                    answers = source.next_tokens([prompt_tokens + states[i].tokens for i in asking], wider)
                    stats.model_seconds += time.perf_counter() - t0
                    if len(answers) != len(asking):
                        raise LLMCheckError(f"source {source.name!r} answered {len(answers)} distributions "
                                            f"for {len(asking)} prefixes")
                    stats.batches += 1
                    stats.model_calls += len(asking)
                    for i, dist in zip(asking, answers):
                        dists[i] = dist
                        if cache is not None:
                            cache.put(prompt_tokens + states[i].tokens, wider, dist)
                    asking = [i for i in asking if may_hide_ties(
                        dists[i], top_alpha_k(dists[i].candidates, settings.alpha, settings.k), wider)]
                    wider *= 2
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
            reach: list[Fraction], add_state: Callable[..., int], next_frontier: list[int],
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
            if text == state.text or REPLACEMENT in text[max(0, len(state.text) - 1):]:
                key = ("path", state.index, candidate.token)
            else:
                key = ("text", text, child_depth)
            index = by_key.get(key)
            if index is None:
                index = add_state(key, text, tokens, child_depth, StateKind.EXPANDED)
                next_frontier.append(index)
            else:
                stats.merged += 1
        children[index] = children.get(index, Fraction(0)) + Fraction(candidate.prob)
    kept = sum(children.values(), Fraction(0))
    support = sum(1 for c in dist.candidates if c.prob > 0.0)
    if kept > 1 or (kept > 0 and dist.complete and len(chosen) == support):
        # the whole distribution was kept (or a source overshot 1 by rounding): its floats
        # sum to 1 only up to rounding, and nothing is unexplored, so scale them to 1
        children = {j: p / kept for j, p in children.items()}
        kept = Fraction(1)
    for j, p in children.items():
        reach[j] += reach[state.index] * p
    state.exact_children = sorted(children.items())
    state.children = [(j, float(p)) for j, p in state.exact_children]
    state.unexplored = float(1 - kept)
    stats.expanded += 1
