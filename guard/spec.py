"""The spec: which predicates abstract a state, what is unsafe, how to learn and act.

A spec is YAML (see the contract in ``docs/spec.md``). Every error it can raise names
the file and the line of the offending entry, because a spec is written by hand.
"""
from __future__ import annotations

import itertools
import json
import keyword
import re
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from ..errors import SpecError
from .trust import check_name

__all__ = [
    "Action",
    "PredicateDef",
    "ValidTransitions",
    "Thresholds",
    "Trigger",
    "GuardSettings",
    "MemberSettings",
    "MemberThresholds",
    "Meaning",
    "MonitorDef",
    "PropertyDef",
    "LearningSettings",
    "MemorySettings",
    "Spec",
    "load_spec",
    "parse_spec",
]

RESERVED_NAMES = frozenset({"unsafe", "end", "init", "state", "deadlock", "true", "false", "null"})
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class Action(str, Enum):
    """What the guard does at a step, from least to most severe."""

    ALLOW = "allow"
    REFLECT = "reflect"
    ASK_HUMAN = "ask_human"
    STOP = "stop"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]


_SEVERITY = {Action.ALLOW: 0, Action.REFLECT: 1, Action.ASK_HUMAN: 2, Action.STOP: 3}


class _Located(ValueError):
    """A validation error that knows the spec entry it is about (pydantic reports a
    model-level check at the root, which would point every such error at line 1)."""

    def __init__(self, message: str, *loc: Any) -> None:
        super().__init__(message)
        self.loc = loc


# The validators below raise plain ValueError, as pydantic requires: pydantic gathers them into a
# ValidationError, which parse_spec turns into a SpecError naming the file and line.
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PredicateDef(_Strict):
    """One predicate: a CEL expression over ``state``, ``meta`` and ``action`` (guard/actions.py), or the
    name of a registered Python function."""

    cel: str | None = None
    python: str | None = None
    description: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> PredicateDef:
        if (self.cel is None) == (self.python is None):
            raise ValueError("a predicate needs exactly one of 'cel' (an expression) or 'python' (a registered name)")
        if self.python is not None:
            check_name(self.python)  # a name, never an import path (guard.trust)
        return self


class ValidTransitions(_Strict):
    """Which abstract transitions are possible at all (smoothing adds mass only to these)."""

    max_changed_predicates: int | None = Field(default=None, ge=1)
    irreversible: tuple[str, ...] = ()
    function: str | None = None  # a registered name (guard.trust) of a rule taking (src, dst) tuples of bools

    @field_validator("function")
    @classmethod
    def _registered_name(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "transition rule")


class Thresholds(_Strict):
    """Act when p_safe < θ; the most severe action whose θ is exceeded wins."""

    reflect: float | None = Field(default=None, ge=0.0, le=1.0)
    ask_human: float | None = Field(default=None, ge=0.0, le=1.0)
    stop: float | None = Field(default=None, ge=0.0, le=1.0)

    def disorder(self) -> str | None:
        """Why the set thresholds break reflect ≥ ask_human ≥ stop (a more severe action acts at a lower
        p_safe), or None. A spec file must keep the order (:func:`parse_spec`); a session's overrides may
        deliberately ask before they reflect."""
        set_ = [(a, getattr(self, a)) for a in ("reflect", "ask_human", "stop") if getattr(self, a) is not None]
        for (less, low), (more, high) in itertools.pairwise(set_):
            if low < high:
                return (f"{less} {low:g} is below {more} {high:g}; thresholds must keep reflect ≥ ask_human ≥ "
                        "stop (a more severe action acts at a lower p_safe)")
        return None

    def items(self) -> list[tuple[Action, float]]:
        """Configured (action, θ) pairs, most severe first."""
        pairs = [(Action.STOP, self.stop), (Action.ASK_HUMAN, self.ask_human), (Action.REFLECT, self.reflect)]
        return [(action, theta) for action, theta in pairs if theta is not None]


class Trigger(str, Enum):
    """What a threshold is applied to (docs/spec.md, "Triggers")."""

    LEVEL = "level"  # the risk of the state a step leads to
    INCREASE = "increase"  # the same, but only when the step raises the run's current risk


class Meaning(str, Enum):
    """Whether a property's probability is that of the bad thing or of the good thing."""

    VIOLATION = "violation"  # p_unsafe = P  (e.g. F "unsafe")
    SATISFACTION = "satisfaction"  # p_safe = P  (e.g. G !"unsafe", !"unsafe" U "goal")


def _path_formula_only(value: str) -> str:
    if re.match(r"^\s*P\s*(=\?|[<>]=?)", value):
        raise ValueError(f"give the path formula only (e.g. 'F \"unsafe\"'), not {value!r}: "
                         "Forewarn asks Storm for its probability")
    return value


class PropertyDef(_Strict):
    """A guarded property: a PCTL/LTL path formula over the model's labels (Storm parses it)."""

    name: str
    formula: str
    meaning: Meaning = Meaning.VIOLATION
    thresholds: Thresholds | None = None  # None: the guard's thresholds
    description: str | None = None  # the rule in plain words, for the people who approve (no CEL, no PCTL)

    @field_validator("name")
    @classmethod
    def _ident(cls, value: str) -> str:
        if not _IDENT.match(value):
            raise ValueError(f"property name {value!r} must be an identifier")
        return value

    @field_validator("formula")
    @classmethod
    def _path_formula(cls, value: str) -> str:
        return _path_formula_only(value)

    @property
    def query(self) -> str:
        """The Storm query, ``P=? [formula]``."""
        return f"P=? [{self.formula}]"


class MemberSettings(_Strict):
    """One bundle member's own policy settings (``forewarn tune --bundle-by`` writes them)."""

    thresholds: Thresholds  # the actions given replace guard.thresholds' for this member
    min_increase: float | None = Field(default=None, ge=0.0, le=1.0)  # None: guard.min_increase

    def merged(self, thresholds: Thresholds) -> Thresholds:
        """``thresholds`` (the guard's) with the actions this member sets replaced."""
        given = {a: getattr(self.thresholds, a) for a in self.thresholds.model_fields_set}
        return Thresholds.model_validate(thresholds.model_dump() | given)


class MemberThresholds(_Strict):
    """Per-member thresholds of a bundle grouped by ``by`` (docs/spec.md, "Per-member thresholds")."""

    by: str  # meta.KEY: the bundle's grouping key, as `forewarn learn --group-by` takes it
    groups: dict[str, MemberSettings]

    @field_validator("by")
    @classmethod
    def _meta_path(cls, value: str) -> str:
        parts = value.split(".")
        if len(parts) < 2 or parts[0] != "meta" or not all(p.strip() for p in parts[1:]):
            raise ValueError(f"by {value!r}: expected the bundle's grouping key such as 'meta.task'")
        return value

    @field_validator("groups", mode="before")
    @classmethod
    def _text_keys(cls, value: Any) -> Any:
        # a group's value is its text (guard.bundle.group_value): `3:` in YAML is the group "3"
        if isinstance(value, dict):
            return {k if isinstance(k, str) else json.dumps(k, sort_keys=True): v
                    for k, v in value.items()}
        return value


class GuardSettings(_Strict):
    horizon: int | None = Field(default=None, ge=0)
    property: str | None = None  # one path formula; default F "unsafe" (F<=horizon "unsafe")
    properties: tuple[PropertyDef, ...] = ()
    thresholds: Thresholds = Thresholds(reflect=0.9, ask_human=0.5, stop=0.2)
    unseen_state: Action = Action.ASK_HUMAN
    act_on: Literal["point", "upper"] = "point"  # the risk acted on: p_unsafe, or its interval's ci_high
    min_visits: int = Field(default=0, ge=0)  # a state seen fewer times is treated as unseen
    # an unseen abstract state takes the risk of the seen ones at most this many predicates away (0: never)
    near_states: int = Field(default=1, ge=0, le=64)
    # None: not set — a Guard uses level, the LangChain middleware increase (docs/langchain.md)
    trigger: Trigger | None = None
    min_increase: float = Field(default=0.0, ge=0.0, le=1.0)
    # per bundle member: thresholds (and min_increase) of its own; None: every member uses the above
    member_thresholds: MemberThresholds | None = None
    # shield (docs/shield.md): a proposed call is blocked when its action class's risk from the run's state is
    # at least shield_theta, let through otherwise; the run is stopped where no class is under it
    enforcement: Literal["thresholds", "shield"] = "thresholds"
    shield_theta: float = Field(default=0.5, gt=0.0, le=1.0)

    @field_validator("property")
    @classmethod
    def _path_formula(cls, value: str | None) -> str | None:
        return None if value is None else _path_formula_only(value)

    @model_validator(mode="after")
    def _one_way(self) -> GuardSettings:
        if self.properties and (self.property is not None or self.horizon is not None):
            raise ValueError("give either 'properties' or 'property'/'horizon', not both")
        if self.property is not None and self.horizon is not None:
            raise ValueError("'horizon' applies to the default property; write the bound into 'property'")
        if self.trigger is Trigger.LEVEL and self.min_increase:
            raise _Located("'min_increase' applies to 'trigger: increase', not 'level'", "guard", "min_increase")
        for group, member in (self.member_thresholds.groups if self.member_thresholds else {}).items():
            if self.trigger is Trigger.LEVEL and member.min_increase:
                raise _Located("'min_increase' applies to 'trigger: increase', not 'level'", "guard",
                               "member_thresholds", "groups", group, "min_increase")
        names = [p.name for p in self.properties]
        if len(set(names)) != len(names):
            raise ValueError(f"property names must be unique, got {names}")
        return self

    def effective_properties(self) -> list[PropertyDef]:
        """The properties to guard: the listed ones, or the single default one."""
        if self.properties:
            return list(self.properties)
        if self.property is not None:
            formula = self.property
        else:
            formula = 'F "unsafe"' if self.horizon is None else f'F<={self.horizon} "unsafe"'
        return [PropertyDef(name="unsafe", formula=formula)]


MonitorKind = Literal["bounded_response", "absence", "universality", "existence", "precedence", "response"]


class MonitorDef(_Strict):
    """A timing rule; see docs/monitors.md for the exact finite-run meaning of each kind."""

    name: str
    kind: MonitorKind
    trigger: str | None = None  # bounded_response
    response: str | None = None  # bounded_response
    within: int | None = Field(default=None, ge=0)
    restart: bool = False  # bounded_response: a new trigger while waiting restarts the count
    p: str | None = None  # patterns: the main condition
    s: str | None = None  # precedence: the enabling condition; response: the trigger
    scope: Literal["globally", "before", "after", "between"] = "globally"
    q: str | None = None  # scope opener (after, between)
    r: str | None = None  # scope closer (before, between)

    @field_validator("name")
    @classmethod
    def _ident(cls, value: str) -> str:
        if not _IDENT.match(value):
            raise ValueError(f"monitor name {value!r} must be an identifier")
        return value

    @model_validator(mode="after")
    def _fields_for_kind(self) -> MonitorDef:
        if self.kind == "bounded_response":
            missing = [f for f in ("trigger", "response", "within") if getattr(self, f) is None]
            if missing:
                raise ValueError(f"bounded_response needs {missing}")
            if any(getattr(self, f) is not None for f in ("p", "s", "q", "r")) or self.scope != "globally":
                raise ValueError("bounded_response takes trigger, response, within and restart; for a scoped "
                                 "rule use kind: response with p, s and scope")
            return self
        if self.p is None:
            raise ValueError(f"{self.kind} needs 'p'")
        if self.trigger is not None or self.response is not None or self.restart:
            raise ValueError(f"{self.kind} takes p (and s), not trigger/response/restart")
        return self


def _number_or_word(value: Any, words: tuple[str, ...], *, strict: bool = False) -> float | str:
    """A learning setting that is a number in [0, 1e6] (> 0 when ``strict``) or one of ``words``."""
    bound = "(0, 1e6]" if strict else "[0, 1e6]"
    expected = f"expected a number in {bound}" + "".join(f" or {w!r}" for w in words)
    if isinstance(value, str) and value in words:
        return value
    if value is False and "off" in words:  # YAML reads a bare `off` as false
        return "off"
    if isinstance(value, str):  # YAML 1.1 reads 1e-3 (no dot) as text
        try:
            value = float(value)
        except ValueError:
            raise ValueError(f"{expected}, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{expected}, got {value!r}")
    if not (value > 0 if strict else value >= 0) or not value <= 1e6:  # also rejects NaN and infinity
        raise ValueError(f"{expected}, got {value!r}")
    return float(value)


MAX_ACTIONS = 8  # learning.memory.actions: K


class MemorySettings(_Strict):
    """A little history in the learned state (docs/method.md, "Memory")."""

    dwell: int | None = Field(default=None, ge=2, le=4095)  # steps the abstract state has held, log-bucketed up to this
    previous: bool = False  # the last different abstract state
    actions: int = 0  # the classes of the last K actions (guard/actions.py); 0..MAX_ACTIONS (_count)
    action_class: Literal["raw", "verb", "tool"] = "raw"  # what of an action is remembered
    backoff: float | Literal["auto"] = "auto"  # prior strength towards the memoryless chain's row

    @field_validator("backoff", mode="before")
    @classmethod
    def _positive(cls, value: Any) -> Any:
        return _number_or_word(value, ("auto",), strict=True)

    @field_validator("actions", mode="before")
    @classmethod
    def _count(cls, value: Any) -> Any:
        # `actions: true` would otherwise remember one action: a bool is an int to pydantic, as text is
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_ACTIONS:
            raise ValueError(f"expected a whole number of actions from 0 to {MAX_ACTIONS}, got {value!r}")
        return value

    @property
    def enabled(self) -> bool:
        return self.dwell is not None or self.previous or self.actions > 0


ALPHA_AUTO_REMOVED = ("'auto' was removed: choosing α by cross-validation moved the Brier score by at most "
                      "0.0003 over the shipped defaults on every shipped domain (bench/estimation_levers.py); "
                      "give a number (the default is 0.1)")


MAX_KINDS = 8  # learning.kinds: N (auto tries 1 to guard.mixture.MAX_KINDS)


class LearningSettings(_Strict):
    """How counts become a chain and a chain's values become the stored risk (docs/method.md, "Levers")."""

    alpha: float = 0.1  # a number in [0, 1e6]
    epsilon: float = Field(default=0.05, ge=1e-9, lt=1.0, allow_inf_nan=False)
    delta: float = Field(default=0.05, ge=1e-9, lt=1.0, allow_inf_nan=False)
    intervals: Literal["clopper_pearson", "hoeffding", "none"] = "clopper_pearson"
    # which successors a state may have: every state the rules allow, or only those observed from it
    structure: Literal["valid", "observed"] = "valid"
    # blend towards the observed outcome frequency with strength κ: a number >= 0, auto (CV) or off
    shrink: float | Literal["auto", "off"] = "auto"
    memory: MemorySettings = MemorySettings()
    # latent run kinds: a mixture of this many chains (1: the single chain), or chosen on held-out runs
    kinds: int | Literal["auto"] = 1
    # an MDP over action classes beside the chain (guard/mdp.py, docs/shield.md)
    mdp: bool = False

    @field_validator("kinds", mode="before")
    @classmethod
    def _kinds(cls, value: Any) -> Any:
        if value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_KINDS:
            raise ValueError(f"expected 'auto' or a whole number of kinds from 1 to {MAX_KINDS}, got {value!r}")
        return value

    @model_validator(mode="after")
    def _kinds_without_memory(self) -> LearningSettings:
        if self.kinds != 1 and self.memory.enabled:
            raise ValueError("kinds mixes memoryless chains: turn learning.memory off, or set kinds: 1")
        return self

    @field_validator("memory", mode="before")
    @classmethod
    def _memory_off(cls, value: Any) -> Any:
        if value is False or value == "off":  # `memory: off` (YAML reads a bare off as false)
            return {"dwell": None, "previous": False, "actions": 0}
        return value

    @field_validator("alpha", mode="before")
    @classmethod
    def _alpha(cls, value: Any) -> Any:
        if value == "auto":
            raise ValueError(ALPHA_AUTO_REMOVED)
        return _number_or_word(value, ())

    @field_validator("shrink", mode="before")
    @classmethod
    def _shrink(cls, value: Any) -> Any:
        return _number_or_word(value, ("auto", "off"))


class Spec(_Strict):
    """A parsed, validated spec. Predicate order is the bit order of abstract states."""

    name: str = "spec"
    description: str | None = None
    predicates: dict[str, PredicateDef]
    unsafe: str | None = None
    monitors: tuple[MonitorDef, ...] = ()
    valid_transitions: ValidTransitions = ValidTransitions()
    guard: GuardSettings = GuardSettings()
    learning: LearningSettings = LearningSettings()
    # auto: learning (learn, evaluate, tune) first extends the spec with what discovery finds in the training runs
    discover: Literal["auto", "off"] = "off"

    # Where the spec came from, so errors found later (CEL compilation) can name a line.
    _source: str | None = PrivateAttr(default=None)
    _text: str | None = PrivateAttr(default=None)

    @field_validator("predicates", mode="before")
    @classmethod
    def _coerce_predicates(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        return {name: ({"cel": body} if isinstance(body, str) else body) for name, body in value.items()}

    @field_validator("discover", mode="before")
    @classmethod
    def _discover(cls, value: Any) -> Any:
        if value is False or value == "off":  # YAML reads a bare off as false
            return "off"
        if value != "auto" or not isinstance(value, str):
            raise ValueError("expected 'auto' (discover predicates and action memory from the training runs "
                             f"whenever a model is learned) or 'off', got {value!r}")
        return value

    @field_validator("predicates")
    @classmethod
    def _names(cls, value: dict[str, PredicateDef]) -> dict[str, PredicateDef]:
        if not value:
            raise ValueError("a spec needs at least one predicate")
        for name in value:
            if not _IDENT.match(name) or keyword.iskeyword(name) or name in RESERVED_NAMES:
                raise _Located(
                    f"predicate name {name!r} must be an identifier (letters, digits, _) and not one of "
                    f"{sorted(RESERVED_NAMES)}", "predicates", name)
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> Spec:
        irreversible = self.valid_transitions.irreversible
        unknown = [p for p in irreversible if p not in self.predicates]
        if unknown:
            raise _Located(f"names unknown predicate(s) {unknown}; known: {list(self.predicates)}",
                           "valid_transitions", "irreversible", irreversible.index(unknown[0]))
        if self.unsafe is None and not self.monitors:
            raise ValueError("'unsafe' is required (a CEL expression over predicate names) "
                             "unless monitors define the violations")
        names = [m.name for m in self.monitors]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise _Located(f"monitor name {name!r} is used twice", "monitors", i, "name")
        return self

    @property
    def predicate_names(self) -> list[str]:
        return list(self.predicates)

    @property
    def source(self) -> str | None:
        """The file the spec was read from, if any."""
        return self._source

    @property
    def text(self) -> str | None:
        """The YAML text the spec was parsed from, if any."""
        return self._text

    def line_of(self, *loc: Any) -> int | None:
        """Line of an entry (e.g. ``("predicates", "fork_in_microwave")``) in the spec's text."""
        return spec_line(self._text, *loc)

    def error(self, message: str, *loc: Any) -> SpecError:
        """A :class:`SpecError` pointing at the entry ``loc``."""
        return SpecError(message, source=self._source, line=self.line_of(*loc))

    def to_document(self) -> dict[str, Any]:
        """The spec as plain data, as it would be written in YAML."""
        document = self.model_dump(mode="json", exclude_none=True)
        if document.get("discover") == "off":  # the default, and what every spec before it meant
            del document["discover"]
        return document


def load_spec(path: str | Path) -> Spec:
    """Read and validate a YAML spec file.

    Raises:
        SpecError: naming the file and line of what is wrong.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"cannot read spec: {exc.strerror}", source=str(path)) from exc
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise SpecError(f"not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
                        "a spec is a YAML file", source=str(path), line=line) from exc
    return parse_spec(text, source=str(path))


class _SpecLoader(yaml.SafeLoader):
    """YAML 1.1 reads a key such as ``on``, ``off``, ``yes`` or ``no`` as a boolean; in a
    spec every key is a name, so a key keeps the text it was written as."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag == "tag:yaml.org,2002:bool":
                key_node.tag = "tag:yaml.org,2002:str"
            if isinstance(key_node, yaml.ScalarNode):
                # YAML keeps the last of two equal keys without a word; in a spec that hides a mistake
                line = key_node.start_mark.line + 1
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key_node.value!r} (first on line {seen[key_node.value]})",
                        key_node.start_mark)
                seen[key_node.value] = line
        return super().construct_mapping(node, deep=deep)


# types-PyYAML types a constructor as a method of a Loader; construct_yaml_map is SafeConstructor's
_SpecLoader.add_constructor("tag:yaml.org,2002:map", _SpecLoader.construct_yaml_map)  # type: ignore[type-var]


def parse_spec(text: str, *, source: str = "<spec>") -> Spec:
    """Parse YAML text into a validated :class:`Spec` (CEL is compiled later, in predicates)."""
    try:
        _check_yaml_shape(text, source)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        document = yaml.load(text, Loader=_SpecLoader)  # safe: _SpecLoader is a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(f"YAML does not parse: {problem}", source=source, line=line) from exc
    except RecursionError as exc:
        raise SpecError("YAML is nested too deeply to be a spec", source=source) from exc
    if not isinstance(document, dict):
        raise SpecError("a spec must be a YAML mapping with at least 'predicates' and 'unsafe'",
                        source=source, line=1)
    try:
        spec = Spec.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        located = (first.get("ctx") or {}).get("error")
        loc = located.loc if isinstance(located, _Located) else tuple(first["loc"])
        field = ".".join(str(part) for part in loc) or "<root>"
        message = first["msg"].removeprefix("Value error, ")
        raise SpecError(f"{field}: {message}", source=source, line=line_of(root, loc)) from exc
    ordered = [(("guard", "thresholds"), spec.guard.thresholds)] + [
        (("guard", "properties", i, "thresholds"), p.thresholds)
        for i, p in enumerate(spec.guard.properties) if p.thresholds is not None] + [
        (("guard", "member_thresholds", "groups", g, "thresholds"), m.merged(spec.guard.thresholds))
        for g, m in (spec.guard.member_thresholds.groups if spec.guard.member_thresholds else {}).items()]
    for loc, thresholds in ordered:
        problem = thresholds.disorder()
        if problem is not None:
            raise SpecError(f"{'.'.join(map(str, loc))}: {problem}", source=source, line=line_of(root, loc))
    spec._source = source
    spec._text = text
    return spec


_MAX_YAML_DEPTH = 64


class _Mark(Protocol):  # yaml.Mark or the C parser's mark
    line: int


def _line(mark: _Mark | None) -> int | None:
    return None if mark is None else mark.line + 1


def _check_yaml_shape(text: str, source: str) -> None:
    """Refuse, from the event stream (no recursion, no tree built), YAML that would take the loader
    unbounded time or memory: aliases (a few lines can expand into billions of nodes) and deep
    nesting. A spec also arrives inside model files, written by whoever wrote the file."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise SpecError("YAML aliases (*name) are not allowed in a spec; write the value out",
                            source=source, line=_line(event.start_mark))
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > _MAX_YAML_DEPTH:
                raise SpecError(f"YAML is nested deeper than {_MAX_YAML_DEPTH} levels", source=source,
                                line=_line(event.start_mark))
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def line_of(root: yaml.Node | None, loc: tuple[Any, ...]) -> int | None:
    """1-based line of the YAML node at ``loc`` (or of its deepest existing ancestor)."""
    node = root
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next(((k, v) for k, v in node.value if k.value == str(part)), None)
            if match is None:
                break
            line = match[0].start_mark.line + 1
            node = match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def spec_line(source_text: str | None, *loc: Any) -> int | None:
    """Line of ``loc`` in a spec's YAML text, for errors found after parsing (e.g. CEL)."""
    if not source_text:
        return None
    try:
        return line_of(yaml.compose(source_text, Loader=yaml.SafeLoader), tuple(loc))
    except yaml.YAMLError:
        return None
