"""``forewarn tune``: thresholds per action chosen from cross-validated replays.

A target is ``[ACTION:]false-alarms=X``, ``[ACTION:]warned-ahead=Y`` or ``[ACTION:]detection=Y``. Every run is
replayed once by a fold's model that never saw it (:func:`guard.evaluation.evaluate.evaluate`);
a run is flagged at θ exactly when the lowest p_safe on which an alarm can still act
(:meth:`~guard.replay.RunReplay.min_p_safe`) is below θ, so the rates are step functions
of θ and the best θ is read off the sorted minima, exactly:

* ``false-alarms=X`` — the largest θ whose false-alarm rate is at most X: the most warnings
  ahead of the violating step it allows (and the most detection, which only grows with θ);
* ``warned-ahead=Y`` — the smallest θ that warns of at least Y of the violating runs strictly
  before the violating step (what a reflection or an approval can act on);
* ``detection=Y`` — the smallest θ whose detection is at least Y, counting, under look-ahead,
  runs blocked on the violating step itself (what ``stop`` can prevent at the last moment).

θ is rounded to six decimals in the direction that keeps the target met. A target
without an action applies to the least severe action the spec configures (reflect,
usually): its θ decides when a run sees any intervention at all. Actions without a
target keep the spec's θ, moved only as far as needed to keep reflect ≥ ask_human ≥ stop.
"""
from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import yaml

from ...errors import InputError
from ..replay import Enforcement, RunReplay, Spread, ThetaReport, summarize
from ..spec import Action, Spec, Thresholds
from .evaluate import EvaluationReport

__all__ = ["MIN_INCREASE_GRID", "Target", "Choice", "TargetUnreachable", "choose_min_increase", "choose_theta",
           "parse_target", "tune", "write_min_increase", "write_thresholds"]

Metric = Literal["false-alarms", "warned-ahead", "detection"]
METRICS: tuple[str, ...] = ("false-alarms", "warned-ahead", "detection")
# What each target optimises, in words (`tune` prints it beside the figures).
AIMS = {"false-alarms": "the most warnings ahead of the violating step with at most {value} false alarms",
        "warned-ahead": "the fewest false alarms warning at least {value} of violating runs ahead of the step",
        "detection": "the fewest false alarms detecting at least {value} of violating runs, blocks at the "
                     "violating step included"}
_ORDER = (Action.REFLECT, Action.ASK_HUMAN, Action.STOP)  # least severe first: θ decreases along it
_TARGET = re.compile(r"^\s*(?:(?P<action>[a-z_]+)\s*:\s*)?(?P<metric>[a-z-]+)\s*=\s*(?P<value>\S+)\s*$")


class TargetUnreachable(InputError):
    """No θ in [0, 1] meets a target on the held-out runs; the message gives the closest."""


@dataclass(frozen=True)
class Target:
    metric: Metric
    value: float
    action: Action | None = None  # None: the least severe configured action

    def __str__(self) -> str:
        return f"{self.action.value + ':' if self.action else ''}{self.metric}={self.value:g}"

    @property
    def aim(self) -> str:
        """What the target optimises, in words."""
        return AIMS[self.metric].format(value=f"{self.value:.1%}")


@dataclass(frozen=True)
class Choice:
    """One action's threshold: from a target, or kept from the spec (``moved`` when the order forced it)."""

    action: Action
    theta: float | None
    target: Target | None
    report: ThetaReport | None  # pooled over the held-out runs
    over_folds: dict[str, Spread | None]
    previous: float | None
    moved: bool = False


def parse_target(text: str) -> Target:
    """``false-alarms=0.05``, ``warned-ahead=0.5``, ``stop:detection=0.95`` → a :class:`Target`."""
    usage = "expected [ACTION:]false-alarms=X, [ACTION:]warned-ahead=Y or [ACTION:]detection=Y with X, Y in (0, 1)"
    match = _TARGET.match(text)
    if match is None or match["metric"] not in METRICS:
        raise InputError(f"--target {text!r}: {usage}")
    try:
        value = float(match["value"])
    except ValueError:
        raise InputError(f"--target {text!r}: {match['value']!r} is not a number; {usage}") from None
    if not 0.0 < value < 1.0:  # also rejects nan
        raise InputError(f"--target {text!r}: {value:g} is not in (0, 1); {usage}")
    action = None
    if match["action"] is not None:
        if match["action"] not in {a.value for a in _ORDER}:
            raise InputError(f"--target {text!r}: unknown action {match['action']!r}; "
                                f"choose reflect, ask_human or stop")
        action = Action(match["action"])
    return Target(match["metric"], value, action)  # type: ignore[arg-type]


def _minima(replays: Sequence[RunReplay], unsafe: bool, unseen_alarms: bool, lookahead: bool) -> list[float]:
    return sorted(r.min_p_safe(unseen_alarms, lookahead) for r in replays if r.unsafe is unsafe)


def _flagged(minima: list[float], theta: float) -> int:
    return bisect.bisect_left(minima, theta)  # runs whose lowest p_safe is below θ


def _down(theta: float) -> float:
    return math.floor(theta * 1e6) / 1e6


def choose_theta(replays: Sequence[RunReplay], target: Target, *, unseen_alarms: bool,
                 lookahead: bool) -> float:
    """The θ that meets ``target`` on ``replays`` best (see the module's doc).

    Raises:
        TargetUnreachable: naming the closest rate any θ in [0, 1] achieves.
    """
    safe = _minima(replays, False, unseen_alarms, lookahead)
    # warned ahead: only alarms strictly before the violating step count, whatever the enforcement
    unsafe = _minima(replays, True, unseen_alarms, lookahead and target.metric == "detection")
    measure = "warned ahead" if target.metric == "warned-ahead" else "detection"
    if target.metric == "false-alarms":
        if not safe:
            raise TargetUnreachable(f"target {target}: no held-out run stays safe, so false alarms cannot be "
                                    f"measured; give a detection target")
        allowed = math.floor(target.value * len(safe) + 1e-9)
        at_zero = _flagged(safe, 0.0)  # unseen states alarm whatever θ is
        if at_zero > allowed:
            raise TargetUnreachable(
                f"target {target}: no θ reaches it; the fewest false alarms are {at_zero / len(safe):.1%} "
                f"({at_zero} of {len(safe)} safe runs) at θ = 0, from states the models never saw "
                f"(set guard.unseen_state: allow, or learn from more runs)")
        theta = 1.0 if allowed >= len(safe) else min(safe[allowed], 1.0)
        return max(_down(theta), 0.0)
    if not unsafe:
        raise TargetUnreachable(f"target {target}: no held-out run violates, so {measure} cannot be measured; "
                                f"give a false-alarms target")
    needed = math.ceil(target.value * len(unsafe) - 1e-9)
    best = _flagged(unsafe, 1.0)
    if best < needed:
        false_alarms = _flagged(safe, 1.0) / len(safe) if safe else None
        fa = "" if false_alarms is None else f", with {false_alarms:.1%} false alarms"
        raise TargetUnreachable(
            f"target {target}: no θ reaches it; the most is {measure} {best / len(unsafe):.1%} ({best} of "
            f"{len(unsafe)} violating runs) at θ = 1{fa}")
    if needed == 0 or unsafe[needed - 1] == float("-inf"):
        return 0.0
    low = unsafe[needed - 1]  # θ must exceed it
    theta = (math.floor(low * 1e6) + 1) / 1e6
    while theta <= low:  # float rounding of low·1e6
        theta += 1e-6
    return min(theta, 1.0)


MIN_INCREASE_GRID = (0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3)
"""The ``min_increase`` values ``tune`` tries under the increase trigger."""


def choose_min_increase(replays: Sequence[RunReplay], target: Target, *, unseen_alarms: bool,
                        lookahead: bool, grid: Sequence[float] = MIN_INCREASE_GRID) -> tuple[float, float]:
    """``(min_increase, θ)`` meeting ``target`` best under the increase trigger: for each ``min_increase``
    of ``grid`` the θ of :func:`choose_theta`, scored by the other rate at that θ (a false-alarms target:
    the most detection; a detection target: the fewest false alarms), ties to the fewer false alarms, the
    more detection, then the smaller ``min_increase``.

    Raises:
        TargetUnreachable: no pair meets the target (the message is that of ``min_increase`` 0).
    """
    best: tuple[tuple[float, float, float], float, float] | None = None
    first_error: TargetUnreachable | None = None
    for value in grid:
        runs = [r.under_trigger(value, acts_on_start=not lookahead) for r in replays]
        try:
            theta = choose_theta(runs, target, unseen_alarms=unseen_alarms, lookahead=lookahead)
        except TargetUnreachable as exc:
            first_error = first_error or exc
            continue
        safe = _minima(runs, False, unseen_alarms, lookahead)
        unsafe = _minima(runs, True, unseen_alarms, lookahead)
        detection = _flagged(unsafe, theta) / len(unsafe) if unsafe else 0.0
        false_alarms = _flagged(safe, theta) / len(safe) if safe else 0.0
        score = (-detection, false_alarms, value) if target.metric == "false-alarms" else \
            (false_alarms, -detection, value)
        if best is None or score < best[0]:
            best = (score, value, theta)
    if best is None:
        assert first_error is not None
        raise first_error
    return best[1], best[2]


def _fold_spreads(evaluation: EvaluationReport, thetas: list[float], min_increase: float | None,
                  keep: Callable[[RunReplay], bool] | None = None) -> list[dict[str, Spread | None]]:
    pooled = evaluation.pooled
    per_fold = [summarize([r for r in f.report.replays if keep is None or keep(r)], thetas,
                          unseen_alarms=pooled.unseen_alarms, horizon=pooled.horizon,
                          enforcement=pooled.enforcement, min_increase=min_increase).thetas
                for f in evaluation.folds]
    out = []
    for k in range(len(thetas)):
        spreads: dict[str, Spread | None] = {}
        for name in ("detection_rate", "warned_ahead_rate", "blocked_at_step_rate", "false_alarm_rate"):
            values = [getattr(fold[k], name) for fold in per_fold]
            spreads[name] = Spread.of([v for v in values if v is not None])
        out.append(spreads)
    return out


def tune(evaluation: EvaluationReport, spec: Spec, targets: Sequence[Target],
         tuned: dict[str, float] | None = None, *, keep: Callable[[RunReplay], bool] | None = None,
         current: Thresholds | None = None) -> list[Choice]:
    """Thresholds for reflect, ask_human and stop meeting ``targets`` on a cross-validation's held-out runs.

    Under the increase trigger ``min_increase`` is tuned with the θ of the least severe action's target
    (:func:`choose_min_increase`); it goes into ``tuned["min_increase"]`` when ``tuned`` is given.
    ``keep``: tune on these held-out runs only (a bundle member's, :mod:`.member_tune`); ``current``:
    the thresholds untargeted actions keep (default: the spec's ``guard.thresholds``).

    Raises:
        TargetUnreachable: a target no θ meets.
        ForewarnError: two targets for one action, or targets whose θs break reflect ≥ ask_human ≥ stop.
    """
    current = spec.guard.thresholds if current is None else current
    configured = [a for a in _ORDER if getattr(current, a.value) is not None]
    default_action = configured[0] if configured else Action.REFLECT
    by_action: dict[Action, Target] = {}
    for target in targets:
        action = target.action or default_action
        if action in by_action:
            raise InputError(f"--target: two targets for {action.value} ({by_action[action]} and {target})")
        by_action[action] = target
    pooled = evaluation.pooled
    lookahead = pooled.enforcement is Enforcement.LOOKAHEAD
    held_out = [r for r in pooled.replays if keep is None or keep(r)]
    replays, min_increase = held_out, pooled.min_increase
    if min_increase is not None and by_action:  # the increase trigger: min_increase is tuned with θ
        lead = next(a for a in _ORDER if a in by_action)
        min_increase, _ = choose_min_increase(held_out, by_action[lead], unseen_alarms=pooled.unseen_alarms,
                                              lookahead=lookahead)
        replays = [r.under_trigger(min_increase, acts_on_start=not lookahead) for r in held_out]
        if tuned is not None:
            tuned["min_increase"] = min_increase
    chosen = {a: choose_theta(replays, t, unseen_alarms=pooled.unseen_alarms, lookahead=lookahead)
              for a, t in by_action.items()}
    targeted = [a for a in _ORDER if a in chosen]
    for less, more in itertools.pairwise(targeted):
        if chosen[less] < chosen[more]:
            raise InputError(
                f"--target: {by_action[more]} needs {more.value} θ {chosen[more]:g}, above {less.value} θ "
                f"{chosen[less]:g} from {by_action[less]}; thresholds must keep reflect ≥ ask_human ≥ stop")
    thetas: dict[Action, float | None] = {}
    moved: set[Action] = set()
    for i, action in enumerate(_ORDER):
        if action in chosen:
            thetas[action] = chosen[action]
            continue
        theta = getattr(current, action.value)
        if theta is None:
            thetas[action] = None
            continue
        ceiling = min((chosen[a] for a in _ORDER[:i] if a in chosen), default=1.0)
        floor = max((chosen[a] for a in _ORDER[i + 1:] if a in chosen), default=0.0)
        kept = min(max(theta, floor), ceiling)
        moved.update([action] if kept != theta else [])
        thetas[action] = kept
    active = sorted({t for t in thetas.values() if t is not None})
    reports = dict(zip(active, summarize(held_out, active, unseen_alarms=pooled.unseen_alarms,
                                         horizon=pooled.horizon, enforcement=pooled.enforcement,
                                         min_increase=min_increase).thetas))
    spreads = dict(zip(active, _fold_spreads(evaluation, active, min_increase, keep)))
    choices = []
    for a in _ORDER:
        theta = thetas[a]
        choices.append(Choice(a, theta, by_action.get(a), None if theta is None else reports[theta],
                              {} if theta is None else spreads[theta], getattr(current, a.value), a in moved))
    return choices


def write_thresholds(text: str, thresholds: Thresholds, *, source: str = "<spec>") -> str:
    """``text`` (a spec's YAML) with ``guard.thresholds`` set to ``thresholds``; the rest, comments
    included, is kept as written."""
    values = {a.value: getattr(thresholds, a.value) for a in _ORDER}
    flow = "{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in values.items() if v is not None) + "}"
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(root, yaml.MappingNode):
        raise InputError(f"{source}: a spec must be a YAML mapping")
    guard = _value(root, "guard")
    if guard is None or not isinstance(guard, yaml.MappingNode):
        if guard is not None and not (isinstance(guard, yaml.ScalarNode) and guard.tag.endswith(":null")):
            raise InputError(f"{source}:{guard.start_mark.line + 1}: guard: expected a mapping")
        body = text.rstrip("\n") + "\n" if guard is None else text[:guard.start_mark.index].rstrip(" ") + "\n"
        tail = "" if guard is None else text[guard.end_mark.index:]
        return body + ("guard:\n" if guard is None else "") + f"  thresholds: {flow}\n" + tail.lstrip("\n")
    if guard.flow_style:
        document = yaml.safe_load(text[guard.start_mark.index:guard.end_mark.index]) or {}
        document["thresholds"] = {k: v for k, v in values.items() if v is not None}
        dumped = yaml.safe_dump(document, default_flow_style=True, width=10**6, sort_keys=False).strip()
        return text[:guard.start_mark.index] + dumped + text[guard.end_mark.index:]
    key = next((k for k, _ in guard.value if isinstance(k, yaml.ScalarNode) and k.value == "thresholds"), None)
    node = _value(guard, "thresholds")
    if key is not None and node is not None and node.start_mark.index == node.end_mark.index:
        at = text.index(":", key.end_mark.index) + 1  # `thresholds:` with nothing after it
        return text[:at] + " " + flow + text[at:]
    if node is None:  # a new entry right under `guard:`, indented as its other keys
        first = guard.value[0][0].start_mark
        start = text.rfind("\n", 0, first.index) + 1
        indent: int = first.column
        return text[:start] + " " * indent + f"thresholds: {flow}\n" + text[start:]
    if not isinstance(node, yaml.MappingNode) or node.flow_style or not node.value:
        return text[:node.start_mark.index] + flow + text[node.end_mark.index:]
    edits: list[tuple[int, int, int, str]] = []  # (start, order at the same start, end, new text)
    for key, value in node.value:
        if key.value in values:
            new = _scalar(values.pop(key.value))
            if value.start_mark.index == value.end_mark.index:  # `stop:` with nothing after it
                at = text.index(":", key.end_mark.index) + 1
                edits.append((at, 0, at, " " + new))
            else:
                edits.append((value.start_mark.index, 0, value.end_mark.index, new))
    missing = [f"{k}: {_scalar(v)}" for k, v in values.items() if v is not None]
    if missing:
        last = node.value[-1][1]
        at = text.find("\n", last.end_mark.index)
        at = len(text) if at < 0 else at
        indent = " " * node.value[0][0].start_mark.column
        edits.append((at, 1, at, "".join(f"\n{indent}{line}" for line in missing)))  # before an edit at `at`
    for start, _, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def write_min_increase(text: str, value: float, *, source: str = "<spec>") -> str:
    """``text`` (a spec's YAML, with a ``guard`` mapping: :func:`write_thresholds` makes one) with
    ``guard.min_increase`` and ``guard.trigger: increase`` set; the rest kept as written."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    guard = _value(root, "guard") if isinstance(root, yaml.MappingNode) else None
    if not isinstance(guard, yaml.MappingNode):
        raise InputError(f"{source}: no guard mapping to write min_increase into")
    if guard.flow_style:
        document = yaml.safe_load(text[guard.start_mark.index:guard.end_mark.index]) or {}
        document |= {"trigger": "increase", "min_increase": value}
        dumped = yaml.safe_dump(document, default_flow_style=True, width=10**6, sort_keys=False).strip()
        return text[:guard.start_mark.index] + dumped + text[guard.end_mark.index:]
    for key, new in (("min_increase", _scalar(value)), ("trigger", "increase")):
        guard = _value(yaml.compose(text, Loader=yaml.SafeLoader), "guard")  # type: ignore[arg-type]
        assert isinstance(guard, yaml.MappingNode)
        node = _value(guard, key)
        if node is not None and node.start_mark.index != node.end_mark.index:
            text = text[:node.start_mark.index] + new + text[node.end_mark.index:]
            continue
        first = guard.value[0][0].start_mark
        start = text.rfind("\n", 0, first.index) + 1
        if node is not None:  # `key:` with nothing after it: drop the line, write it anew
            k = next(k for k, _ in guard.value if isinstance(k, yaml.ScalarNode) and k.value == key)
            line = text.rfind("\n", 0, k.start_mark.index) + 1
            end = text.find("\n", k.end_mark.index)
            text = text[:line] + text[(len(text) if end < 0 else end + 1):]
            start = min(start, line)
        text = text[:start] + " " * first.column + f"{key}: {new}\n" + text[start:]
    return text


def _value(mapping: yaml.MappingNode, key: str) -> yaml.Node | None:
    return next((v for k, v in mapping.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)


def _scalar(value: float | None) -> str:
    return "null" if value is None else repr(float(value))
