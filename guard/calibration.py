"""Calibration: does a predicted p_unsafe of 0.3 come true three times in ten?

Pure arithmetic over (prediction, outcome) pairs, no model: the Brier score (mean
squared error of the probability), the expected calibration error (ECE: the
count-weighted gap between mean prediction and observed frequency, over equal-width
bins) and the bins themselves for a reliability diagram.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import ConfigError

DEFAULT_BINS = 10


@dataclass(frozen=True)
class ReliabilityBin:
    """Predictions in ``[low, high)`` (the last bin includes 1.0)."""

    low: float
    high: float
    count: int
    mean_predicted: float | None
    observed: float | None  # the fraction of these predictions whose outcome was "unsafe"


@dataclass(frozen=True)
class Calibration:
    """Brier score, ECE and reliability bins of a set of predictions.

    ``n`` counts the scored predictions and ``positives`` those whose outcome was 1.
    Every figure is ``None`` when nothing was scored.
    """

    n: int
    positives: int
    brier: float | None
    ece: float | None
    bins: list[ReliabilityBin] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"n": self.n, "positives": self.positives, "brier": self.brier, "ece": self.ece,
                "bins": [b.__dict__ for b in self.bins]}


def calibrate(pairs: Iterable[tuple[float, bool]], *, bins: int = DEFAULT_BINS) -> Calibration:
    """Score predictions against outcomes.

    Args:
        pairs: ``(p, outcome)`` with ``p`` in [0, 1] the predicted probability of the
            outcome and ``outcome`` whether it happened.
        bins: number of equal-width bins for the ECE and the reliability diagram.

    Returns:
        The :class:`Calibration`; ``brier = mean((p − outcome)²)``,
        ``ece = Σ_b (n_b / n)·|mean p_b − frequency_b|``.
    """
    if bins < 1:
        raise ConfigError(f"bins={bins!r} must be at least 1")
    counts = [0] * bins
    sums = [0.0] * bins
    hits = [0] * bins
    squared = 0.0
    n = positives = 0
    for p, outcome in pairs:
        y = 1.0 if outcome else 0.0
        squared += (p - y) ** 2
        n += 1
        positives += bool(outcome)
        b = min(int(p * bins), bins - 1) if p > 0.0 else 0
        counts[b] += 1
        sums[b] += p
        hits[b] += bool(outcome)
    if n == 0:
        return Calibration(0, 0, None, None, [])
    table = []
    ece = 0.0
    for b in range(bins):
        mean_p = sums[b] / counts[b] if counts[b] else None
        freq = hits[b] / counts[b] if counts[b] else None
        if mean_p is not None and freq is not None:
            ece += counts[b] / n * abs(mean_p - freq)
        table.append(ReliabilityBin(b / bins, (b + 1) / bins, counts[b], mean_p, freq))
    return Calibration(n, positives, squared / n, ece, table)
