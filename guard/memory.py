"""A little history in the learned state: a deterministic memory automaton over the abstract run.

Like a monitor (monitors/base.py), the memory reads one abstract state per step — and, with
``actions``, the step's action — and is deterministic, so learning (over recorded runs) and a
session (step by step) reach the same memory state. Its state is one integer packing

* the current abstract state and how many steps it has held (capped at ``dwell``),
* the last *different* abstract state (with ``previous``), and
* the classes of the last ``actions`` actions (guard/actions.py, :func:`action_class`), newest
  first, each as its index in the model's action vocabulary;

and the chain sees only a coarse **label** of it: the dwell count in log-spaced buckets
(1, 2–3, 4–7, 8–15, … up to the cap), the previous abstract state and the recent action
classes. A chain state is the abstract state with its label in the bits above the predicates
(``bits | label << width``), so the model file, the product with monitors and the decision
cache keep working on plain integers; words shown to users read the predicate bits only.
Chains over these states are smoothed towards the memoryless chain's rows
(:mod:`guard.backoff`), so a history seen rarely borrows the data of its abstract state.

The action vocabulary is the sorted set of classes the counted runs show, and is known only
once every run is counted (on Spark, once the partitions' counts are summed). So counting
writes each recent-action history *portably*, as the integer of its JSON text, which means
the same in every partition; :meth:`Memory.compact` then numbers the vocabulary and rewrites
the counts with it. In a history, 0 stands for "before the run's first step" and V + 1 for
a class the vocabulary lacks (a session meets it; the guard then decides as for an unseen
history).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import ConfigError
from .actions import ActionClass, action_class, action_view
from .chain import END

if TYPE_CHECKING:
    from .learning import TransitionCounts
from .spec import MemorySettings

_COUNT_BITS = 12  # dwell counts up to 4095 (the spec's bound)
_STATE_BITS = 63  # a memory state travels as a JSON integer (a session's stored monitor states)


class Memory:
    """The memory automaton for a spec's ``learning.memory`` over ``width`` predicates.

    ``vocabulary``: the action classes a model's histories index (:meth:`compact` makes it);
    ``None`` while counting, when histories are written portably.
    """

    def __init__(self, width: int, *, dwell: int | None = None, previous: bool = False, actions: int = 0,
                 action_class: ActionClass = "raw", vocabulary: Sequence[str] | None = None) -> None:
        self.width = width
        self.cap = dwell or 1
        self.previous = previous
        self.actions = actions
        self.action_class: ActionClass = action_class
        self.buckets = self.cap.bit_length()  # bucket of a count c ≥ 1: c.bit_length() − 1
        self._bits_mask = (1 << (width + 1)) - 1
        self._prev_shift = _COUNT_BITS + width + 1
        self._action_shift = _COUNT_BITS + 2 * (width + 1)  # the action history sits above the rest
        self._low_mask = (1 << self._action_shift) - 1
        # labels without actions range over [0, n_old): dwell bucket, then previous state + 1
        self.n_old = self.buckets * ((1 << width) + 1) if previous else self.buckets
        self.vocabulary = None if vocabulary is None else tuple(vocabulary)
        self._ids = {c: i + 1 for i, c in enumerate(self.vocabulary or ())}
        self.base = len(self._ids) + 2  # 0: before the run, 1..V: the vocabulary, V + 1: another class
        self._keep = self.base ** (actions - 1) if actions else 1  # what a step keeps of the history
        self._id_cache: dict[str, int] = {}
        if actions and self.vocabulary is not None and \
                self._action_shift + (self.base ** actions - 1).bit_length() > _STATE_BITS:
            raise ConfigError(f"learning.memory: remembering {actions} actions over {len(self._ids)} action "
                              f"classes with {width} predicates needs more than {_STATE_BITS} bits of session "
                              "state; remember fewer actions or coarser classes (action_class: verb or tool)")
        self.initial = 0  # nothing read yet

    # -- a session's steps ----------------------------------------------------------

    def action_id(self, action: Any) -> int:
        """The vocabulary index of an action's class (V + 1 for a class the vocabulary lacks)."""
        if action.__class__ is str:
            cached = self._id_cache.get(action)
            if cached is not None:
                return cached
        found = self._ids.get(action_class(action_view(action), self.action_class), self.base - 1)
        if action.__class__ is str and len(self._id_cache) < 4096:
            self._id_cache[action] = found
        return found

    def step(self, state: int, bits: int, action: Any = None) -> int:
        """The memory after reading abstract state ``bits``, reached by ``action``."""
        low = self._step_low(state & self._low_mask, bits)
        if not self.actions:
            return low
        history = self.action_id(action) + self.base * ((state >> self._action_shift) % self._keep)
        return low | history << self._action_shift

    def _step_low(self, state: int, bits: int) -> int:
        count = state & 0xFFF
        current = ((state >> _COUNT_BITS) & self._bits_mask) - 1
        if current == bits:
            return state if count >= self.cap else state + 1
        prev = current if self.previous else -1
        return 1 | (bits + 1) << _COUNT_BITS | (prev + 1) << self._prev_shift

    def _old_label(self, state: int) -> int:
        bucket = (state & 0xFFF).bit_length() - 1
        if not self.previous:
            return max(bucket, 0)
        return max(bucket, 0) + self.buckets * ((state & self._low_mask) >> self._prev_shift)

    def label(self, state: int) -> int:
        """What the chain sees of a memory state: dwell bucket, previous state + 1, then recent actions."""
        return self._old_label(state) + self.n_old * (state >> self._action_shift)

    def encode(self, bits: int, state: int) -> int:
        """The chain state: predicate bits with the memory label above them."""
        return bits | self.label(state) << self.width

    def state_for(self, bits: int, label: int) -> int:
        """A memory state reading predicate ``bits`` whose :meth:`label` is ``label`` (its inverse,
        to decide for a chain state that no run has just reached, e.g. when listing states)."""
        history, old = divmod(label, self.n_old)
        bucket, prev = (old % self.buckets, old // self.buckets) if self.previous else (old, 0)
        return (1 << bucket) | (bits + 1) << _COUNT_BITS | prev << self._prev_shift | history << self._action_shift

    # -- whole runs ------------------------------------------------------------------

    def encode_run(self, abstract: Iterable[int], actions: Iterable[Any] | None = None) -> list[int]:
        """Chain states of a whole abstract run (as a session would reach them); ``actions``: each
        step's action as logged. Without a vocabulary, action histories are written portably."""
        out = []
        steps = zip(abstract, repeat(None) if actions is None else actions)
        if self.actions and self.vocabulary is None:
            history: list[str | None] = [None] * self.actions
            low = self.initial
            for bits, action in steps:
                low = self._step_low(low, bits)
                history = [action_class(action_view(action), self.action_class), *history[:-1]]
                portable = int.from_bytes(orjson.dumps(history), "big")
                out.append(bits | (self._old_label(low) + self.n_old * portable) << self.width)
            return out
        state = self.initial
        for bits, action in steps:
            state = self.step(state, bits, action)
            out.append(bits | self.label(state) << self.width)
        return out

    def compact(self, counts: TransitionCounts, paths: Mapping[tuple[int, ...], int] | None
                ) -> tuple[Memory, TransitionCounts, Counter[tuple[int, ...]] | None]:
        """Number the action classes of portably counted runs: the memory with its vocabulary (the
        sorted classes of the counted states), and the counts and paths rewritten with it.

        A path's states after its first violation (not counted) may show a class outside the
        vocabulary, which reads as V + 1.
        """
        mask = (1 << self.width) - 1
        decoded: dict[int, tuple[int, int, list[str | None]]] = {}

        def decode(state: int) -> tuple[int, int, list[str | None]]:
            found = decoded.get(state)
            if found is None:
                portable, old = divmod(state >> self.width, self.n_old)
                history = orjson.loads(portable.to_bytes((portable.bit_length() + 7) // 8, "big"))
                found = decoded[state] = (state & mask, old, history)
            return found

        from .learning import TransitionCounts  # learning time only: loading a model imports no scipy

        counted = set(counts.initial) | counts.unsafe | {s for pair in counts.counts for s in pair if s != END}
        classes = {c for s in counted for c in decode(s)[2] if c is not None}
        memory = Memory(self.width, dwell=self.cap if self.cap > 1 else None, previous=self.previous,
                        actions=self.actions, action_class=self.action_class, vocabulary=sorted(classes))
        ids, other, base = memory._ids, memory.base - 1, memory.base
        remapped: dict[int, int] = {END: END}

        def remap(state: int) -> int:
            found = remapped.get(state)
            if found is None:
                bits, old, history = decode(state)
                packed = sum((0 if c is None else ids.get(c, other)) * base ** i for i, c in enumerate(history))
                found = remapped[state] = bits | (old + self.n_old * packed) << self.width
            return found

        out = TransitionCounts(runs=counts.runs, steps=counts.steps, unsafe_runs=counts.unsafe_runs)
        for (a, b), n in counts.counts.items():
            out.counts[remap(a), remap(b)] += n
        for a, n in counts.initial.items():
            out.initial[remap(a)] += n
        out.unsafe = {remap(a) for a in counts.unsafe}
        new_paths: Counter[tuple[int, ...]] | None = None
        if paths is not None:
            new_paths = Counter()
            for path, n in paths.items():
                new_paths[tuple(remap(s) for s in path)] += n
        return memory, out, new_paths

    def recode(self, state: int, compact: Memory) -> int:
        """A chain state counted portably (this memory, no vocabulary) as ``compact`` (the model's memory,
        :meth:`compact`'s) numbers it: what :meth:`compact` does to the counts, for one more count."""
        if state == END or not self.actions:
            return state
        mask = (1 << self.width) - 1
        portable, old = divmod(state >> self.width, self.n_old)
        history = orjson.loads(portable.to_bytes((portable.bit_length() + 7) // 8, "big"))
        other = compact.base - 1
        packed: int = sum((0 if c is None else compact._ids.get(c, other)) * compact.base ** i
                     for i, c in enumerate(history))
        return (state & mask) | (old + self.n_old * packed) << self.width

    def class_id(self, cls: str) -> int:
        """The vocabulary index of an action class (V + 1 for one the vocabulary lacks)."""
        return self._ids.get(cls, self.base - 1)

    # -- a label in words (the commands that list states) ------------------------------

    def label_parts(self, label: int) -> tuple[tuple[int, int] | None, int | None, tuple[str, ...] | None]:
        """What a :meth:`label` remembers: the dwell range (steps, None without ``dwell``), the previous
        abstract state (its predicate bits, -1 before any other; None without ``previous``) and the
        recent action classes, newest first (``(start)`` before the run's first step, ``(other)`` for
        a class the vocabulary lacks; None without ``actions``)."""
        history, old = divmod(label, self.n_old)
        bucket, prev = (old % self.buckets, old // self.buckets) if self.previous else (old, 0)
        dwell = (1 << bucket, min((1 << (bucket + 1)) - 1, self.cap)) if self.cap > 1 else None
        actions = None
        if self.actions:
            names = ["(start)", *(self.vocabulary or ()), "(other)"]
            digits = [(history // self.base ** k) % self.base for k in range(self.actions)]
            actions = tuple(names[d] if d < len(names) else "(other)" for d in digits)
        return dwell, (prev - 1 if self.previous else None), actions

    # -- the back-off's view of labels ---------------------------------------------------

    def successor_keys(self, label: int, src: int, stay: bool) -> list[tuple[int, int]]:
        """Where a chain state with ``label`` over predicates ``src`` can go when they stay (``stay``) or
        change: keys that a target label's :meth:`arrival_key` must equal (any next action is possible)."""
        history, old = divmod(label, self.n_old)
        bucket = old % self.buckets
        if stay:
            olds = [old] + ([old + 1] if bucket + 1 < self.buckets else [])
        else:
            olds = [self.buckets * (src + 1) if self.previous else 0]
        rest = history % self._keep if self.actions else 0
        return [(o, rest) for o in olds]

    def newest_action(self, label: int) -> int:
        """The vocabulary index of the newest action a label remembers (0 without actions)."""
        return (label // self.n_old) % self.base if self.actions else 0

    def arrival_key(self, label: int) -> tuple[int, int]:
        """A label without its newest action: what the state it was reached from determines."""
        history, old = divmod(label, self.n_old)
        return old, history // self.base if self.actions else 0


def run_actions(steps: Sequence[dict[str, Any]]) -> list[Any]:
    """Each step's action as logged (None where it logged none)."""
    return [step.get("action") for step in steps]


def build_memory(settings: MemorySettings, width: int, vocabulary: Sequence[str] | None = None) -> Memory | None:
    """The spec's memory automaton, or None when the spec asks for none; ``vocabulary``: a model's
    action classes (None while counting)."""
    if not settings.enabled:
        return None
    return Memory(width, dwell=settings.dwell, previous=settings.previous, actions=settings.actions,
                  action_class=settings.action_class, vocabulary=vocabulary)
