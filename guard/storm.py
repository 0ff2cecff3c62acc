"""The one place Forewarn talks to Storm (stormpy 2.x).

Learned chains go to Storm through its sparse builder, never through PRISM text;
PRISM text is only an export format and an input for people with existing models.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import IO, Any

import numpy as np
import stormpy
from stormpy import datastructures as _ds
from stormpy import environments as _env
from stormpy import io as _io
from stormpy import models as _models

from ..errors import CheckError
from .learning import LearnedDTMC
from .results import CheckOutcome, Method

__all__ = ["Method", "CheckOutcome"]  # names other modules import through this one


def storm_version() -> str:
    return str(getattr(stormpy, "__version__", "unknown"))


def validate_formula(formula: str) -> None:
    """Parse a property with Storm's own parser; raise :class:`CheckError` if it does not parse."""
    try:
        with _storm_log_quiet():  # Storm's parser prints the error itself, in ten lines, before raising it
            properties = stormpy.parse_properties(formula)
    except Exception as exc:  # stormpy raises its own error types for parse failures
        raise CheckError(f"Storm cannot parse property {formula!r}: {_parse_problem(exc)}") from exc
    if len(properties) != 1:
        raise CheckError(f"expected exactly one property, got {len(properties)} in {formula!r}")


def labels_of(dtmc: LearnedDTMC) -> dict[str, list[int]]:
    """The labels a model carries into Storm: unsafe, end, init, every predicate, ``viol_<monitor>``."""
    labels: dict[str, list[int]] = {
        "unsafe": np.flatnonzero(dtmc.unsafe).tolist(),
        "end": [dtmc.end_index],
        "init": sorted(dtmc.initial) or [0],
    }
    for bit, name in enumerate(dtmc.predicates):
        labels[name] = [i for i, bits in enumerate(dtmc.states[:-1]) if bits >> bit & 1]
    violations = dtmc.violations
    for k, name in enumerate(dtmc.monitors):
        labels[f"viol_{name}"] = np.flatnonzero(violations[:, k]).tolist()
    return labels


def build_sparse_dtmc(matrix: Any, labels: Mapping[str, Sequence[int]], *,
                      exact_rows: Sequence[Sequence[tuple[int, Fraction]]] | None = None) -> Any:
    """A Storm sparse DTMC from a CSR matrix (float) or exact rational rows.

    Args:
        matrix: scipy CSR matrix, rows summing to 1, column indices sorted per row.
        labels: label name → state indices.
        exact_rows: per row, ``(column, Fraction)`` pairs; builds a ``Rational`` model.
    """
    n = matrix.shape[0]
    if exact_rows is None:
        builder = _ds.SparseMatrixBuilder[float](n, n, matrix.nnz, force_dimensions=True)
        coo_rows = np.repeat(np.arange(n), np.diff(matrix.indptr))
        builder.add_next_values(coo_rows.tolist(), matrix.indices.tolist(), matrix.data.tolist())
        value_type: Any = float
    else:
        builder = _ds.SparseMatrixBuilder[stormpy.Rational](n, n, 0, force_dimensions=True)
        for i, row in enumerate(exact_rows):
            for j, p in row:
                builder.add_next_value(i, j, stormpy.Rational(f"{p.numerator}/{p.denominator}"))
        value_type = stormpy.Rational
    components = _models.SparseModelComponents[value_type](transition_matrix=builder.build(),
                                                           state_labeling=_labeling(n, labels))
    return _models.SparseDtmc[value_type](components)


def build_sparse_mdp(choices: np.ndarray, indptr: np.ndarray, indices: np.ndarray, probabilities: np.ndarray,
                     labels: Mapping[str, Sequence[int]], *,
                     exact: Sequence[Fraction] | None = None) -> Any:
    """A Storm sparse MDP: state ``s``'s choices are rows ``choices[s]:choices[s + 1]`` of the CSR
    (``indptr``, ``indices``, ``probabilities``); ``exact``: the entries as Fractions (a Rational model)."""
    n, m = len(choices) - 1, len(indptr) - 1
    value_type: Any = float if exact is None else stormpy.Rational
    builder = _ds.SparseMatrixBuilder[value_type](m, n, len(indices), force_dimensions=True,
                                                  has_custom_row_grouping=True, row_groups=n)
    columns = indices.tolist()
    values = probabilities.tolist() if exact is None else \
        [stormpy.Rational(f"{p.numerator}/{p.denominator}") for p in exact]
    starts, ends = choices.tolist(), indptr.tolist()
    for s in range(n):
        builder.new_row_group(starts[s])
        for c in range(starts[s], starts[s + 1]):
            for k in range(ends[c], ends[c + 1]):
                builder.add_next_value(c, columns[k], values[k])
    components = _models.SparseModelComponents[value_type](transition_matrix=builder.build(),
                                                           state_labeling=_labeling(n, labels))
    return _models.SparseMdp[value_type](components)


def _labeling(n: int, labels: Mapping[str, Sequence[int]]) -> Any:
    labeling = _models.StateLabeling(n)
    for name, states in labels.items():
        labeling.add_label(name)
        mask = np.zeros(n, dtype=bool)
        mask[np.asarray(states, dtype=np.int64)] = True
        labeling.set_states(name, _ds.BitVector(n, np.flatnonzero(mask).tolist()))
    return labeling


def build_interval_dtmc(matrix: Any, lower: np.ndarray, upper: np.ndarray,
                        labels: Mapping[str, Sequence[int]]) -> Any:
    """A Storm interval DTMC (IDTMC): entry k of the CSR ``matrix`` becomes ``[lower[k], upper[k]]``.

    The sparsity is the matrix's: entries outside it are exact zeros.
    """
    n = matrix.shape[0]
    builder = _ds.SparseMatrixBuilder[stormpy.Interval](n, n, matrix.nnz, force_dimensions=True)
    coo_rows = np.repeat(np.arange(n), np.diff(matrix.indptr))
    interval = stormpy.Interval
    # Storm checks interval models only when every entry's lower end is positive ("graph
    # preservation"); a zero lower end becomes GRAPH_FLOOR (docs/method.md: why that is harmless)
    # one Interval object per distinct (lower, upper): making them is most of the build's cost
    lower = np.maximum(np.asarray(lower, dtype=float), GRAPH_FLOOR)
    upper = np.asarray(upper, dtype=float)
    order = np.lexsort((upper, lower))
    lo, hi = lower[order], upper[order]
    first = np.ones(len(order), dtype=bool)
    first[1:] = (lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])
    distinct = np.empty(int(first.sum()), dtype=object)
    distinct[:] = [interval(a, b) for a, b in zip(lo[first].tolist(), hi[first].tolist())]
    values = np.empty(len(order), dtype=object)
    values[order] = distinct[np.cumsum(first) - 1]
    builder.add_next_values(coo_rows.tolist(), matrix.indices.tolist(), values.tolist())
    components = _models.SparseModelComponents[stormpy.Interval](transition_matrix=builder.build(),
                                                                 state_labeling=_labeling(n, labels))
    return _models.SparseDtmc[stormpy.Interval](components)


GRAPH_FLOOR = 1e-9
_GLOBALLY = re.compile(r"^\s*P\s*=\?\s*\[\s*G\s*(?P<body>.+?)\s*\]\s*$", re.S)


def interval_bounds(model: Any, formula: str, *, precision: float = 1e-6
                    ) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Per state, the lowest and highest value of ``formula`` over every chain inside an IDTMC's intervals.

    Storm resolves the uncertainty adversarially (robust value iteration, ``MINIMIZE`` and
    ``MAXIMIZE``). It checks reachability, until and their bounded forms on interval models;
    ``G φ`` is read as ``1 − F ¬φ``. For a formula it cannot check there (LTL beyond
    those), the answer is ``None``. Returns (lowest, highest, seconds).
    """
    validate_formula(formula)
    complement = _GLOBALLY.match(formula)
    query = f"P=? [F !({complement['body']})]" if complement else formula
    env = _env.Environment()
    minmax = env.solver().min_max()
    # robust value iteration is what Storm does for interval models; choosing it keeps the
    # "switching to robust value iteration" notice off stderr
    minmax.method = _env.MinMaxMethod.VALUE_ITERATION
    minmax.precision = stormpy.Rational(repr(precision))
    minmax.relative_termination_criterion = False
    prop = stormpy.parse_properties(query)[0]
    modes = stormpy.UncertaintyResolutionMode
    started = time.perf_counter()
    vectors = []
    for mode in (modes.MINIMIZE, modes.MAXIMIZE):
        try:
            with _storm_log_quiet():  # Storm logs "not yet implemented" (on stdout!) before raising it
                result = stormpy.model_checking(model, prop, uncertainty_resolution_mode=mode, environment=env)
        except RuntimeError as exc:
            if "not yet implemented" in str(exc).lower():
                return None
            raise CheckError(f"Storm could not check {formula!r} on the interval model: {_first_line(exc)}") from exc
        vectors.append(np.clip(np.asarray(result.get_value_vector(), dtype=float), 0.0, 1.0))
    seconds = time.perf_counter() - started
    low, high = vectors
    if complement:
        low, high = 1.0 - high, 1.0 - low
    return low, high, seconds


def _environment(method: Method, precision: float) -> Any:
    if method is Method.EXACT:
        return _env.exact()
    if method is Method.SOUND:
        env = _env.sound()
    else:
        env = _env.Environment()
        env.solver().set_linear_equation_solver_type(_env.EquationSolverType.TOPOLOGICAL)
    native = env.solver().native()
    native.precision = stormpy.Rational(repr(precision))
    # Probabilities live in [0, 1] and the guard compares them with absolute thresholds:
    # an absolute criterion is what a decision needs, and converges faster than a relative one.
    native.relative_termination_criterion = False
    minmax = env.solver().min_max()  # an MDP's Pmin/Pmax (guard/mdp_learn.py): the same absolute criterion
    minmax.precision = stormpy.Rational(repr(precision))
    minmax.relative_termination_criterion = False
    return env


def check_sparse_model(model: Any, formula: str, *, method: Method = Method.SOUND,
                       precision: float = 1e-6) -> CheckOutcome:
    """Check ``formula`` for every state of a sparse model in one Storm call."""
    validate_formula(formula)
    prop = stormpy.parse_properties(formula)[0]
    env = _environment(method, precision)
    started = time.perf_counter()
    try:
        with _storm_errors_dropped():
            result = stormpy.model_checking(model, prop, environment=env)
    except Exception as exc:
        raise CheckError(f"Storm could not check {formula!r}: {_first_line(exc)}") from exc
    if result.is_qualitative():
        return _verdict_outcome(model, prop, result, formula, method, precision, env, started)
    seconds = time.perf_counter() - started
    if method is Method.EXACT:
        values = np.array([float(Fraction(str(v))) for v in result.get_value_vector()])
        return CheckOutcome(formula, values, values.copy(), values.copy(), method, 0.0, seconds)
    values = np.asarray(result.get_value_vector(), dtype=float)
    lower = upper = None
    if method is Method.SOUND and result.has_lower_bounds() and result.has_upper_bounds():
        lower = np.asarray(result.get_lower_bound_vector(), dtype=float)
        upper = np.asarray(result.get_upper_bound_vector(), dtype=float)
    return CheckOutcome(formula, values, lower, upper, method, precision, seconds)


def _truth(result: Any, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=bool)
    out[list(result.get_truth_values_vector())] = True  # the indices of the states where it holds
    return out


def _without_bound(prop: Any) -> Any | None:
    """``P>0.4 [φ]`` → ``P=? [φ]`` (any operator with a bound); ``None`` for other state formulas."""
    formula = prop.get_raw_formula()
    if not (formula.is_probability_operator_formula or formula.is_reward_operator_formula) \
            or not formula.has_bound:
        return None
    quantitative = formula.clone()
    quantitative.remove_bound()
    return quantitative


def quantitative_form(formula: str) -> str | None:
    """``P>0.4 [φ]`` → ``P=? [φ]`` (the probability a bound compares); ``None`` for other formulas."""
    validate_formula(formula)
    quantitative = _without_bound(stormpy.parse_properties(formula)[0])
    return None if quantitative is None else str(quantitative)


def _verdict_outcome(model: Any, prop: Any, result: Any, formula: str, method: Method, precision: float,
                     env: Any, started: float) -> CheckOutcome:
    """A qualitative result: Storm's verdict per state, beside the probability it compares."""
    verdicts = _truth(result, model.nr_states)
    quantitative = _without_bound(prop)
    values, lower, upper = np.full(model.nr_states, np.nan), None, None
    if quantitative is not None:
        try:
            with _storm_errors_dropped():
                numbers = stormpy.model_checking(model, quantitative, environment=env)
        except Exception as exc:
            raise CheckError(f"Storm could not check {formula!r}: {_first_line(exc)}") from exc
        values, lower, upper = _value_vectors(numbers, method)
    return CheckOutcome(formula, values, lower, upper, method, 0.0 if method is Method.EXACT else precision,
                        time.perf_counter() - started, verdicts)


def _value_vectors(result: Any, method: Method) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    if method is Method.EXACT:
        values = np.array([float(Fraction(str(v))) for v in result.get_value_vector()])
        return values, values.copy(), values.copy()
    values = np.asarray(result.get_value_vector(), dtype=float)
    if method is Method.SOUND and result.has_lower_bounds() and result.has_upper_bounds():
        return (values, np.asarray(result.get_lower_bound_vector(), dtype=float),
                np.asarray(result.get_upper_bound_vector(), dtype=float))
    return values, None, None


def check_qualitative(model: Any, formula: str) -> np.ndarray:
    """A qualitative property (e.g. ``P>0 [F "unsafe"]``) for every state, as booleans."""
    validate_formula(formula)
    try:
        with _storm_errors_dropped():
            result = stormpy.model_checking(model, stormpy.parse_properties(formula)[0])
    except Exception as exc:
        raise CheckError(f"Storm could not check {formula!r}: {_first_line(exc)}") from exc
    return _truth(result, model.nr_states)


def ctl_verdicts(model: Any) -> dict[str, np.ndarray]:
    """Per state, CTL ``EF unsafe`` and ``AG !unsafe``, decided by Storm on the graph.

    On a finite DTMC a path prefix reaching ``unsafe`` has positive probability, so
    ``EF unsafe`` is exactly ``P>0 [F "unsafe"]`` and ``AG !unsafe`` is ``P<=0 [F "unsafe"]``.
    """
    return {"EF unsafe": check_qualitative(model, 'P>0 [F "unsafe"]'),
            "AG !unsafe": check_qualitative(model, 'P<=0 [F "unsafe"]')}


def check_dtmc(dtmc: LearnedDTMC, formula: str, *, method: Method = Method.SOUND,
               precision: float = 1e-6) -> CheckOutcome:
    """Check a learned chain: build it for Storm directly and solve for all states."""
    exact_rows = [dtmc.exact_row(i) for i in range(dtmc.size)] if method is Method.EXACT else None
    model = build_sparse_dtmc(dtmc.matrix, labels_of(dtmc), exact_rows=exact_rows)
    return check_sparse_model(model, formula, method=method, precision=precision)


def export_drn(dtmc: LearnedDTMC, path: str | Path) -> None:
    """Write Storm's explicit DRN format."""
    model = build_sparse_dtmc(dtmc.matrix, labels_of(dtmc))
    options = stormpy.io.DirectEncodingExporterOptions()
    options.output_precision = 17  # enough digits for every double to round-trip
    stormpy.io.export_to_drn(model, str(path), options=options)


def prism_text(dtmc: LearnedDTMC, *, name: str = "forewarn") -> str:
    """The chain as a PRISM DTMC: one variable ``s``, one command per state, every label kept.

    Probabilities are written with ``repr`` so the floats round-trip exactly.
    """
    n = dtmc.size
    m = dtmc.matrix
    # every state runs started in is initial (an init block): with one `init` value, Storm
    # would drop the states reachable only from the other initial states
    initial = " | ".join(f"s={i}" for i in sorted(dtmc.initial)) or "s=0"
    lines = [f"// {name}: learned by Forewarn; s = state index (see the model file)", "dtmc", "",
             "module chain", f"  s : [0..{n - 1}];"]
    for i in range(n):
        start, stop = m.indptr[i], m.indptr[i + 1]
        updates = " + ".join(f"{float(p)!r}:(s'={int(j)})" for j, p in zip(m.indices[start:stop], m.data[start:stop]))
        lines.append(f"  [] s={i} -> {updates};")
    lines += ["endmodule", "", f"init {initial} endinit", ""]
    for label, states in labels_of(dtmc).items():
        if label == "init":
            continue
        body = " | ".join(f"s={s}" for s in states) or "false"
        lines.append(f'label "{label}" = {body};')
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class PrismCheck:
    """A PRISM file's property checked on every state.

    ``values`` (and ``verdicts``, for a formula with a bound) and ``variables`` follow the
    model's own state variables: states are ordered by their valuation (variables in
    declaration order), not by Storm's exploration order. ``initial_states`` are positions
    in that order; ``initial`` is the value of the only initial state, or the maximum over
    several (QComp's reference values for such models are that maximum; every initial
    value is in ``initial_states``). A bounded formula holds for the model when it holds
    in every initial state (Storm's reading): ``verdict``.
    """

    formula: str
    initial: float
    values: np.ndarray
    states: int
    transitions: int
    verdicts: np.ndarray | None = None
    initial_states: tuple[int, ...] = ()
    variables: tuple[dict[str, Any], ...] = ()
    reward: bool = False

    @property
    def initial_values(self) -> list[float]:
        return [float(self.values[i]) for i in self.initial_states]

    @property
    def verdict(self) -> bool | None:
        if self.verdicts is None:
            return None
        return bool(all(self.verdicts[i] for i in self.initial_states))


def check_prism_file(path: str | Path, formula: str, *, constants: str | None = None,
                     method: Method = Method.SOUND, precision: float = 1e-6) -> PrismCheck:
    """Check a PRISM DTMC file (people's existing models) with constants like ``'N=16,K=2'``."""
    try:
        with _storm_errors_dropped():
            program = stormpy.parse_prism_program(str(path))
    except Exception as exc:
        raise CheckError(f"{path}: PRISM model does not parse: {_first_line(exc)}") from exc
    if program.model_type != _io.PrismModelType.DTMC:
        raise CheckError(f"{path}: expected a DTMC, found a {program.model_type.name} model")
    try:
        with _storm_log_quiet():
            properties = stormpy.parse_properties(formula, program)
    except Exception as exc:
        raise CheckError(f"Storm cannot parse property {formula!r} for {path}: {_parse_problem(exc)}") from exc
    if len(properties) != 1:
        raise CheckError(f"expected exactly one property, got {len(properties)} in {formula!r}")
    if constants:
        try:
            with _storm_errors_dropped():
                program, properties = stormpy.instantiate_constants(program, constants, properties)
        except Exception as exc:
            raise CheckError(f"{path}: constants {constants!r}: {_first_line(exc)}") from exc
    if program.has_undefined_constants:
        missing = ", ".join(str(c.name) for c in program.constants if not c.defined)
        raise CheckError(f"{path}: undefined constants {missing}; give them with --const NAME=VALUE,...")
    raw = properties[0].get_raw_formula()
    reward = raw.is_reward_operator_formula
    if reward and method is Method.SOUND:
        # Storm's sound value iteration certifies reachability probabilities; for expected
        # rewards it would need upper bounds on them that the PRISM file does not give.
        method = Method.TOPOLOGICAL
    try:
        with _storm_errors_dropped():
            value_type = stormpy.Rational if method is Method.EXACT else float
            options = stormpy.BuilderOptions([raw])
            options.set_build_state_valuations()
            model = stormpy.build_model[value_type](program, options=options)
            env = _environment(method, precision)
            result = stormpy.model_checking(model, properties[0], environment=env)
            verdicts = None
            if result.is_qualitative():
                verdicts = _truth(result, model.nr_states)
                quantitative = _without_bound(properties[0])
                result = None if quantitative is None else \
                    stormpy.model_checking(model, quantitative, environment=env)
    except Exception as exc:
        raise CheckError(f"{path}: Storm could not check {formula!r}: {_first_line(exc)}") from exc
    raw_values = np.full(model.nr_states, np.nan) if result is None else \
        np.array([_number(v) for v in result.get_value_vector()])
    valuations = [_valuation(model.state_valuations, s) for s in range(model.nr_states)]
    order = sorted(range(model.nr_states), key=lambda s: tuple(_sortable(v) for v in valuations[s].values()))
    position = {storm: rank for rank, storm in enumerate(order)}
    values = raw_values[order]
    initial_states = tuple(sorted(position[int(s)] for s in model.initial_states))
    initial = max(float(values[i]) for i in initial_states)  # nan stays nan (no quantitative form)
    return PrismCheck(formula=formula, initial=initial, values=values, states=model.nr_states,
                      transitions=model.nr_transitions, verdicts=None if verdicts is None else verdicts[order],
                      initial_states=initial_states, variables=tuple(valuations[s] for s in order),
                      reward=bool(reward))


def _valuation(valuations: Any, state: int) -> dict[str, Any]:
    """A state's variables, in declaration order (Storm's JSON of the valuation)."""
    import orjson

    return dict(orjson.loads(str(valuations.to_json(state))))


def _number(value: Any) -> float:
    """A Storm value as a float: exact rationals through Fraction, ``inf`` (an expected reward
    of a state that may never reach the target) as it is."""
    text = str(value)
    return float(text) if text in ("inf", "-inf", "nan") else float(Fraction(text))


def _sortable(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, (bool, int, float)) else (1, str(value))


@contextlib.contextmanager
def _storm_log_quiet() -> Iterator[None]:
    """Send file descriptors 1 and 2 to /dev/null for one Storm call.

    Storm's C++ logger writes its notices to stdout, where they would corrupt the CLI's
    JSON. Used only around interval checks, which run offline (learn, check): the notices
    there say what Storm cannot do on interval models, which becomes a ``None`` result.
    """
    with open(os.devnull, "wb") as null, _descriptors_to(null, null):
        yield


@contextlib.contextmanager
def _storm_errors_dropped() -> Iterator[None]:
    """Hold what Storm prints on descriptors 1 and 2 during one call: passed on if the call
    succeeds (Storm's warnings), dropped if it raises.

    Storm logs an error (``ERROR (SparsePropositionalModelChecker.cpp:46): The property refers
    to unknown label 'x'``) and then throws it; the CheckError made of the exception says it
    once, in one line, and the log line above it would say it twice, raw. stormpy's own log
    level (``stormpy.developer.set_log_level``) cannot hide errors and keep warnings.
    """
    with tempfile.TemporaryFile() as held_out, tempfile.TemporaryFile() as held_err:
        with _descriptors_to(held_out, held_err) as swapped:
            yield
        if swapped:  # (reached only when the call did not raise)
            for fd, held in ((1, held_out), (2, held_err)):
                held.seek(0)
                _write_all(fd, held.read())


@contextlib.contextmanager
def _descriptors_to(out: IO[bytes], err: IO[bytes]) -> Iterator[bool]:
    """Point file descriptors 1 and 2 at ``out`` and ``err`` for the block, then back; yields whether
    it did (not where there are no real descriptors: an embedded interpreter)."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = [os.dup(1), os.dup(2)]
    except (OSError, ValueError):
        yield False
        return
    try:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        yield True
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _parse_problem(exc: BaseException) -> str:
    """Storm's parse error in one line: ``Parsing error at 1:6: expecting <formula>``."""
    text = _first_line(exc)
    while text.startswith("WrongFormatException: "):
        text = text.removeprefix("WrongFormatException: ")
    return " ".join(text.split()).removesuffix(", here:")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
