"""The worlds action-only logs are replayed in (:mod:`.actions`): what a world offers, and the one a
process uses when a call names none.

Apart from :mod:`.actions` so that :mod:`.formats` (whose ``Reading`` carries a world) needs nothing
of the action reader: the format modules import :mod:`.formats`, and an import back would close a
cycle.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol

from ...errors import InputError

OnMismatch = Literal["error", "simulator"]


class Replay(Protocol):
    """One run's world, from its task's initial state."""

    def state(self) -> dict[str, Any]:
        """The current state, as a run's step records it."""
        ...

    def apply(self, action: Any) -> bool:
        """Apply an action; False when it cannot succeed here (nothing changes but the agent's record)."""
        ...

    def fail(self, action: Any) -> None:
        """Record an action the controller failed: nothing changes but the agent's record."""
        ...

    def where(self) -> str:
        """Where the agent is, for a message (``holding 'Egg', at 'Microwave'``)."""
        ...


class ActionWorld(Protocol):
    """A domain's world that action-only logs are replayed in."""

    name: str  # for messages: "the symbolic household"
    example_task: str  # for messages: a task id of this world, "unsafe-0002"

    def task(self, value: str) -> str | None:
        """The id of the task a log names by id or by exact instruction; None when unknown."""
        ...

    def parse(self, text: str) -> Any:
        """An action string as the world's action (``str()`` of it is its canonical spelling).

        Raises:
            ValueError: the text is no action of this world; the message says why.
        """
        ...

    def start(self, task: str) -> Replay:
        """A fresh replay of the task's scene."""
        ...


_default: Callable[[], ActionWorld] | None = None


def use_world(factory: Callable[[], ActionWorld] | None) -> None:
    """Set the world action logs are replayed in when a call names none (None: no default)."""
    global _default  # noqa: PLW0603 - the one default an entry point registers
    _default = factory


def default_world() -> ActionWorld:
    """The world set with :func:`use_world`.

    Raises:
        ForewarnError: none is set.
    """
    if _default is None:
        raise InputError("action-only logs are replayed in a domain's world, and none is set: pass "
                            "world=forewarn.domains.embodied.HouseholdWorld() (or call use_world)")
    return _default()
