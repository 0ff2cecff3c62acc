"""``forewarn tune --bundle-by meta.KEY``: thresholds per bundle member.

Every fold's model is a bundle (:func:`guard.evaluation.evaluate.evaluate` with
``bundle_by``), and every held-out run remembers the member that replayed it
(:attr:`guard.replay.RunReplay.member`). The pooled choice is made on all held-out runs,
as without bundles (:func:`guard.evaluation.tune.tune`); then each member's thresholds
(and ``min_increase``, under the increase trigger) are chosen by the same rule on the
held-out runs *its own model* replayed — the same folds, the same targets. A member with
fewer such runs than ``min_runs``, or whose runs cannot reach a target, keeps the pooled
choice, and the output says why.

The choices go into the spec as ``guard.member_thresholds`` (:func:`write_member_thresholds`),
which ``forewarn learn --group-by`` carries into the bundle and every guard of the bundle
reads (:meth:`guard.bundle_guard.BundleGuard.member_policy`).
"""
from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import yaml

from ...errors import ForewarnError, InputError
from ..bundle import group_path, group_value
from ..policy import Policy
from ..replay import RunReplay, summarize
from ..spec import Action, Spec, Thresholds
from .evaluate import EvaluationReport
from .tune import Choice, Target, tune


@dataclass(frozen=True)
class MemberTuning:
    """One group's thresholds: its own (``choices``) or the pooled ones (``reason`` says why)."""

    group: str
    runs: int  # held-out runs its own model replayed
    unsafe_runs: int
    choices: list[Choice] | None  # None: the pooled choice stands
    min_increase: float | None = None
    reason: str | None = None

    @property
    def thresholds(self) -> Thresholds | None:
        if self.choices is None:
            return None
        return Thresholds(**{c.action.value: c.theta for c in self.choices})


def tune_members(evaluation: EvaluationReport, spec: Spec, targets: Sequence[Target], *,
                 min_runs: int) -> tuple[list[MemberTuning], int]:
    """Each group's own thresholds, and the number of groups whose runs no member of theirs replayed.

    Raises:
        ForewarnError: the evaluation was not of bundles.
    """
    if evaluation.bundle_by is None:
        raise InputError("per-member thresholds need a cross-validation of bundles (--bundle-by meta.KEY)")
    path = group_path(evaluation.bundle_by)
    replays = evaluation.pooled.replays
    by_member = Counter(r.member for r in replays if r.member is not None)
    unsafe = Counter(r.member for r in replays if r.member is not None and r.unsafe)
    groups = {g for g in (group_value(r.meta, path) for r in replays) if g is not None}
    out = []
    for group in sorted(by_member):
        n = by_member[group]
        if n < min_runs:
            out.append(MemberTuning(group, n, unsafe[group], None,
                                    reason=f"{n} held-out runs replayed by its own model, fewer than {min_runs}"))
            continue
        tuned: dict[str, float] = {}
        try:
            choices = tune(evaluation, spec, targets, tuned, keep=_of_member(group),
                           current=Policy.from_settings(spec.guard, group).thresholds)
        except ForewarnError as exc:  # a target its runs cannot reach, or an order its θs break
            out.append(MemberTuning(group, n, unsafe[group], None, reason=str(exc)))
            continue
        out.append(MemberTuning(group, n, unsafe[group], choices, tuned.get("min_increase")))
    return out, len(groups - set(by_member))


def _of_member(group: str) -> Callable[[RunReplay], bool]:
    return lambda r: r.member == group


@dataclass(frozen=True)
class Tally:
    """One action's figures over every held-out run, each scored at the thresholds its member deploys."""

    n_unsafe: int = 0
    n_safe: int = 0
    warned_ahead: int = 0
    blocked_at_step: int = 0
    false_alarms: int = 0

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.n_unsafe + other.n_unsafe, self.n_safe + other.n_safe,
                     self.warned_ahead + other.warned_ahead, self.blocked_at_step + other.blocked_at_step,
                     self.false_alarms + other.false_alarms)

    def to_dict(self) -> dict[str, float | int | None]:
        def rate(count: int, total: int) -> float | None:
            return count / total if total else None

        detected = self.warned_ahead + self.blocked_at_step
        return {"n_unsafe": self.n_unsafe, "n_safe": self.n_safe, "warned_ahead": self.warned_ahead,
                "blocked_at_step": self.blocked_at_step, "false_alarms": self.false_alarms,
                "warned_ahead_rate": rate(self.warned_ahead, self.n_unsafe),
                "blocked_at_step_rate": rate(self.blocked_at_step, self.n_unsafe),
                "detection_rate": rate(detected, self.n_unsafe),
                "false_alarm_rate": rate(self.false_alarms, self.n_safe)}


def tally(evaluation: EvaluationReport, pooled: Sequence[Choice], pooled_min_increase: float | None,
          members: Sequence[MemberTuning]) -> dict[Action, Tally]:
    """Per action with a θ, the held-out figures when each member with thresholds of its own acts at them
    (on the runs its model replayed) and every other run at the pooled choice."""
    report = evaluation.pooled
    own = {m.group: m for m in members if m.choices is not None}
    parts: dict[str | None, list[RunReplay]] = {}
    for r in report.replays:
        parts.setdefault(r.member if r.member in own else None, []).append(r)
    totals: dict[Action, Tally] = {}
    for key, runs in parts.items():
        member = own.get(key) if key is not None else None
        choices = pooled if member is None or member.choices is None else member.choices
        min_increase = pooled_min_increase if member is None or member.min_increase is None else \
            member.min_increase
        if report.min_increase is None:
            min_increase = None  # the level trigger
        for c in choices:
            if c.theta is None:
                continue
            t = summarize(runs, [c.theta], unseen_alarms=report.unseen_alarms, horizon=report.horizon,
                          enforcement=report.enforcement, min_increase=min_increase).thetas[0]
            totals[c.action] = totals.get(c.action, Tally()) + Tally(
                t.n_unsafe, t.n_safe, t.warned_ahead, t.blocked_at_step, t.false_alarms)
    return totals


def write_member_thresholds(text: str, by: str | None, members: Mapping[str, tuple[Thresholds, float | None]], *,
                            source: str = "<spec>") -> str:
    """``text`` (a spec's YAML with a ``guard`` mapping) with ``guard.member_thresholds`` set to ``members``
    grouped by ``by`` (an existing entry is replaced; none is written when ``members`` is empty). The rest is
    kept as written."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    guard = _value(root, "guard") if isinstance(root, yaml.MappingNode) else None
    if not isinstance(guard, yaml.MappingNode):
        raise InputError(f"{source}: no guard mapping to write member_thresholds into")
    entries = {g: {"thresholds": {k: v for k, v in t.model_dump().items() if v is not None},
                   **({} if mi is None else {"min_increase": mi})} for g, (t, mi) in sorted(members.items())}
    if guard.flow_style:
        document = yaml.safe_load(text[guard.start_mark.index:guard.end_mark.index]) or {}
        document.pop("member_thresholds", None)
        if members:
            document["member_thresholds"] = {"by": by, "groups": entries}
        dumped = yaml.safe_dump(document, default_flow_style=True, width=10**6, sort_keys=False).strip()
        return text[:guard.start_mark.index] + dumped + text[guard.end_mark.index:]
    key = next((k for k, _ in guard.value if isinstance(k, yaml.ScalarNode) and k.value == "member_thresholds"), None)
    if key is not None:  # drop the old entry, its lines whole
        node = _value(guard, "member_thresholds")
        assert node is not None
        start = text.rfind("\n", 0, key.start_mark.index) + 1
        end = node.end_mark.index
        line_start = text.rfind("\n", 0, end) + 1
        if text[line_start:end].strip() == "":  # a block ends where the next key's line starts
            end = line_start
        else:
            newline = text.find("\n", end)
            end = len(text) if newline < 0 else newline + 1
        text = text[:start] + text[end:]
        guard = _value(yaml.compose(text, Loader=yaml.SafeLoader), "guard")  # type: ignore[arg-type]
        assert isinstance(guard, yaml.MappingNode)
    if not members:
        return text
    first = guard.value[0][0].start_mark
    at = text.rfind("\n", 0, first.index) + 1
    pad = " " * first.column
    lines = [f"{pad}member_thresholds:  # forewarn tune --bundle-by {by}: each member's own",
             f"{pad}  by: {by}", f"{pad}  groups:"]
    lines += [f"{pad}    {json.dumps(g)}: {_flow(e)}" for g, e in entries.items()]
    return text[:at] + "\n".join(lines) + "\n" + text[at:]


def _flow(entry: dict[str, object]) -> str:
    return yaml.safe_dump(entry, default_flow_style=True, width=10**6, sort_keys=False).strip()


def _value(mapping: yaml.MappingNode, key: str) -> yaml.Node | None:
    return next((v for k, v in mapping.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)
