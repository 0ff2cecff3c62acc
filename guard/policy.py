"""Policy: from a safety probability to an action, and the words that explain it."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..errors import ConfigError
from .spec import Action, GuardSettings, Thresholds, Trigger

__all__ = ["Policy", "act"]

_SETTINGS = ("thresholds", "unseen_state", "act_on", "min_visits", "trigger", "min_increase")


@dataclass(frozen=True)
class Policy:
    """Thresholds on p_safe (act when p_safe < θ), the action for unseen states, and the trigger.

    ``act_on``: ``point`` acts on p_unsafe, ``upper`` on the upper end of its confidence
    interval (``ci_high``; the point value where a model has no interval). A state with
    fewer than ``min_visits`` observed departures is treated as unseen. With ``trigger``
    ``increase`` a step is acted on only when its p_unsafe exceeds the run's current risk
    by more than ``min_increase`` (see :mod:`guard.thresholds`).
    """

    thresholds: Thresholds
    unseen_state: Action = Action.ASK_HUMAN
    act_on: str = "point"
    min_visits: int = 0
    trigger: Trigger | None = None  # None: not set; a Guard applies level, the LangChain middleware increase
    min_increase: float = 0.0

    def __post_init__(self) -> None:
        if self.act_on not in ("point", "upper"):
            raise ConfigError(f"act_on must be 'point' or 'upper', got {self.act_on!r}")
        if isinstance(self.min_visits, bool) or not isinstance(self.min_visits, int) or self.min_visits < 0:
            raise ConfigError(f"min_visits must be a whole number >= 0, got {self.min_visits!r}")

    @classmethod
    def from_settings(cls, settings: GuardSettings, member: str | None = None) -> Policy:
        """The spec's policy; for a bundle ``member`` (a group's value) with an entry in
        ``guard.member_thresholds``, with that member's thresholds and ``min_increase``."""
        own = settings.member_thresholds.groups.get(member) \
            if member is not None and settings.member_thresholds is not None else None
        thresholds = settings.thresholds if own is None else own.merged(settings.thresholds)
        min_increase = settings.min_increase if own is None or own.min_increase is None else own.min_increase
        return cls(thresholds=thresholds, unseen_state=settings.unseen_state, act_on=settings.act_on,
                   min_visits=settings.min_visits, trigger=settings.trigger, min_increase=min_increase)

    @property
    def increase(self) -> float | None:
        """``min_increase`` under the increase trigger, else None (the level trigger)."""
        return self.min_increase if self.trigger is Trigger.INCREASE else None

    def with_overrides(self, overrides: dict[str, Any] | None) -> Policy:
        """A copy with some settings changed, e.g. ``{"thresholds": {"stop": 0.3}, "trigger": "increase"}``."""
        if not overrides:
            return self
        unknown = set(overrides) - set(_SETTINGS)
        if unknown:
            raise ConfigError(f"unknown policy setting(s) {sorted(unknown)}; known: {', '.join(_SETTINGS)}")
        thresholds = self.thresholds
        if "thresholds" in overrides:
            merged = thresholds.model_dump() | dict(overrides["thresholds"])
            thresholds = Thresholds.model_validate(merged)
        unseen = Action(overrides["unseen_state"]) if "unseen_state" in overrides else self.unseen_state
        trigger = self.trigger
        if "trigger" in overrides:
            try:
                trigger = Trigger(overrides["trigger"])
            except ValueError:
                raise ConfigError(f"policy trigger {overrides['trigger']!r}: expected 'level' or 'increase'") \
                    from None
        min_increase = overrides.get("min_increase", self.min_increase)
        if isinstance(min_increase, bool) or not isinstance(min_increase, (int, float)) \
                or not math.isfinite(min_increase) or not 0.0 <= min_increase <= 1.0:
            raise ConfigError(f"policy min_increase {min_increase!r}: expected a number in [0, 1]")
        return replace(self, thresholds=thresholds, unseen_state=unseen,
                       act_on=overrides.get("act_on", self.act_on),
                       min_visits=overrides.get("min_visits", self.min_visits), trigger=trigger,
                       min_increase=float(min_increase))

    def act(self, p_safe: float) -> tuple[Action, float | None]:
        """The most severe action whose threshold p_safe falls below, and that threshold."""
        return act(self.thresholds.items(), p_safe)


def act(rules: list[tuple[Action, float]], p_safe: float) -> tuple[Action, float | None]:
    """The first of ``rules`` ((action, θ), most severe first: :meth:`Thresholds.items`) whose θ p_safe falls
    below, and that θ; allow when none."""
    for action, theta in rules:
        if p_safe < theta:
            return action, theta
    return Action.ALLOW, None
