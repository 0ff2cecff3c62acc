"""A PAC bound registered from outside the package (guard/pac/registry.py) reaches everything that shows the
built-in ones: ``learn``'s words and JSON, the model file (written and read back), ``check`` and ``evaluate``.

The toy bound is plain Hoeffding per transient state, ε̂_i = min(1, √(log(2/δ')/(2 n_i))) with n_i the state's
departures and δ' = δ/|S| (no amplification: it is not a sound bound on the risks, only a registered one);
its values are checked against that formula, recomputed from the model file's own visits (to 1e-12: a square
root of a logarithm has no exact rational form).
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pytest

from _support import CLI
from forewarn.guard.cli._model_text import enough_runs_line
from forewarn.guard.model import GuardModel
from forewarn.guard.pac import BoundInputs, PACBound, bounds, register, unregister
from forewarn.guard.results import TightPAC, TightStatePAC


def _hoeffding(inputs: BoundInputs) -> TightPAC:
    dtmc = inputs.dtmc
    departures = np.asarray(dtmc.counts.sum(axis=1)).ravel()
    states = []
    for i in np.flatnonzero(~dtmc.absorbing):
        n = float(departures[i])
        radius = 1.0 if n == 0 else min(1.0, math.sqrt(math.log(2.0 / inputs.delta_per_state) / (2.0 * n)))
        states.append(TightStatePAC(int(i), radius, None, radius <= inputs.epsilon))
    worst = max((s.bound for s in states), default=0.0)
    first = max((s.bound for s in states if s.state in dtmc.initial), default=0.0)
    return TightPAC(satisfied=worst <= inputs.epsilon, worst_bound=worst, runs_factor=None, limiting=[],
                    states=states, initial_bound=first, initial_satisfied=first <= inputs.epsilon)


TOY = PACBound("toy_hoeffding", "toy-hoeffding", "toy Hoeffding", _hoeffding,
               absent=lambda pac: "not in this file (the toy bound was not registered when it was learned).")


@pytest.fixture
def toy_bound() -> Iterator[PACBound]:
    register(TOY)
    try:
        yield TOY
    finally:
        unregister(TOY.name)


def test_a_registered_bound_reaches_learn_the_model_file_check_and_evaluate(
        toy_bound: PACBound, forewarn_here: CLI, toy_traces: Path, toy_spec_path: Path, tmp_path: Path) -> None:
    assert [b.name for b in bounds()][-1] == "toy_hoeffding"
    path = tmp_path / "m.json"
    verbose = forewarn_here("learn", toy_traces, "--spec", toy_spec_path, "-o", path, "--verbose")
    assert verbose.returncode == 0, verbose.stderr
    text = " ".join(verbose.stdout.split())
    assert "PAC, toy Hoeffding bound (95% confidence): from the first state ±" in text

    document = orjson.loads(path.read_bytes())
    written = document["pac"]["toy_hoeffding"]
    assert written["method"] == "toy-hoeffding"
    model = GuardModel.load(path)
    delta_prime = model.pac.delta_per_state
    assert delta_prime == model.pac.delta / model.dtmc.size
    visits = {s.state: s.visits for s in model.pac.states}
    for entry in written["states"]:  # each state's radius against the formula, from the file's own visits
        n = visits[entry["state"]]
        expected = 1.0 if n == 0 else min(1.0, math.sqrt(math.log(2.0 / delta_prime) / (2.0 * n)))
        assert entry["bound"] == pytest.approx(expected, rel=0, abs=1e-12)
    loaded = model.pac.bounds["toy_hoeffding"]
    assert loaded.method == "toy-hoeffding" and loaded.worst_bound == written["worst_bound"]
    assert list(model.pac.bounds) == ["tight", "empirical", "joint", "outcome", "toy_hoeffding"]
    # the last registered bound answers "Enough runs?" (the table lists bounds loosest first)
    enough = enough_runs_line(model)
    assert enough is not None and "(PAC, toy Hoeffding bound, 95% confidence)" in enough

    summary = forewarn_here("learn", toy_traces, "--spec", toy_spec_path, "-o", path, "--format", "json").json()
    assert isinstance(summary, dict)
    assert summary["pac_toy_hoeffding_worst_bound"] == round(loaded.worst_bound, 6)
    assert summary["pac_toy_hoeffding_runs_factor"] is None

    checked = forewarn_here("check", path, "--format", "json").json()
    assert isinstance(checked, dict)
    assert checked["pac"]["toy_hoeffding"]["worst_bound"] == loaded.worst_bound

    evaluated = forewarn_here("evaluate", toy_traces, "--spec", toy_spec_path, "--folds", "2", "--theta", "0.5",
                              "--method", "topological", "--format", "json").json()
    assert isinstance(evaluated, dict)
    for fold in evaluated["fold_details"]:
        toy = fold["pac"]["toy_hoeffding"]
        assert set(toy) == set(fold["pac"]["joint"]) and 0 < toy["worst_bound"] <= 1


def test_a_file_without_the_bound_says_why_and_a_name_is_registered_once(
        toy_model_path: Path, toy_bound: PACBound, forewarn_here: CLI) -> None:
    from forewarn.errors import InputError

    shown = forewarn_here("check", toy_model_path)  # learned by the fixture before the toy was registered
    assert shown.returncode == 0, shown.stderr
    assert ("PAC, toy Hoeffding bound: not in this file (the toy bound was not registered when it was learned)."
            in " ".join(shown.stdout.split()))
    with pytest.raises(InputError, match="'toy_hoeffding' is already registered"):
        register(TOY)
