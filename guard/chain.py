"""The learned chain as a value: :class:`LearnedDTMC`, its states and its CSR matrices.

Learning it is guard/learning.py's job, checking it guard/storm.py's; this module holds the
data both hand to the runtime, and imports neither scipy nor Storm, so that loading a
model file and deciding with it stay light (bench/import_time.py). A loaded chain keeps
the file's CSR arrays (:class:`CsrArrays`) and makes them scipy matrices on first use.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UsageError

if TYPE_CHECKING:
    import scipy.sparse as sp

END = -1  # the abstract 'state' a run enters after its last step


@dataclass(frozen=True)
class CsrArrays:
    """A CSR matrix as its three arrays (scipy's layout), made a ``scipy.sparse.csr_matrix`` on demand."""

    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    shape: tuple[int, int]

    def to_scipy(self) -> sp.csr_matrix:
        import scipy.sparse as sp  # here, not at the top: see the module docstring

        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape)


class _LazyCsr:
    """A field holding a scipy CSR matrix, or :class:`CsrArrays` turned into one when first read."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}"

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:  # dataclasses ask the class for a default: there is none
            raise AttributeError(self.slot[1:])
        value = obj.__dict__[self.slot]
        if isinstance(value, CsrArrays):
            value = obj.__dict__[self.slot] = value.to_scipy()
        return value

    def __set__(self, obj: Any, value: CsrArrays | sp.csr_matrix) -> None:
        obj.__dict__[self.slot] = value


@dataclass(kw_only=True)  # counts and matrix are descriptors without a default: keywords only
class LearnedDTMC:
    """A learned chain over abstract states; the last state is ``end``.

    ``counts`` and ``matrix`` are CSR matrices over state indices with the same
    sparsity: ``matrix`` holds the smoothed probabilities, ``counts`` the observations.
    Either may be given as :class:`CsrArrays` (a loaded model file does so): it becomes a
    scipy matrix when first read, so a guard that only decides never imports scipy.
    """

    predicates: list[str]
    states: list[int]  # bit masks; END for the end state
    unsafe: np.ndarray  # bool per state
    initial: dict[int, int]  # state index -> runs that started there
    counts: _LazyCsr = _LazyCsr()
    matrix: _LazyCsr = _LazyCsr()
    alpha: float
    invalid_observed: int = 0  # observed transitions the rules call invalid (kept: data wins)
    # For a product with monitors (monitors/product.py): their names and, per state,
    # each monitor's state (row of ``end`` is all zeros: monitors stop there).
    monitors: list[str] = field(default_factory=list)
    monitor_states: np.ndarray | None = None
    # learning.memory.actions: the action classes the states' histories index (guard/memory.py)
    actions: tuple[str, ...] = ()
    # Chains smoothed towards a prior row (guard/backoff.py): the prior's pseudo-counts, with
    # the sparsity of ``counts``; a row is then (counts + pseudo) / its sum, not eq. 1.
    pseudo: sp.csr_matrix | None = None

    def arrays(self, name: str) -> CsrArrays | sp.csr_matrix:
        """``counts`` or ``matrix`` as stored, not made a scipy matrix: read ``.data``, ``.indices``
        and ``.indptr`` only."""
        value: CsrArrays | sp.csr_matrix = self.__dict__[f"_{name}"]
        return value

    @property
    def size(self) -> int:
        return len(self.states)

    @property
    def end_index(self) -> int:
        return len(self.states) - 1

    @property
    def absorbing(self) -> np.ndarray:
        mask = self.unsafe.copy()
        mask[self.end_index] = True
        return mask

    def index(self) -> dict[int, int]:
        """Bit mask → state index (``end`` excluded); for a chain without monitors."""
        if self.monitors:
            raise UsageError("a product with monitors is indexed by (bits, monitor states): use product_index()")
        return {bits: i for i, bits in enumerate(self.states[:-1])}

    def product_index(self) -> dict[tuple[int, tuple[int, ...]], int]:
        """(bit mask, monitor states) → state index (``end`` excluded)."""
        if self.monitor_states is None:
            return {(bits, ()): i for i, bits in enumerate(self.states[:-1])}
        rows = self.monitor_states.tolist()
        return {(bits, tuple(rows[i])): i for i, bits in enumerate(self.states[:-1])}

    @property
    def violations(self) -> np.ndarray:
        """Per state and monitor, whether the monitor is in ``viol`` (shape n × monitors)."""
        if self.monitor_states is None:
            return np.zeros((self.size, 0), dtype=bool)
        out: np.ndarray = self.monitor_states == -1
        out[self.end_index] = False
        return out

    def exact_row(self, i: int) -> list[tuple[int, Fraction]]:
        """Row ``i`` as exact rationals, computed from the counts and α (for exact checking)."""
        start, stop = self.matrix.indptr[i], self.matrix.indptr[i + 1]
        cols = self.matrix.indices[start:stop]
        if i == self.end_index or self.unsafe[i]:
            return [(i, Fraction(1))]
        counts = self.counts
        begin, end = counts.indptr[i], counts.indptr[i + 1]
        if np.array_equal(counts.indices[begin:end], cols):  # the same sparsity, as learn_dtmc builds it
            row = counts.data[begin:end]
            total = int(row.sum())
            observed = [int(n) for n in row.tolist()]
        else:  # a row of another shape (hand-built): read it densely
            dense = counts[i].toarray().ravel()
            total = int(dense.sum())
            observed = [int(dense[j]) for j in cols]
        if self.pseudo is not None:  # a back-off row: the float pseudo-counts are exact rationals too
            prior = [Fraction(float(x)) for x in self.pseudo.data[begin:end].tolist()]
            weights = [n + x for n, x in zip(observed, prior)]
            whole = sum(weights)
            return [(int(j), w / whole) for j, w in zip(cols.tolist(), weights)]
        k = len(cols)
        if total == 0:
            return [(int(j), Fraction(1, k)) for j in cols]
        # (n + α) / (total + k·α) with α = a/b, as one fraction of integers: the same value
        alpha = Fraction(str(self.alpha))
        a, b = alpha.numerator, alpha.denominator
        denominator = total * b + k * a
        return [(j, Fraction(n * b + a, denominator)) for j, n in zip(cols.tolist(), observed)]


def count_totals(dtmc: LearnedDTMC) -> np.ndarray:
    """Per state, the sum of its row of ``counts`` (floats; without making scipy matrices)."""
    counts = dtmc.arrays("counts")
    rows = np.repeat(np.arange(dtmc.size), np.diff(counts.indptr))
    return np.bincount(rows, weights=counts.data, minlength=dtmc.size)


def visits(dtmc: LearnedDTMC) -> np.ndarray:
    """Observed departures per state (0 for absorbing states: nothing is learned there).

    In a product with monitors a state's visits are those of its chain state, since every
    product row carries its chain row's counts.
    """
    out = count_totals(dtmc)
    out[dtmc.absorbing] = 0
    rounded: np.ndarray = np.rint(out).astype(np.int64)
    return rounded
