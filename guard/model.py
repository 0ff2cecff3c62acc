"""The model file: one versioned JSON holding everything a guard needs at run time.

It carries the spec, the learned chain (counts and smoothed probabilities), the
values Storm computed for every state with their certified bounds, the PAC report
and provenance. Loading re-checks all of it, and a SHA-256 checksum over the
canonical body turns a hand edit or a truncated copy into a clear error.
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import cel
import numpy as np
import orjson
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ForewarnError, ModelFileError, UsageError
from ._cel_regex import FUNCTION, rewrite_matches, search
from .chain import END, CsrArrays, LearnedDTMC, visits
from .mdp import LearnedMDP, mdp_document, read_mdp
from .mixture_posterior import KindMixture, KindsEntry, kinds_document, read_kinds
from .output_files import is_special, write_output
from .results import (
    CheckOutcome,
    IntervalMethod,
    IntervalReport,
    Method,
    PACReport,
    StatePAC,
    TightPAC,
    TightStatePAC,
)
from .spec import Meaning, PropertyDef, Spec, parse_spec

SCHEMA_VERSION = 1
_TOLERANCE = 1e-9
INT64_MAX = 2**63 - 1
# Every integer a model file holds is one an int64 array can take, refused at its field otherwise
# (a ValidationError naming it): numbers read into numpy never overflow (OverflowError) on the way.
Int64 = Annotated[int, Field(ge=-(2**63), le=INT64_MAX)]
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]  # a count, a size or an index: never negative


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StateEntry(_Doc):
    kind: Literal["state", "end"]
    valuation: list[bool] | None = None
    unsafe: bool = False
    monitors: dict[str, Annotated[int, Field(ge=-1, le=INT64_MAX)]] | None = None  # monitor states (-1: viol)
    memory: Count | None = None  # the memory label (learning.memory), above the predicates


class TransitionsEntry(_Doc):
    indptr: list[Count]
    indices: list[Count]
    probabilities: list[float]
    counts: list[float]


class PropertyEntry(_Doc):
    name: str
    formula: str  # the Storm query, P=? [path formula]
    meaning: Meaning = Meaning.VIOLATION
    values: list[float]
    lower: list[float] | None = None
    upper: list[float] | None = None
    ci_low: list[float] | None = None  # statistical confidence interval of `values` (intervals.py)
    ci_high: list[float] | None = None
    # states where the chain and the runs' first-visit outcomes disagree (guard/markov_check.py), ascending
    markov_mismatch: list[Int64] | None = None


class IntervalsEntry(_Doc):
    # the chain's method, with "+outcomes" when the runs' direct outcome intervals were used
    method: Literal["clopper_pearson", "hoeffding", "clopper_pearson+outcomes", "hoeffding+outcomes"]
    delta: float = Field(gt=0.0, lt=1.0)
    delta_per_entry: float = Field(gt=0.0, lt=1.0)
    entries: Count
    seconds: float = 0.0
    outcomes: Count | None = None  # files before outcome intervals have neither
    delta_per_outcome: float | None = Field(default=None, gt=0.0, lt=1.0)
    markov_level: float | None = Field(default=None, gt=0.0, lt=1.0)  # files before the Markov test have neither
    markov_tested: Count | None = None


class CheckEntry(_Doc):
    method: Method
    precision: float
    seconds: float
    storm_version: str


class PACStateEntry(_Doc):
    state: Int64  # index in the learned chain (before the product with monitors)
    valuation: list[bool] | None = None
    visits: Count
    required: Int64 | None
    satisfied: bool


class TightStateEntry(_Doc):
    state: Int64
    bound: float | None  # None: infinite
    required: Int64 | None
    satisfied: bool


class TightPACEntry(_Doc):
    """The tighter per-state bound (guard/pac/tight.py); absent from files written before it."""

    method: str = "hoeffding-bernstein"
    satisfied: bool
    worst_bound: float | None  # None: infinite
    runs_factor: float | None  # None: no forecast (some state never absorbs)
    limiting: list[Int64] = []
    states: list[TightStateEntry]
    initial_bound: float | None = None  # the risk from a run's first state (None: infinite)
    initial_satisfied: bool = False
    initial_runs_factor: float | None = None
    initial_limiting: list[Int64] = []


class PACEntry(_Doc):
    """The top-level fields are the paper's bound (Pro2Guard Algorithm 1, line 11)."""

    epsilon: float
    delta: float
    delta_per_state: float
    amplification: float | None  # None: infinite
    satisfied: bool
    chain_states: Int64 | None = None
    states: list[PACStateEntry]
    # Every other key is a per-state bound by its registered name (guard/pac/registry.py), each with the fields
    # of TightPACEntry: `tight`, `empirical` (method "empirical-bernstein"), `joint` ("joint-bernstein"),
    # `outcome` ("first-visit-clopper-pearson"). Files written before a bound existed load without it.
    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, TightPACEntry | None] = Field(init=False)

    @property
    def bounds(self) -> dict[str, TightPACEntry]:
        """The per-state bounds this file holds, by name, in the file's order."""
        return {name: entry for name, entry in (self.__pydantic_extra__ or {}).items() if entry is not None}


class MdpEntry(_Doc):
    """The MDP beside the chain (learning.mdp, guard/mdp.py; docs/model-file.md); absent from older files."""

    classes: list[str]
    action_class: Literal["raw", "verb", "tool"]
    choices: list[Count]  # per state, the offset of its first choice (n + 1 entries)
    choice_class: list[Count]  # per choice, its class's index in `classes`
    indptr: list[Count]  # per choice, the offset of its row (choices + 1 entries)
    indices: list[Count]
    probabilities: list[float]
    counts: list[float]
    formula: str | None = None  # the property the values below are for (None: no advice)
    pmin: list[float] | None = None  # per state
    pmax: list[float] | None = None
    risk: list[float] | None = None  # per choice: Q(s, a) = Σ_j P(s, a, j)·Pmin(j)
    risk_low: list[float] | None = None
    risk_high: list[float] | None = None
    delta: float | None = Field(default=None, gt=0.0, lt=1.0)


class SignatureEntry(_Doc):
    """An Ed25519 signature (guard.signing): these fields only; one the loader does not know would be
    covered by no signature, so it is refused like an unknown field anywhere else (extra="forbid")."""

    algorithm: str
    key_id: str
    signed_at: float | None = None  # absent from signatures of 0.1
    value: str


class ModelDocument(_Doc):
    """The JSON schema of a model file (``schema_version`` 1)."""

    format: Literal["forewarn-model"] = "forewarn-model"
    schema_version: Int64
    spec: str  # the spec's YAML text, parsed again on load
    predicates: list[str]
    monitors: list[str] = []
    states: list[StateEntry]
    # learning.memory.actions: the action classes memory labels index (absent without it)
    memory_actions: list[str] | None = None
    initial: list[tuple[Int64, Int64]]  # (state index, runs that started there)
    alpha: float = Field(ge=0.0)
    invalid_observed: Count = 0
    transitions: TransitionsEntry
    properties: list[PropertyEntry]
    check: CheckEntry
    pac: PACEntry
    intervals: IntervalsEntry | None = None  # None: a model without confidence intervals
    visits: list[Int64] | None = None  # observed departures per state (written since intervals)
    kinds: KindsEntry | None = None  # learning.kinds: the mixture's kinds (absent with one kind)
    mdp: MdpEntry | None = None  # learning.mdp: the MDP over action classes (absent without it)
    provenance: dict[str, Any]
    checksum: str = ""
    signature: SignatureEntry | None = None  # Ed25519 over the canonical body (guard.signing)


@dataclass(frozen=True)
class CheckedProperty:
    """A guarded property and Storm's values for it in every state of the model.

    ``ci_low``/``ci_high``: per state, the property's lowest and highest value over every
    chain inside the transition intervals (its confidence interval); ``None`` without
    intervals, or for a formula Storm cannot check on an interval model.
    """

    definition: PropertyDef
    outcome: CheckOutcome
    ci_low: np.ndarray | None = None
    ci_high: np.ndarray | None = None
    # per state, whether the Markov test rejected there (the interval is then the runs' own); None: not tested
    mismatch: np.ndarray | None = None

    @property
    def name(self) -> str:
        return self.definition.name


class GuardModel:
    """A learned, checked model: what ``forewarn learn`` writes and ``Guard.load`` reads.

    ``dtmc`` is what was checked: the learned chain, or its product with the spec's
    monitors. ``properties`` holds one :class:`CheckedProperty` per guarded property.
    """

    def __init__(self, spec: Spec, dtmc: LearnedDTMC, properties: list[CheckedProperty] | CheckOutcome,
                 pac: PACReport, provenance: dict[str, Any], *, pac_valuations: list[list[bool]] | None = None,
                 intervals: IntervalReport | None = None, kinds: KindMixture | None = None) -> None:
        if isinstance(properties, CheckOutcome):  # one default property
            properties = [CheckedProperty(spec.guard.effective_properties()[0], properties)]
        if not properties:
            raise UsageError("a model needs at least one checked property")
        self.spec = spec
        self.dtmc = dtmc
        self.properties = properties
        self.pac = pac
        self.provenance = provenance
        self.pac_valuations = pac_valuations
        self.intervals = intervals
        self.kinds = kinds  # learning.kinds: the kinds a session weighs by its posterior (guard/mixture_posterior.py)
        self.visits = visits(dtmc)  # observed departures per state (the product's: its chain state's)
        self.signed_at: float | None = None  # the signature's time, as the file says (guard.signing)
        self.mdp: LearnedMDP | None = None  # learning.mdp: the MDP beside the chain (guard/mdp.py)

    @property
    def outcome(self) -> CheckOutcome:
        """The first guarded property's values (the only one unless the spec lists several)."""
        return self.properties[0].outcome

    # -- writing --------------------------------------------------------------------

    def to_document(self) -> dict[str, Any]:
        d, pac = self.dtmc, self.pac
        width = len(d.predicates)
        rows = d.monitor_states.tolist() if d.monitor_states is not None else None
        states: list[dict[str, Any]] = []
        for i, bits in enumerate(d.states):
            if bits == END:
                states.append({"kind": "end"})
                continue
            entry: dict[str, Any] = {"kind": "state", "valuation": [bool(bits >> b & 1) for b in range(width)],
                                     "unsafe": bool(d.unsafe[i])}
            if rows is not None:
                entry["monitors"] = dict(zip(d.monitors, rows[i]))
            if bits >> width:
                entry["memory"] = bits >> width
            states.append(entry)
        body: dict[str, Any] = {
            "format": "forewarn-model",
            "schema_version": SCHEMA_VERSION,
            "spec": self.spec.text or _dump_yaml(self.spec.to_document()),
            "predicates": d.predicates,
            "monitors": d.monitors,
            "states": states,
            **({"memory_actions": list(d.actions)} if d.actions else {}),
            "initial": sorted([int(i), int(n)] for i, n in d.initial.items()),
            "alpha": d.alpha,
            "invalid_observed": d.invalid_observed,
            "transitions": {
                "indptr": d.matrix.indptr.tolist(),
                "indices": d.matrix.indices.tolist(),
                "probabilities": d.matrix.data.tolist(),
                "counts": d.counts.data.tolist(),
            },
            "properties": [{
                "name": p.name,
                "formula": p.outcome.formula,
                "meaning": p.definition.meaning.value,
                "values": p.outcome.values.tolist(),
                "lower": None if p.outcome.lower is None else p.outcome.lower.tolist(),
                "upper": None if p.outcome.upper is None else p.outcome.upper.tolist(),
                "ci_low": None if p.ci_low is None else p.ci_low.tolist(),
                "ci_high": None if p.ci_high is None else p.ci_high.tolist(),
                **({} if p.mismatch is None else {"markov_mismatch": np.flatnonzero(p.mismatch).tolist()}),
            } for p in self.properties],
            "check": {"method": self.outcome.method.value, "precision": self.outcome.precision,
                      "seconds": sum(p.outcome.seconds for p in self.properties),
                      "storm_version": self.provenance.get("storm_version", "unknown")},
            "pac": {
                "epsilon": pac.epsilon, "delta": pac.delta, "delta_per_state": pac.delta_per_state,
                "amplification": pac.amplification if math.isfinite(pac.amplification) else None,
                "satisfied": pac.satisfied,
                "chain_states": None if self.pac_valuations is None else len(self.pac_valuations),
                "states": [{"state": s.state,
                            "valuation": None if self.pac_valuations is None else self.pac_valuations[s.state],
                            "visits": s.visits, "required": s.required,
                            "satisfied": s.satisfied} for s in pac.states],
                **{name: _tight_document(bound) for name, bound in pac.bounds.items()},
            },
            "intervals": None if self.intervals is None else self.intervals.to_document(),
            "visits": self.visits.tolist(),
            **({} if self.kinds is None else {"kinds": kinds_document(self.kinds)}),
            **({} if self.mdp is None else {"mdp": mdp_document(self.mdp)}),
            "provenance": self.provenance,
        }
        body["checksum"] = _checksum(body)
        return body

    def save(self, path: str | Path, *, sign_with: Any = None) -> Path:
        """Write the model atomically (a crash leaves the old file, never half a new one).

        Args:
            sign_with: an Ed25519 private key (:func:`guard.signing.load_private_key`) to sign it with.
        """
        document = self.to_document()
        if sign_with is not None:
            from .signing import sign_document

            document = sign_document(document, sign_with)
        return write_document(path, document)

    # -- reading --------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path, *, trusted_keys: Sequence[Any] | None = None) -> GuardModel:
        """Read and validate a model file.

        Args:
            trusted_keys: public keys (:func:`guard.signing.load_trusted_keys`) one of which must
                have signed the file; None reads ``$FOREWARN_TRUSTED_KEYS`` (unset: no signature needed).

        Raises:
            ModelFileError: the file is missing, not JSON, of another schema, edited by
                hand (checksum), unsigned or badly signed when keys are given, or internally
                inconsistent; the message says which.
        """
        path = Path(path)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ModelFileError(f"{path}: cannot read model file: {exc.strerror}") from exc
        try:
            document = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ModelFileError(f"{path}: not a Forewarn model file (invalid JSON: {exc}); "
                                 "the file may be truncated or corrupt") from exc
        return cls.from_document(document, source=str(path), trusted_keys=trusted_keys)

    @classmethod
    def from_document(cls, document: Any, *, source: str = "<model>", spec: Spec | None = None,
                      trusted_keys: Sequence[Any] | None = None) -> GuardModel:
        """A model from its parsed JSON (``spec``: an already parsed spec to reuse when its text is the same;
        ``trusted_keys``: see :meth:`load`)."""
        if isinstance(document, dict) and document.get("format") == "forewarn-bundle":
            raise ModelFileError(f"{source}: a model bundle, not a single model: load it with "
                                 "guard.load_guard (or BundleGuard.load)")
        if not isinstance(document, dict) or document.get("format") != "forewarn-model":
            raise ModelFileError(f"{source}: not a Forewarn model file (no \"format\": \"forewarn-model\")")
        from .signing import signing_time, trusted_keys_from_env, verify_document

        keys = trusted_keys_from_env() if trusted_keys is None else trusted_keys
        if keys:  # before anything else reads the file: an unsigned one is not parsed further
            verify_document(document, keys, source=source)
        version = document.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ModelFileError(f"{source}: model schema version {version!r} is not supported "
                                 f"(this Forewarn reads version {SCHEMA_VERSION}); re-run 'forewarn learn'")
        try:
            doc = ModelDocument.model_validate(document)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise ModelFileError(f"{source}: field {field}: {first['msg']}") from exc
        try:
            expected = _checksum(document)
        except (TypeError, orjson.JSONEncodeError) as exc:  # a document built in code, not read from JSON
            raise ModelFileError(f"{source}: not serialisable as a model file: {exc}") from exc
        if doc.checksum != expected:
            raise ModelFileError(f"{source}: checksum mismatch: the file was modified after Forewarn wrote it "
                                 "(hand edits are not accepted; re-run 'forewarn learn')")
        if spec is None or spec.text != doc.spec:
            try:
                spec = parse_spec(doc.spec, source=f"{source} (embedded spec)")
            except ForewarnError as exc:
                raise ModelFileError(f"{source}: embedded spec is invalid: {exc}") from exc
        dtmc, properties, pac, provenance, valuations = _restore(doc, spec, source)
        i = doc.intervals
        report = None if i is None else IntervalReport(
            IntervalMethod(i.method.split("+")[0]), i.delta, i.delta_per_entry, i.entries, i.seconds,
            i.outcomes if i.method.endswith("+outcomes") else None,
            i.delta_per_outcome if i.method.endswith("+outcomes") else None, i.markov_level, i.markov_tested)
        tested = i is not None and i.markov_level is not None
        for index, prop in enumerate(properties):
            if prop.mismatch is not None and not tested:
                raise ModelFileError(f"{source}: properties[{index}].markov_mismatch needs intervals.markov_level")
        kinds = None
        if doc.kinds is not None:
            if spec.learning.kinds == 1:
                raise ModelFileError(f"{source}: kinds: the file stores kinds, but the embedded spec's learning.kinds is 1")
            matrix = dtmc.arrays("matrix")
            kinds = read_kinds(doc.kinds, source=source, indptr=np.asarray(matrix.indptr),
                               indices=np.asarray(matrix.indices), absorbing=dtmc.absorbing,
                               properties=len(properties))
        model = cls(spec, dtmc, properties, pac, provenance, pac_valuations=valuations, intervals=report,
                    kinds=kinds)
        model.signed_at = signing_time(document)
        if doc.mdp is not None:
            model.mdp = read_mdp(doc.mdp, dtmc.size, source)
        return model


def _tight_document(tight: TightPAC) -> dict[str, Any]:
    def finite(x: float) -> float | None:
        return x if math.isfinite(x) else None

    return {"method": tight.method, "satisfied": tight.satisfied, "worst_bound": finite(tight.worst_bound),
            "runs_factor": tight.runs_factor, "limiting": tight.limiting,
            "states": [{"state": s.state, "bound": finite(s.bound), "required": s.required, "satisfied": s.satisfied}
                       for s in tight.states],
            "initial_bound": finite(tight.initial_bound), "initial_satisfied": tight.initial_satisfied,
            "initial_runs_factor": tight.initial_runs_factor, "initial_limiting": tight.initial_limiting}


def _tight_entry(tp: TightPACEntry) -> TightPAC:
    return TightPAC(tp.satisfied, math.inf if tp.worst_bound is None else tp.worst_bound, tp.runs_factor,
                    list(tp.limiting), [TightStatePAC(e.state, math.inf if e.bound is None else e.bound,
                                                     e.required, e.satisfied) for e in tp.states],
                    math.inf if tp.initial_bound is None else tp.initial_bound, tp.initial_satisfied,
                    tp.initial_runs_factor, list(tp.initial_limiting), tp.method)


def write_document(path: str | Path, document: dict[str, Any]) -> Path:
    """Write a JSON document whole (a crash leaves the old file, never half a new one; a device such as
    ``/dev/null`` is written in place, see :mod:`guard.output_files`)."""
    path = Path(path)
    data = orjson.dumps(document, option=orjson.OPT_INDENT_2)
    if not is_special(path):
        path.parent.mkdir(parents=True, exist_ok=True)  # the library's save() makes its folder; the CLI checks first
    return write_output(path, data)


def _restore(doc: ModelDocument, spec: Spec, source: str) -> tuple[
        LearnedDTMC, list[CheckedProperty], PACReport, dict[str, Any], list[list[bool]] | None]:
    def bad(message: str) -> ModelFileError:
        return ModelFileError(f"{source}: {message}")

    n = len(doc.states)
    if doc.predicates != spec.predicate_names:
        raise bad(f"predicates {doc.predicates} differ from the embedded spec's {spec.predicate_names}")
    if n < 1 or doc.states[-1].kind != "end" or any(s.kind == "end" for s in doc.states[:-1]):
        raise bad("states must end with exactly one 'end' state")
    width = len(doc.predicates)
    states: list[int] = []
    for i, entry in enumerate(doc.states[:-1]):
        if entry.valuation is None or len(entry.valuation) != width:
            raise bad(f"states[{i}].valuation must list {width} booleans")
        if (entry.memory or 0) << width > INT64_MAX:  # a state's code (memory above the predicates) is an int64
            raise bad(f"states[{i}].memory: {entry.memory} is past what {width} predicates leave of 63 bits")
        states.append(sum(1 << b for b, v in enumerate(entry.valuation) if v) | (entry.memory or 0) << width)
    states.append(END)
    if any(entry.memory for entry in doc.states[:-1]) and not spec.learning.memory.enabled:
        raise bad("states carry memory labels, but the embedded spec's learning.memory is off")
    if doc.memory_actions and not spec.learning.memory.actions:
        raise bad("memory_actions lists action classes, but the embedded spec's learning.memory remembers no actions")
    monitor_names = [m.name for m in spec.monitors]
    if doc.monitors != monitor_names:
        raise bad(f"monitors {doc.monitors} differ from the embedded spec's {monitor_names}")
    monitor_states = None
    if monitor_names:
        rows = []
        for i, entry in enumerate(doc.states[:-1]):
            if entry.monitors is None or sorted(entry.monitors) != sorted(monitor_names):
                raise bad(f"states[{i}].monitors must give a state for each of {monitor_names}")
            rows.append([entry.monitors[name] for name in monitor_names])
        rows.append([0] * len(monitor_names))
        monitor_states = np.array(rows, dtype=np.int64)
        if np.any(monitor_states < -1):
            raise bad("monitor states must be >= -1 (-1 is viol)")
    unsafe = np.array([s.unsafe for s in doc.states], dtype=bool)
    expected = np.zeros(n, dtype=bool)
    if monitor_states is not None:
        expected[:-1] = (monitor_states[:-1] == -1).any(axis=1)
    if spec.unsafe is not None:
        try:  # the embedded spec is data like the rest: a condition that does not compile is the file's fault
            condition = cel.compile(rewrite_matches(spec.unsafe))
            for i, entry in enumerate(doc.states[:-1]):
                context = {**dict(zip(doc.predicates, entry.valuation or [])), FUNCTION: search}
                expected[i] |= bool(condition.execute(context))
        except (ValueError, TypeError, RuntimeError) as exc:
            first = " ".join(str(exc).split())[:200]
            raise bad(f"the embedded spec's unsafe condition {spec.unsafe!r} cannot be evaluated: {first}") from exc
    mismatch = np.flatnonzero(expected != unsafe)
    if mismatch.size:
        raise bad(f"state {int(mismatch[0])} is marked {'unsafe' if unsafe[mismatch[0]] else 'safe'}, but the "
                  "embedded spec's unsafe condition and monitors say otherwise")
    t = doc.transitions
    if len(t.indptr) != n + 1 or t.indptr[0] != 0 or t.indptr[-1] != len(t.indices) \
            or len(t.indices) != len(t.probabilities) or len(t.indices) != len(t.counts) \
            or any(a > b for a, b in zip(t.indptr, t.indptr[1:])):
        raise bad("transitions: indptr/indices/probabilities/counts have inconsistent lengths")
    indices = np.array(t.indices, dtype=np.int64)
    data = np.array(t.probabilities, dtype=float)
    if indices.size and (indices.min() < 0 or indices.max() >= n):
        raise bad(f"transitions: a target index is outside 0..{n - 1}")
    if np.any(~np.isfinite(data)) or np.any(data <= 0) or np.any(data > 1 + _TOLERANCE):
        raise bad("transitions: probabilities must lie in (0, 1]")
    indptr = np.array(t.indptr, dtype=np.int64)
    for i in range(n):
        row = indices[indptr[i]:indptr[i + 1]]
        if row.size == 0:
            raise bad(f"state {i} has no outgoing transition")
        if np.any(np.diff(row) <= 0):
            raise bad(f"state {i}: transition targets must be strictly increasing")
    sums = np.add.reduceat(data, indptr[:-1])
    worst = int(np.argmax(np.abs(sums - 1.0)))
    if abs(sums[worst] - 1.0) > 1e-9:
        raise bad(f"state {worst}: outgoing probabilities sum to {float(sums[worst])!r}, not 1")
    # kept as arrays: scipy is imported only if something reads the matrices (guard/chain.py)
    matrix = CsrArrays(data, indices, indptr, (n, n))
    counted = np.array(t.counts, dtype=float)
    if np.any(~np.isfinite(counted)) or np.any(counted < 0) or np.any(np.add.reduceat(counted, indptr[:-1]) >= 2**53):
        raise bad("transitions: counts must be finite, non-negative and add up to less than 2**53 per state")
    counts = CsrArrays(counted, indices, indptr, (n, n))
    for i in [*np.flatnonzero(unsafe).tolist(), n - 1]:
        if indptr[i + 1] - indptr[i] != 1 or indices[indptr[i]] != i:
            raise bad(f"state {i} is {'end' if i == n - 1 else 'unsafe'} and must be absorbing")
    initial = {}
    for index, count in doc.initial:
        if not 0 <= index < n or count < 0:
            raise bad(f"initial: entry ({index}, {count}) is out of range")
        initial[index] = count
    keys = states[:-1] if monitor_states is None else list(zip(states[:-1], map(tuple, monitor_states.tolist())))
    if len(set(keys)) != n - 1:
        raise bad("two states have the same valuation" + (" and monitor states" if monitor_names else ""))
    dtmc = LearnedDTMC(predicates=list(doc.predicates), states=states, unsafe=unsafe, initial=initial,
                       counts=counts, matrix=matrix, alpha=doc.alpha, invalid_observed=doc.invalid_observed,
                       monitors=monitor_names, monitor_states=monitor_states, actions=tuple(doc.memory_actions or ()))
    definitions = spec.guard.effective_properties()
    if [p.name for p in doc.properties] != [d.name for d in definitions]:
        raise bad(f"cached properties {[p.name for p in doc.properties]} differ from the embedded spec's "
                  f"{[d.name for d in definitions]}")
    properties = []
    for index, (prop, definition) in enumerate(zip(doc.properties, definitions)):
        if prop.formula != definition.query or prop.meaning != definition.meaning:
            raise bad(f"properties[{index}] ({prop.formula}) does not match the embedded spec's {definition.query}")
        values = _vector(prop.values, n, f"properties[{index}].values", bad)
        lower = None if prop.lower is None else _vector(prop.lower, n, f"properties[{index}].lower", bad)
        upper = None if prop.upper is None else _vector(prop.upper, n, f"properties[{index}].upper", bad)
        if lower is not None and upper is not None and (
                np.any(lower > values + _TOLERANCE) or np.any(values > upper + _TOLERANCE)):
            raise bad(f"properties[{index}]: cached values must satisfy lower <= value <= upper")
        outcome = CheckOutcome(prop.formula, values, lower, upper, doc.check.method, doc.check.precision,
                               doc.check.seconds / max(1, len(doc.properties)))
        ci_low, ci_high = _confidence(prop, index, values, n, bad)
        flagged = _mismatch(prop, index, unsafe, ci_low is not None, bad)
        properties.append(CheckedProperty(definition, outcome, ci_low, ci_high, flagged))
    if doc.visits is not None:
        stored = np.array(doc.visits, dtype=np.int64)
        if stored.shape != (n,) or not np.array_equal(stored, visits(dtmc)):
            raise bad("visits must give, per state, the observed departures its transition counts add up to")
    p = doc.pac
    pac = PACReport(epsilon=p.epsilon, delta=p.delta, delta_per_state=p.delta_per_state,
                    amplification=math.inf if p.amplification is None else p.amplification,
                    states=[StatePAC(s.state, s.visits, s.required, s.satisfied) for s in p.states],
                    bounds={name: _tight_entry(entry) for name, entry in p.bounds.items()})
    valuations = None
    if p.chain_states is not None:
        # the learned chain has no more states than its product with the monitors: a bound before allocating
        if not 0 <= p.chain_states <= n:
            raise bad(f"pac.chain_states: {p.chain_states} is not between 0 and the model's {n} states")
        valuations = [[False] * width for _ in range(p.chain_states)]
        for pac_entry in p.states:
            if not 0 <= pac_entry.state < p.chain_states or pac_entry.valuation is None:
                raise bad(f"pac: state {pac_entry.state} is out of range or lacks its valuation")
            valuations[pac_entry.state] = pac_entry.valuation
    chain = n if p.chain_states is None else p.chain_states
    for name, bound_entry in p.bounds.items():  # the states each bound names, as `check` shows them
        for part, named in (("limiting", bound_entry.limiting), ("initial_limiting", bound_entry.initial_limiting),
                            ("states", [e.state for e in bound_entry.states])):
            outside = next((i for i in named if not 0 <= i < chain), None)
            if outside is not None:
                raise bad(f"pac.{name}.{part}: state {outside} is out of range (the chain has {chain} states)")
    return dtmc, properties, pac, dict(doc.provenance), valuations


def _confidence(prop: PropertyEntry, index: int, values: np.ndarray, n: int, bad: Any
                ) -> tuple[np.ndarray | None, np.ndarray | None]:
    """A property's confidence interval per state, checked: in [0, 1], around the point value."""
    if (prop.ci_low is None) != (prop.ci_high is None):
        raise bad(f"properties[{index}] ({prop.name}): give both ci_low and ci_high, or neither")
    if prop.ci_low is None or prop.ci_high is None:
        return None, None
    where = f"properties[{index}] ({prop.name})"
    low = _vector(prop.ci_low, n, f"{where}.ci_low", bad)
    high = _vector(prop.ci_high, n, f"{where}.ci_high", bad)
    outside = np.flatnonzero((low > values + _TOLERANCE) | (values > high + _TOLERANCE))
    if outside.size:
        i = int(outside[0])
        raise bad(f"{where}: state {i}'s confidence interval [{low[i]!r}, {high[i]!r}] does not contain its "
                  f"value {values[i]!r}")
    return low, high


def _mismatch(prop: PropertyEntry, index: int, unsafe: np.ndarray, has_interval: bool, bad: Any
              ) -> np.ndarray | None:
    """The states a property's Markov test flagged, checked: ascending, transient, with an interval."""
    if prop.markov_mismatch is None:
        return None
    where = f"properties[{index}] ({prop.name}).markov_mismatch"
    if not has_interval:
        raise bad(f"{where}: flagged states need the property's confidence intervals")
    flagged = np.array(prop.markov_mismatch, dtype=np.int64)
    n = len(unsafe)
    if flagged.size and (np.any(np.diff(flagged) <= 0) or flagged[0] < 0 or flagged[-1] >= n - 1
                         or np.any(unsafe[flagged])):
        raise bad(f"{where}: must list distinct non-absorbing state indices in ascending order")
    out = np.zeros(n, dtype=bool)
    out[flagged] = True
    return out


def _vector(values: list[float], n: int, name: str, bad: Any) -> np.ndarray:
    array = np.array(values, dtype=float)
    if array.shape != (n,):
        raise bad(f"{name} must have one value per state ({n}), has {array.size}")
    outside = np.flatnonzero(~np.isfinite(array) | (array < -_TOLERANCE) | (array > 1 + _TOLERANCE))
    if outside.size:
        raise bad(f"{name}: probabilities must lie in [0, 1] (state {int(outside[0])} has {array[outside[0]]!r})")
    return array


def _checksum(body: dict[str, Any]) -> str:
    # the signature is outside what it covers, as is the checksum itself
    canonical = orjson.dumps({k: v for k, v in body.items() if k not in ("checksum", "signature")},
                             option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


def _dump_yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False)
