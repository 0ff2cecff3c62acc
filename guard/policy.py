"""Policy: from a safety probability to an action, and the words that explain it."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from guard.spec import Action, GuardSettings, Thresholds

__all__ = ["Policy"]


@dataclass(frozen=True)
class Policy:
    """Thresholds on p_safe (act when p_safe < θ) and the action for unseen states."""

    thresholds: Thresholds
    unseen_state: Action = Action.ASK_HUMAN

    @classmethod
    def from_settings(cls, settings: GuardSettings) -> Policy:
        return cls(thresholds=settings.thresholds, unseen_state=settings.unseen_state)

    def with_overrides(self, overrides: dict[str, Any] | None) -> Policy:
        """A copy with some settings changed, e.g. ``{"thresholds": {"stop": 0.3}}``."""
        if not overrides:
            return self
        unknown = set(overrides) - {"thresholds", "unseen_state"}
        if unknown:
            raise ValueError(f"unknown policy setting(s) {sorted(unknown)}; known: thresholds, unseen_state")
        thresholds = self.thresholds
        if "thresholds" in overrides:
            merged = thresholds.model_dump() | dict(overrides["thresholds"])
            thresholds = Thresholds.model_validate(merged)
        unseen = Action(overrides["unseen_state"]) if "unseen_state" in overrides else self.unseen_state
        return replace(self, thresholds=thresholds, unseen_state=unseen)

    def act(self, p_safe: float) -> tuple[Action, float | None]:
        """The most severe action whose threshold p_safe falls below, and that threshold."""
        for action, theta in self.thresholds.items():
            if p_safe < theta:
                return action, theta
        return Action.ALLOW, None
