"""What each household object type can do, and how type names are spelled.

A small property table in the spirit of AI2-THOR's object metadata: one row per object
type, naming its capabilities (pickupable, openable, ...). SafeAgentBench refers to
objects by type, with loose spelling (``Cellphone``, ``mug``, ``AlarmCLock``,
``Counter``), so every name goes through :func:`canonical_type` first.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import EmbodiedError


@dataclass(frozen=True)
class Kind:
    """Capabilities of one object type (the names follow AI2-THOR's metadata)."""

    pickupable: bool = False
    openable: bool = False
    toggleable: bool = False
    receptacle: bool = False
    breakable: bool = False
    fillable: bool = False
    dirtyable: bool = False
    sliceable: bool = False
    cookable: bool = False
    fragile: bool = False  # breaks when dropped on the floor, not only when thrown
    starts_on: bool = False  # toggled on at the start of an episode (room lights)


# Letters: P pickupable, O openable, T toggleable, R receptacle, B breakable,
# F fillable, D dirtyable, S sliceable, C cookable, K fragile, I initially on.
_TABLE: dict[str, str] = {
    # food
    "Apple": "PSC", "AppleSliced": "PC", "Bread": "PSC", "BreadSliced": "PC",
    "Egg": "PSBKC", "EggCracked": "C", "Lettuce": "PS", "LettuceSliced": "P",
    "Potato": "PSC", "PotatoSliced": "PC", "Tomato": "PS", "TomatoSliced": "P",
    # dishes and cookware
    "Bowl": "PRBFDK", "Cup": "PRBFDK", "Mug": "PRBFDK", "Plate": "PRBDK",
    "Pot": "PRFD", "Pan": "PRFD", "Kettle": "PF", "WineBottle": "PBFK", "Bottle": "PBFK",
    "Fork": "P", "Knife": "P", "ButterKnife": "P", "Spoon": "P", "Spatula": "P", "Ladle": "P",
    "SaltShaker": "P", "PepperShaker": "P", "DishSponge": "P", "SoapBottle": "P",
    "PaperTowelRoll": "P", "SprayBottle": "P",
    # kitchen appliances and fixtures
    "Microwave": "ROT", "Fridge": "RO", "Toaster": "RT", "CoffeeMachine": "RT",
    "StoveBurner": "RT", "StoveKnob": "T", "Sink": "R", "SinkBasin": "R", "Faucet": "T",
    "CounterTop": "R", "Cabinet": "RO", "Drawer": "RO", "Shelf": "R", "GarbageCan": "RF",
    "DiningTable": "R", "CoffeeTable": "R", "SideTable": "R", "Desk": "R", "Dresser": "RO",
    "Floor": "R", "Safe": "RO", "Box": "PRO", "TowelHolder": "R", "ToiletPaperHanger": "R",
    # furniture and rooms
    "Bed": "RD", "Sofa": "R", "ArmChair": "R", "Chair": "R", "Ottoman": "R", "Stool": "R",
    "Toilet": "RO", "Bathtub": "R", "BathtubBasin": "R", "ShowerDoor": "OB",
    "ShowerCurtain": "O", "ShowerHead": "T", "ShowerGlass": "B", "Mirror": "BD", "Window": "B",
    "Blinds": "O", "Curtains": "O", "HousePlant": "F", "Painting": "B",
    # electronics and lights
    "Television": "TB", "Laptop": "POTB", "CellPhone": "PTB", "AlarmClock": "PTB",
    "RemoteControl": "P", "DeskLamp": "T", "FloorLamp": "T", "LightSwitch": "TI",
    "Candle": "PT",
    # small things
    "CreditCard": "P", "KeyChain": "P", "Book": "PO", "Newspaper": "P", "Pillow": "P",
    "Cloth": "PD", "HandTowel": "P", "Towel": "P", "Vase": "PBK", "Statue": "PBK",
    "Dumbbell": "P", "Pencil": "P", "Pen": "P", "ScrubBrush": "P", "SoapBar": "P",
    "ToiletPaper": "P", "WateringCan": "PF", "Watch": "P", "CD": "P", "TissueBox": "P",
    "Plunger": "P", "BaseballBat": "P", "Basketball": "P", "TennisRacket": "P",
    "TeddyBear": "P", "Boots": "P", "Footstool": "P", "Cart": "R",
}
_LETTERS = {"P": "pickupable", "O": "openable", "T": "toggleable", "R": "receptacle",
            "B": "breakable", "F": "fillable", "D": "dirtyable", "S": "sliceable",
            "C": "cookable", "K": "fragile", "I": "starts_on"}
_KINDS: dict[str, Kind] = {name: Kind(**{_LETTERS[c]: True for c in code}) for name, code in _TABLE.items()}

# An unknown type is most likely a small household item an agent can carry.
_DEFAULT_KIND = Kind(pickupable=True)

_ALIASES = {"counter": "CounterTop", "stove": "StoveBurner", "refrigerator": "Fridge",
            "tv": "Television", "phone": "CellPhone", "trashcan": "GarbageCan"}
_CANONICAL = {name.lower(): name for name in _TABLE} | _ALIASES

LIQUIDS = frozenset({"water", "coffee", "wine"})

# Every scene has a floor to drop things on and a counter to put things down safely.
ALWAYS_PRESENT = ("Floor", "CounterTop")

# Parts of one fixture: finding one puts the agent within reach of the others.
_GROUPS = {"StoveBurner": "stove", "StoveKnob": "stove", "Sink": "sink", "SinkBasin": "sink",
           "Faucet": "sink", "Bathtub": "bath", "BathtubBasin": "bath", "ShowerHead": "shower",
           "ShowerDoor": "shower", "ShowerGlass": "shower", "ShowerCurtain": "shower"}
# Types that are meaningless without their partner (a knob drives a burner).
_LINKED = {"StoveBurner": ("StoveKnob",), "StoveKnob": ("StoveBurner",),
           "Sink": ("SinkBasin",), "SinkBasin": ("Sink",),
           "Bathtub": ("BathtubBasin",), "BathtubBasin": ("Bathtub",)}
# As in AI2-THOR, things "in the sink" rest in its basin, which is part of the sink.
_PUT_TARGET = {"Sink": "SinkBasin", "Bathtub": "BathtubBasin"}
_STRUCTURAL_PARENT = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}


def canonical_type(name: str) -> str:
    """The table's spelling of an object type (case-insensitive, aliases resolved).

    Args:
        name: a type as written in a task, e.g. ``"cellphone"``, ``"AlarmCLock"``, or an
            AI2-THOR object id such as ``"Fridge|-01.76|+00.00|00.00"``.

    Returns:
        The canonical type; an unknown name keeps its letters with the first upper-cased.
    """
    base = name.strip().split("|", 1)[0]
    if not base:
        raise EmbodiedError(f"object type {name!r} is empty")
    found = _CANONICAL.get(base.lower())
    if found is not None:
        return found
    return base[0].upper() + base[1:]


def kind_of(object_type: str) -> Kind:
    """Capabilities of a (canonical) type; unknown types are small pickupable items."""
    kind = _KINDS.get(object_type)
    if kind is not None:
        return kind
    if object_type.endswith("Sliced"):
        return Kind(pickupable=True, cookable=True)
    return _DEFAULT_KIND


def derived_type(object_type: str) -> str:
    """The type slicing (or breaking, for an egg) creates: ``Bread`` → ``BreadSliced``."""
    return "EggCracked" if object_type == "Egg" else f"{object_type}Sliced"


def fixture_group(object_type: str) -> str | None:
    """Name of the fixture a type is part of (``"stove"`` for burner and knob), or None."""
    return _GROUPS.get(object_type)


def linked_types(object_type: str) -> tuple[str, ...]:
    """Types that must exist alongside ``object_type`` (the knob of a burner, ...)."""
    return _LINKED.get(object_type, ())


def put_target(receptacle: str) -> str:
    """Where an object put "into" ``receptacle`` really rests (a sink's basin)."""
    return _PUT_TARGET.get(receptacle, receptacle)


def structural_parent(object_type: str) -> str | None:
    """The fixture a part belongs to (``SinkBasin`` → ``Sink``), or None."""
    return _STRUCTURAL_PARENT.get(object_type)
