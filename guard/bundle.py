"""Model bundles: one model per group of runs (``meta.KEY``) and a pooled model for the rest.

``forewarn learn --group-by meta.task`` reads every run once and counts it twice: into
the pooled counts and into its group's. A group with at least ``min_group_runs`` runs
gets a model of its own, learned and checked exactly as a single model is
(:func:`guard.pipeline.model_from_counts`); the pooled model is learned from all runs.
At run time (:mod:`guard.bundle_guard`) a session takes its group's model, or the
pooled one when its metadata has no such key or its group has no model.

The file is one JSON document (docs/model-file.md): the spec once, the pooled model
and every member as model documents without their spec (each keeps its own checksum,
computed with the spec), and a checksum over the whole.
"""
from __future__ import annotations

import gc
import hashlib
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ForewarnError, InputError, ModelFileError, TraceError
from ._version import __version__
from .memory import run_actions
from .model import GuardModel, SignatureEntry, write_document
from .predicates import PythonPredicate
from .spec import Spec, parse_spec
from .traces import Run, abstract_run

if TYPE_CHECKING:
    from .learning import TransitionCounts

# Learning a bundle imports the learner (scipy, Storm) in its functions: loading one and deciding do not.

BUNDLE_SCHEMA_VERSION = 1
DEFAULT_MIN_GROUP_RUNS = 10
POOLED = "pooled"  # the pooled member's name in decisions and on the command line


def group_path(group_by: str, option: str = "--group-by") -> tuple[str, ...]:
    """``meta.task`` → ``("task",)``; the key may be nested (``meta.task.kind``).

    Raises:
        ForewarnError: the path does not start with ``meta.`` or has an empty part (named as ``option``).
    """
    parts = group_by.split(".")
    if len(parts) < 2 or parts[0] != "meta" or not all(p.strip() for p in parts[1:]):
        raise InputError(f"{option} {group_by!r}: expected a path into the runs' metadata such as "
                            "'meta.task' (it must start with 'meta.')")
    return tuple(parts[1:])


def group_value(meta: Mapping[str, Any] | None, path: Sequence[str]) -> str | None:
    """The group of a run with this metadata: the value at ``path`` as text, ``None`` when absent.

    A string is its own text; any other JSON value its canonical JSON (``3``, ``true``).
    """
    node: Any = meta
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    if node is None:
        return None
    return node if isinstance(node, str) else orjson.dumps(node, option=orjson.OPT_SORT_KEYS).decode()


@dataclass
class GuardBundle:
    """A pooled model and one model per group with enough runs, all of one spec."""

    spec: Spec
    group_by: str
    min_group_runs: int
    pooled: GuardModel
    members: dict[str, GuardModel]
    group_runs: dict[str, int]  # runs per group seen in learning, with or without a model
    runs_without_group: int = 0
    provenance: dict[str, Any] = field(default_factory=dict)
    signed_at: float | None = None  # the signature's time, as the file says (guard.signing)

    def member(self, name: str) -> GuardModel:
        """A member by name: a group's value, or ``pooled``.

        Raises:
            ForewarnError: no such member (the message lists a few that exist).
        """
        if name == POOLED:
            return self.pooled
        model = self.members.get(name)
        if model is None:
            runs = self.group_runs.get(name)
            why = (f"group {name!r} had {runs} runs, fewer than {self.min_group_runs}" if runs
                   else f"no group {name!r} in this bundle")
            shown = ", ".join(repr(g) for g in sorted(self.members)[:10]) or "none"
            raise InputError(f"{why}; members: {POOLED!r} and groups {shown}"
                                + (" …" if len(self.members) > 10 else ""))
        return model

    def names(self) -> list[str]:
        """Member names, pooled first."""
        return [POOLED, *sorted(self.members)]

    # -- the file -------------------------------------------------------------------

    def to_document(self) -> dict[str, Any]:
        spec_text = self.pooled.to_document()["spec"]

        def member(model: GuardModel) -> dict[str, Any]:
            document = model.to_document()
            del document["spec"]  # shared: stored once, put back (and checked) on load
            return document

        body: dict[str, Any] = {
            "format": "forewarn-bundle",
            "schema_version": BUNDLE_SCHEMA_VERSION,
            "group_by": self.group_by,
            "min_group_runs": self.min_group_runs,
            "spec": spec_text,
            "groups": [{"group": g, "runs": n, "model": g in self.members} for g, n in sorted(self.group_runs.items())],
            "runs_without_group": self.runs_without_group,
            "provenance": self.provenance,
            "pooled": member(self.pooled),
            "members": {g: member(m) for g, m in sorted(self.members.items())},
        }
        body["checksum"] = _checksum(body)
        return body

    def save(self, path: str | Path, *, sign_with: Any = None) -> Path:
        """Write the bundle atomically, as one file (signed with ``sign_with``, an Ed25519 private key)."""
        document = self.to_document()
        if sign_with is not None:
            from .signing import sign_document

            document = sign_document(document, sign_with)
        return write_document(path, document)

    @classmethod
    def from_document(cls, document: Any, *, source: str = "<bundle>",
                      trusted_keys: Sequence[Any] | None = None) -> GuardBundle:
        """Validate a parsed bundle file; every member is validated as a model file is.

        Raises:
            ModelFileError: naming the bundle, and the member when one is at fault.
        """
        if not isinstance(document, dict) or document.get("format") != "forewarn-bundle":
            raise ModelFileError(f"{source}: not a Forewarn model bundle (no \"format\": \"forewarn-bundle\")")
        from .signing import signing_time, trusted_keys_from_env, verify_document

        keys = trusted_keys_from_env() if trusted_keys is None else trusted_keys
        if keys:  # one signature covers the bundle and every member in it
            verify_document(document, keys, source=source)
        if document.get("schema_version") != BUNDLE_SCHEMA_VERSION:
            raise ModelFileError(f"{source}: bundle schema version {document.get('schema_version')!r} is not "
                                 f"supported (this Forewarn reads version {BUNDLE_SCHEMA_VERSION}); "
                                 "re-run 'forewarn learn --group-by ...'")
        try:
            doc = _BundleDocument.model_validate(document)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise ModelFileError(f"{source}: field {'.'.join(str(p) for p in first['loc'])}: {first['msg']}") from exc
        if doc.checksum != _checksum(document):
            raise ModelFileError(f"{source}: checksum mismatch: the bundle was modified after Forewarn wrote it "
                                 "(hand edits are not accepted; re-run 'forewarn learn --group-by ...')")
        try:
            group_path(doc.group_by)
            spec = parse_spec(doc.spec, source=f"{source} (embedded spec)")
        except ForewarnError as exc:
            raise ModelFileError(f"{source}: {exc}") from exc
        try:
            check_member_thresholds(spec, doc.group_by)
        except ForewarnError as exc:
            raise ModelFileError(f"{source}: {exc}") from exc
        with_model = {g.group for g in doc.groups if g.model}
        if with_model != set(doc.members):
            raise ModelFileError(f"{source}: 'groups' and 'members' disagree on which groups have a model")

        def member(name: str, body: dict[str, Any]) -> GuardModel:
            if "spec" in body:
                raise ModelFileError(f"{source}: member {name!r}: a member carries no spec of its own")
            return GuardModel.from_document({**body, "spec": doc.spec}, source=f"{source} member {name!r}",
                                            spec=spec, trusted_keys=())  # the bundle's signature covers it

        pooled = member(POOLED, doc.pooled)
        members = {name: member(name, body) for name, body in doc.members.items()}
        return cls(spec, doc.group_by, doc.min_group_runs, pooled, members,
                   {g.group: g.runs for g in doc.groups}, doc.runs_without_group, dict(doc.provenance),
                   signing_time(document))

    @classmethod
    def load(cls, path: str | Path) -> GuardBundle:
        loaded = load_model_or_bundle(path)
        if not isinstance(loaded, GuardBundle):
            raise ModelFileError(f"{path}: a single model, not a bundle (learn one with --group-by meta.KEY)")
        return loaded


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group: str
    runs: int = Field(ge=0, le=2**63 - 1)
    model: bool


class _BundleDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: Literal["forewarn-bundle"]
    schema_version: int = Field(ge=-(2**63), le=2**63 - 1)
    group_by: str
    min_group_runs: int = Field(ge=1, le=2**63 - 1)
    spec: str
    groups: list[_Group]
    runs_without_group: int = Field(ge=0, le=2**63 - 1)
    provenance: dict[str, Any]
    pooled: dict[str, Any]
    members: dict[str, dict[str, Any]]
    checksum: str
    signature: SignatureEntry | None = None  # Ed25519 over the whole bundle (guard.signing)


def _checksum(body: dict[str, Any]) -> str:
    canonical = orjson.dumps({k: v for k, v in body.items() if k not in ("checksum", "signature")},
                             option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(canonical).hexdigest()


def check_member_thresholds(spec: Spec, group_by: str) -> None:
    """The spec's ``guard.member_thresholds`` (if any) are for bundles grouped by ``group_by``.

    Raises:
        SpecError: they name another grouping key.
    """
    own = spec.guard.member_thresholds
    if own is not None and own.by != group_by:
        raise spec.error(f"guard.member_thresholds.by: the thresholds are for members by {own.by}, but the bundle "
                         f"is grouped by {group_by}; tune again with --bundle-by {group_by} (or learn with "
                         f"--group-by {own.by})", "guard", "member_thresholds", "by")


def load_model_or_bundle(path: str | Path, *, trusted_keys: Sequence[Any] | None = None) -> GuardModel | GuardBundle:
    """Read a model file or a bundle file, whichever it is (by its ``format``); ``trusted_keys`` as for
    :meth:`GuardModel.load`."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot read model file: {exc.strerror}") from exc
    return parse_model_or_bundle(raw, str(path), trusted_keys=trusted_keys)


def parse_model_or_bundle(raw: bytes, source: str, *,
                          trusted_keys: Sequence[Any] | None = None) -> GuardModel | GuardBundle:
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ModelFileError(f"{source}: not a Forewarn model file (invalid JSON: {exc}); "
                             "the file may be truncated or corrupt") from exc
    if isinstance(document, dict) and document.get("format") == "forewarn-bundle":
        return GuardBundle.from_document(document, source=source, trusted_keys=trusted_keys)
    return GuardModel.from_document(document, source=source, trusted_keys=trusted_keys)


# -- learning -------------------------------------------------------------------------

def learn_bundle(traces: Sequence[str | Path], spec: Spec, *, group_by: str,
                 min_group_runs: int = DEFAULT_MIN_GROUP_RUNS, period: float | None = None,
                 on_error: str = "stop", summary: Any = None, **options: Any) -> GuardBundle:
    """Learn a bundle from trace files, folders, globs or Parquet (streamed once; see
    :func:`learn_bundle_from_runs`).

    ``on_error`` and ``summary`` as for :func:`guard.pipeline.learn_model`.
    """
    from .pipeline import _provenance, runs_to_learn
    from .trace_files import list_trace_files

    files = list_trace_files(traces)
    inputs = [_provenance(f) for f in files]
    digests = [hashlib.sha256() for _ in files]
    runs = runs_to_learn(files, spec, period=period, digests=digests, on_error=on_error, summary=summary,
                         python_predicates=options.get("python_predicates"))
    bundle = learn_bundle_from_runs(runs, spec, group_by=group_by, min_group_runs=min_group_runs, inputs=inputs,
                                    **options)
    for entry, digest in zip(inputs, digests):  # every member's provenance holds these same entries
        entry["sha256"] = digest.hexdigest()
    if period is not None:
        for model in [bundle.pooled, *bundle.members.values()]:
            model.provenance["period_seconds"] = period
        bundle.provenance["period_seconds"] = period
    return bundle


def learn_bundle_from_runs(runs: Iterable[Run], spec: Spec, *, group_by: str,
                           min_group_runs: int = DEFAULT_MIN_GROUP_RUNS,
                           python_predicates: Mapping[str, PythonPredicate] | None = None,
                           inputs: list[dict[str, Any]] | None = None,
                           on_run: Callable[[int], None] | None = None, **options: Any) -> GuardBundle:
    """Count every run into the pooled counts and its group's, then learn and check each model.

    Args:
        group_by: ``meta.KEY``: the runs' metadata key whose value names their group.
        min_group_runs: a group needs this many runs for a model of its own.
        options: for :func:`guard.pipeline.model_from_counts` (alpha, method, precision, ε, δ, …).

    Raises:
        ForewarnError: a bad ``group_by`` or ``min_group_runs``, or no run with that key.
        TraceError: no runs, or a run the predicates cannot read.
    """
    path = group_path(group_by)
    if isinstance(min_group_runs, bool) or not isinstance(min_group_runs, int) or min_group_runs < 1:
        raise InputError(f"--min-group-runs {min_group_runs!r}: expected a whole number of runs, at least 1")
    from .learning import TransitionCounts
    from .pipeline import counting_plan, prepare

    predicates, monitors = prepare(spec, python_predicates)
    started = time.perf_counter()
    memory, pooled_paths = counting_plan(spec, predicates)
    group_paths: dict[str, Counter[tuple[int, ...]]] = {}
    pooled = TransitionCounts()
    groups: dict[str, TransitionCounts] = {}
    keys_seen: set[str] = set()
    without = 0
    was_enabled = gc.isenabled()
    gc.disable()  # as count_transitions does: parsed JSON holds no cycles
    try:
        for n, run in enumerate(runs, start=1):
            abstract = abstract_run(run, predicates)
            if memory is not None:  # chain states: the abstract state with its memory label
                abstract = memory.encode_run(abstract, run_actions(run.steps))
            pooled.add(abstract, predicates)
            if pooled_paths is not None:
                pooled_paths[tuple(abstract)] += 1
            group = group_value(run.meta, path)
            if group is None:
                without += 1
                if len(keys_seen) < 50:
                    keys_seen.update(run.meta)
            else:
                groups.setdefault(group, TransitionCounts()).add(abstract, predicates)
                if pooled_paths is not None:
                    group_paths.setdefault(group, Counter())[tuple(abstract)] += 1
            if on_run is not None:
                on_run(n)
    finally:
        if was_enabled:
            gc.enable()
    return bundle_from_counts(pooled, groups, without, keys_seen, spec, predicates, monitors, group_by=group_by,
                              min_group_runs=min_group_runs, inputs=inputs,
                              learn_seconds=time.perf_counter() - started, pooled_paths=pooled_paths,
                              group_paths=group_paths, **options)


def bundle_from_counts(pooled: TransitionCounts, groups: Mapping[str, TransitionCounts], without: int,
                       keys_seen: set[str], spec: Spec, predicates: Any, monitors: Any, *, group_by: str,
                       min_group_runs: int, inputs: list[dict[str, Any]] | None, learn_seconds: float,
                       pooled_paths: Counter[tuple[int, ...]] | None = None,
                       group_paths: Mapping[str, Counter[tuple[int, ...]]] | None = None,
                       **options: Any) -> GuardBundle:
    """Learn and check the pooled model and each large enough group's, from counts (any engine counts).

    ``pooled_paths`` and ``group_paths`` are the distinct counted runs, for the learning
    levers that need them (guard/pipeline.py, :func:`model_from_counts`).
    """
    from .pipeline import model_from_counts

    if pooled.runs == 0:
        raise TraceError("no runs to learn from: the trace input is empty")
    check_member_thresholds(spec, group_by)
    if not groups:
        seen = ", ".join(f"meta.{k}" for k in sorted(keys_seen)[:8]) or "none"
        raise InputError(f"--group-by {group_by}: none of the {pooled.runs} runs has it in its metadata "
                            f"(keys the runs have: {seen})")

    def model(counts: TransitionCounts, paths: Counter[tuple[int, ...]] | None) -> GuardModel:
        return model_from_counts(counts, spec, predicates, monitors, inputs=inputs, learn_seconds=learn_seconds,
                                 paths=paths, **options)

    members = {g: model(c, None if pooled_paths is None or group_paths is None else group_paths[g])
               for g, c in sorted(groups.items()) if c.runs >= min_group_runs}
    provenance = {"inputs": inputs or [], "runs": pooled.runs, "created":
                  datetime.now(UTC).isoformat(timespec="seconds"), "forewarn_version": __version__}
    return GuardBundle(spec, group_by, min_group_runs, model(pooled, pooled_paths), members,
                       {g: c.runs for g, c in groups.items()}, without, provenance)
