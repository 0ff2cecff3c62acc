"""What the real-model agent tests share (the household and the tool agent)."""
from __future__ import annotations

from typing import Any


class Recording:
    """A real guard session whose decisions are kept, to compare with what reached the prompts."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.decisions: list[Any] = []

    def observe(self, state: dict[str, Any]) -> Any:
        decision = self.session.observe(state)
        self.decisions.append(decision)
        return decision
