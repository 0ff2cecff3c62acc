"""learning.kinds, the stored (pooled) interval (issue 40): at a state some run visited it is the runs'
own first-visit Clopper–Pearson interval, which holds the first-visit risk with no model of the kinds;
checked against first visits counted by hand from the simulated runs, and by coverage on two_types."""
from __future__ import annotations

from collections import Counter

import numpy as np

from _coverage import MIXTURES, kinds_coverage, simulate
from _support import AB, TOY_SPEC
from forewarn.guard.intervals import clopper_pearson
from forewarn.guard.pipeline import model_from_counts, prepare
from forewarn.guard.spec import parse_spec
from forewarn.guard.storm import Method


def test_a_visited_state_stores_the_runs_own_interval() -> None:
    spec = parse_spec(TOY_SPEC.replace("  delta: 0.05\n", "  delta: 0.05\n  kinds: 2\n"))
    predicates, monitors = prepare(spec)
    paths: Counter[tuple[int, ...]] = Counter()
    counts = simulate(MIXTURES["two_types"], 300, np.random.default_rng(8), predicates, paths=paths)
    model = model_from_counts(counts, spec, predicates, monitors, method=Method.TOPOLOGICAL, paths=paths)
    assert model.kinds is not None and model.intervals is not None
    # oracle: per abstract state, the runs that visit it and those that then reach AB (unsafe absorbs)
    n: Counter[int] = Counter()
    k: Counter[int] = Counter()
    for path, copies in paths.items():
        for bits in set(path) - {AB}:
            n[bits] += copies
            k[bits] += copies * (path[-1] == AB)
    (prop,) = model.properties
    assert prop.ci_low is not None and prop.ci_high is not None
    index = model.dtmc.index()
    for bits in n:
        s = index[bits]
        low, high = clopper_pearson(np.array([k[bits]]), np.array([n[bits]]), 0.05 / len(n))
        value = prop.outcome.values[s]
        assert prop.ci_low[s] == min(low[0], value) and prop.ci_high[s] == max(high[0], value)


def test_the_pooled_interval_covers_and_is_narrower_than_the_kinds_box() -> None:
    result = kinds_coverage("two_types", learnings=40, runs=200, kinds=2, seed=29)
    print(result.line())
    assert result.rate >= 0.9  # 40 learnings: a binomial margin below 1 − δ (bench/kinds_check.py runs 200)
    assert np.mean(result.widths) < 0.25  # the kinds' box over the shares was 0.44 wide here
