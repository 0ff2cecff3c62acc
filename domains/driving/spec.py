"""The driving domain's spec (``spec.yaml``, shipped with the package) and its transition rule."""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from ...guard.spec import Spec, load_spec

# The spec's predicates in bit order; valid_transition reads valuations by these positions.
PREDICATES = ("green_light", "yellow_light", "red_light", "priority_ahead", "pedestrian_ahead", "moving",
              "near_line", "cannot_stop", "past_line", "in_crossing", "collision")
(_GREEN, _YELLOW, _RED, _PRIORITY, _PEDESTRIAN, _MOVING, _NEAR, _CANNOT_STOP, _PAST, _IN_CROSSING,
 _COLLISION) = range(len(PREDICATES))
_NEXT_COLOR = {_GREEN: _YELLOW, _YELLOW: _RED, _RED: _GREEN}


def spec_path() -> Path:
    """Path of the shipped ``spec.yaml``."""
    return Path(str(resources.files("forewarn.domains.driving").joinpath("spec.yaml")))


def load_driving_spec() -> Spec:
    """The parsed driving spec."""
    return load_spec(spec_path())


def _color(valuation: tuple[bool, ...]) -> int | None:
    lit = [c for c in (_GREEN, _YELLOW, _RED) if valuation[c]]
    return lit[0] if len(lit) == 1 else None


def valid_transition(src: tuple[bool, ...], dst: tuple[bool, ...]) -> bool:
    """Whether one 0.05–0.2 s step can take abstract state ``src`` to ``dst``.

    Smoothing gives probability only to valid successors, so this keeps the learned
    chain from, say, jumping from 100 m before the line straight into a collision. It
    is physics and the light cycle, nothing learned: the light shows one colour and moves
    green → yellow → red → green; the car does not reverse over the line and reaches it
    only from near it while moving; it is in the crossing only over the line; it cannot
    be "unable to stop" while standing or once over the line; it collides only in the
    crossing, having been there or been moving.
    """
    src_color, dst_color = _color(src), _color(dst)
    if src_color is None or dst_color is None:
        return False
    if dst_color != src_color and dst_color != _NEXT_COLOR[src_color]:
        return False
    if src[_PAST] and not dst[_PAST]:
        return False
    if dst[_PAST] and not src[_PAST] and not (src[_NEAR] and src[_MOVING]):
        return False
    if dst[_PAST] and (dst[_NEAR] or dst[_CANNOT_STOP]):
        return False
    if dst[_IN_CROSSING] and not dst[_PAST]:
        return False
    if dst[_CANNOT_STOP] and not dst[_MOVING]:
        return False
    if dst[_COLLISION] and not (dst[_IN_CROSSING] and (src[_IN_CROSSING] or src[_MOVING])):  # noqa: SIM103 - one rule per line
        return False
    return True
