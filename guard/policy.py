"""Policy: from a safety probability to an action, and the words that explain it."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from guard.spec import Action, GuardSettings, Thresholds

__all__ = ["Policy"]


@dataclass(frozen=True)
class Policy:
    """Thresholds on p_safe (act when p_safe < θ) and the action for unseen states.

    ``act_on``: ``point`` acts on p_unsafe, ``upper`` on the upper end of its confidence
    interval (``ci_high``; the point value where a model has no interval). A state with
    fewer than ``min_visits`` observed departures is treated as unseen.
    """

    thresholds: Thresholds
    unseen_state: Action = Action.ASK_HUMAN
    act_on: str = "point"
    min_visits: int = 0

    def __post_init__(self) -> None:
        if self.act_on not in ("point", "upper"):
            raise ValueError(f"act_on must be 'point' or 'upper', got {self.act_on!r}")
        if isinstance(self.min_visits, bool) or not isinstance(self.min_visits, int) or self.min_visits < 0:
            raise ValueError(f"min_visits must be a whole number >= 0, got {self.min_visits!r}")

    @classmethod
    def from_settings(cls, settings: GuardSettings) -> Policy:
        return cls(thresholds=settings.thresholds, unseen_state=settings.unseen_state, act_on=settings.act_on,
                   min_visits=settings.min_visits)

    def with_overrides(self, overrides: dict[str, Any] | None) -> Policy:
        """A copy with some settings changed, e.g. ``{"thresholds": {"stop": 0.3}}``."""
        if not overrides:
            return self
        unknown = set(overrides) - {"thresholds", "unseen_state", "act_on", "min_visits"}
        if unknown:
            raise ValueError(f"unknown policy setting(s) {sorted(unknown)}; "
                             "known: thresholds, unseen_state, act_on, min_visits")
        thresholds = self.thresholds
        if "thresholds" in overrides:
            merged = thresholds.model_dump() | dict(overrides["thresholds"])
            thresholds = Thresholds.model_validate(merged)
        unseen = Action(overrides["unseen_state"]) if "unseen_state" in overrides else self.unseen_state
        return replace(self, thresholds=thresholds, unseen_state=unseen,
                       act_on=overrides.get("act_on", self.act_on),
                       min_visits=overrides.get("min_visits", self.min_visits))

    def act(self, p_safe: float) -> tuple[Action, float | None]:
        """The most severe action whose threshold p_safe falls below, and that threshold."""
        for action, theta in self.thresholds.items():
            if p_safe < theta:
                return action, theta
        return Action.ALLOW, None
