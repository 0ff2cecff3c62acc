"""The model file: one versioned JSON holding everything a guard needs at run time.

It carries the spec, the learned chain (counts and smoothed probabilities), the
values Storm computed for every state with their certified bounds, the PAC report
and provenance. Loading re-checks all of it, and a SHA-256 checksum over the
canonical body turns a hand edit or a truncated copy into a clear error.
"""
from __future__ import annotations

import hashlib
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson
import scipy.sparse as sp
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from guard.errors import ForewarnError, ModelFileError
from guard.learning import END, LearnedDTMC
from guard.pac import PACReport, StatePAC
from guard.spec import Spec, parse_spec
from guard.storm import CheckOutcome, Method

__all__ = ["SCHEMA_VERSION", "GuardModel", "ModelDocument"]

SCHEMA_VERSION = 1
_TOLERANCE = 1e-9


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StateEntry(_Doc):
    kind: Literal["state", "end"]
    valuation: list[bool] | None = None
    unsafe: bool = False


class TransitionsEntry(_Doc):
    indptr: list[int]
    indices: list[int]
    probabilities: list[float]
    counts: list[float]


class PropertyEntry(_Doc):
    name: str
    formula: str
    values: list[float]
    lower: list[float] | None = None
    upper: list[float] | None = None


class CheckEntry(_Doc):
    method: Method
    precision: float
    seconds: float
    storm_version: str


class PACStateEntry(_Doc):
    state: int
    visits: int
    required: int | None
    satisfied: bool


class PACEntry(_Doc):
    epsilon: float
    delta: float
    delta_per_state: float
    amplification: float | None  # None: infinite
    satisfied: bool
    states: list[PACStateEntry]


class ModelDocument(_Doc):
    """The JSON schema of a model file (``schema_version`` 1)."""

    format: Literal["forewarn-model"] = "forewarn-model"
    schema_version: int
    spec: str  # the spec's YAML text, parsed again on load
    predicates: list[str]
    states: list[StateEntry]
    initial: list[tuple[int, int]]  # (state index, runs that started there)
    alpha: float = Field(ge=0.0)
    invalid_observed: int = 0
    transitions: TransitionsEntry
    properties: list[PropertyEntry]
    check: CheckEntry
    pac: PACEntry
    provenance: dict[str, Any]
    checksum: str = ""


class GuardModel:
    """A learned, checked model: what ``forewarn learn`` writes and ``Guard.load`` reads."""

    def __init__(self, spec: Spec, dtmc: LearnedDTMC, outcome: CheckOutcome, pac: PACReport,
                 provenance: dict[str, Any]) -> None:
        self.spec = spec
        self.dtmc = dtmc
        self.outcome = outcome
        self.pac = pac
        self.provenance = provenance

    # -- writing --------------------------------------------------------------------

    def to_document(self) -> dict[str, Any]:
        d, o, pac = self.dtmc, self.outcome, self.pac
        width = len(d.predicates)
        states = [{"kind": "end"} if bits == END else
                  {"kind": "state", "valuation": [bool(bits >> b & 1) for b in range(width)],
                   "unsafe": bool(d.unsafe[i])}
                  for i, bits in enumerate(d.states)]
        body: dict[str, Any] = {
            "format": "forewarn-model",
            "schema_version": SCHEMA_VERSION,
            "spec": self.spec.text or _dump_yaml(self.spec.to_document()),
            "predicates": d.predicates,
            "states": states,
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
                "name": "unsafe",
                "formula": o.formula,
                "values": o.values.tolist(),
                "lower": None if o.lower is None else o.lower.tolist(),
                "upper": None if o.upper is None else o.upper.tolist(),
            }],
            "check": {"method": o.method.value, "precision": o.precision, "seconds": o.seconds,
                      "storm_version": self.provenance.get("storm_version", "unknown")},
            "pac": {
                "epsilon": pac.epsilon, "delta": pac.delta, "delta_per_state": pac.delta_per_state,
                "amplification": pac.amplification if math.isfinite(pac.amplification) else None,
                "satisfied": pac.satisfied,
                "states": [{"state": s.state, "visits": s.visits, "required": s.required,
                            "satisfied": s.satisfied} for s in pac.states],
            },
            "provenance": self.provenance,
        }
        body["checksum"] = _checksum(body)
        return body

    def save(self, path: str | Path) -> Path:
        """Write the model atomically (a crash leaves the old file, never half a new one)."""
        path = Path(path)
        data = orjson.dumps(self.to_document(), option=orjson.OPT_INDENT_2)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path

    # -- reading --------------------------------------------------------------------

    @classmethod
    def load(cls, path: str | Path) -> GuardModel:
        """Read and validate a model file.

        Raises:
            ModelFileError: the file is missing, not JSON, of another schema, edited by
                hand (checksum), or internally inconsistent; the message says which.
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
        return cls.from_document(document, source=str(path))

    @classmethod
    def from_document(cls, document: Any, *, source: str = "<model>") -> GuardModel:
        if not isinstance(document, dict) or document.get("format") != "forewarn-model":
            raise ModelFileError(f"{source}: not a Forewarn model file (no \"format\": \"forewarn-model\")")
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
        expected = _checksum({k: v for k, v in document.items() if k != "checksum"})
        if doc.checksum != expected:
            raise ModelFileError(f"{source}: checksum mismatch: the file was modified after Forewarn wrote it "
                                 "(hand edits are not accepted; re-run 'forewarn learn')")
        try:
            spec = parse_spec(doc.spec, source=f"{source} (embedded spec)")
        except ForewarnError as exc:
            raise ModelFileError(f"{source}: embedded spec is invalid: {exc}") from exc
        return cls(spec, *_restore(doc, spec, source))


def _restore(doc: ModelDocument, spec: Spec, source: str) -> tuple[LearnedDTMC, CheckOutcome, PACReport,
                                                                     dict[str, Any]]:
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
        states.append(sum(1 << b for b, v in enumerate(entry.valuation) if v))
    if len(set(states)) != len(states):
        raise bad("two states have the same valuation")
    states.append(END)
    unsafe = np.array([s.unsafe for s in doc.states], dtype=bool)
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
    matrix = sp.csr_matrix((data, indices, indptr), shape=(n, n))
    counts = sp.csr_matrix((np.array(t.counts, dtype=float), indices, indptr), shape=(n, n))
    for i in [*np.flatnonzero(unsafe).tolist(), n - 1]:
        if indptr[i + 1] - indptr[i] != 1 or indices[indptr[i]] != i:
            raise bad(f"state {i} is {'end' if i == n - 1 else 'unsafe'} and must be absorbing")
    initial = {}
    for index, count in doc.initial:
        if not 0 <= index < n or count < 0:
            raise bad(f"initial: entry ({index}, {count}) is out of range")
        initial[index] = count
    dtmc = LearnedDTMC(predicates=list(doc.predicates), states=states, unsafe=unsafe, initial=initial,
                       counts=counts, matrix=matrix, alpha=doc.alpha, invalid_observed=doc.invalid_observed)
    if len(doc.properties) != 1:
        raise bad("expected exactly one cached property")
    prop = doc.properties[0]
    values = _vector(prop.values, n, "values", bad)
    lower = None if prop.lower is None else _vector(prop.lower, n, "lower", bad)
    upper = None if prop.upper is None else _vector(prop.upper, n, "upper", bad)
    if lower is not None and upper is not None and (
            np.any(lower > values + _TOLERANCE) or np.any(values > upper + _TOLERANCE)):
        raise bad("cached values must satisfy lower <= value <= upper")
    outcome = CheckOutcome(prop.formula, values, lower, upper, doc.check.method, doc.check.precision,
                           doc.check.seconds)
    p = doc.pac
    pac = PACReport(epsilon=p.epsilon, delta=p.delta, delta_per_state=p.delta_per_state,
                    amplification=math.inf if p.amplification is None else p.amplification,
                    states=[StatePAC(s.state, s.visits, s.required, s.satisfied) for s in p.states])
    return dtmc, outcome, pac, dict(doc.provenance)


def _vector(values: list[float], n: int, name: str, bad: Any) -> np.ndarray:
    array = np.array(values, dtype=float)
    if array.shape != (n,):
        raise bad(f"properties[0].{name} must have one value per state ({n}), has {array.size}")
    if np.any(~np.isfinite(array)) or np.any(array < -_TOLERANCE) or np.any(array > 1 + _TOLERANCE):
        raise bad(f"properties[0].{name}: probabilities must lie in [0, 1]")
    return array


def _checksum(body: dict[str, Any]) -> str:
    canonical = orjson.dumps({k: v for k, v in body.items() if k != "checksum"}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


def _dump_yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False)
