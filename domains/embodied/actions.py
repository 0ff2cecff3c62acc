"""High-level household actions: parsing SafeAgentBench's loose spelling into one form.

SafeAgentBench writes ``turn_on Microwave``, ``turn on Candle``, ``Open Cabinet`` and
``put microwave`` for the same few actions; :func:`parse_action` accepts them all and
``str(action)`` prints the canonical spelling the simulator records.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .errors import ActionParseError
from .objects import LIQUIDS, canonical_type

Verb = Literal["find", "pick", "put", "open", "close", "turn_on", "turn_off", "slice", "break",
               "fillLiquid", "emptyLiquid", "pour", "dirty", "clean", "cook", "drop", "throw"]

# verb → (least, most) number of arguments
VERBS: dict[str, tuple[int, int]] = {
    "find": (1, 1), "pick": (1, 1), "put": (1, 1), "open": (1, 1), "close": (1, 1),
    "turn_on": (1, 1), "turn_off": (1, 1), "slice": (1, 1), "break": (1, 1),
    "fillLiquid": (2, 2), "emptyLiquid": (1, 1), "pour": (0, 1), "dirty": (1, 1),
    "clean": (1, 1), "cook": (1, 1), "drop": (0, 1), "throw": (0, 1),
}
_VERB_SPELLINGS = {v.lower().replace("_", ""): v for v in VERBS} | {
    "pickup": "pick", "place": "put", "toggleon": "turn_on", "toggleoff": "turn_off",
    "fill": "fillLiquid", "empty": "emptyLiquid",
}


@dataclass(frozen=True)
class Action:
    """One parsed action: a verb, the object it acts on and, for ``fillLiquid``, a liquid.

    ``target`` is the receptacle for ``put``, the held object (optional) for ``drop`` and
    ``throw``, and the object to act on otherwise.
    """

    verb: str
    target: str | None = None
    liquid: str | None = None

    def __str__(self) -> str:
        return " ".join(part for part in (self.verb, self.target, self.liquid) if part)


def parse_action(text: str) -> Action:
    """Parse an action string such as ``"turn on Microwave"`` or ``"fillLiquid Mug water"``.

    Args:
        text: a high-level action; the verb is case-insensitive, ``turn on``/``turn_on``
            are the same, object types may be misspelt in case (``cellphone``).

    Returns:
        The :class:`Action`, with the object type canonicalised.

    Raises:
        ActionParseError: for an unknown verb, a wrong number of arguments or an
            unknown liquid.
    """
    if not isinstance(text, str):
        raise ActionParseError(repr(text), f"expected a string, got {type(text).__name__}")
    words = text.split()
    if not words:
        raise ActionParseError(text, "it is empty")
    head = words[0].lower()
    if head == "turn" and len(words) > 1 and words[1].lower() in ("on", "off"):
        words = [f"turn_{words[1].lower()}", *words[2:]]
        head = words[0]
    verb = _VERB_SPELLINGS.get(head.replace("_", ""))
    if verb is None:
        raise ActionParseError(text, f"unknown verb {words[0]!r}; expected one of {sorted(VERBS)}")
    args = words[1:]
    least, most = VERBS[verb]
    if most == 1 and len(args) > 1:
        # "find remote control": a type name written as separate words
        args = ["".join(word[:1].upper() + word[1:] for word in args)]
    if not least <= len(args) <= most:
        expected = str(least) if least == most else f"{least} to {most}"
        raise ActionParseError(text, f"{verb!r} takes {expected} argument(s), got {len(args)}")
    target = canonical_type(args[0]) if args else None
    liquid = None
    if verb == "fillLiquid":
        liquid = args[1].lower()
        if liquid not in LIQUIDS:
            raise ActionParseError(text, f"unknown liquid {args[1]!r}; expected one of {sorted(LIQUIDS)}")
    return Action(verb, target, liquid)
