"""A step's action as discovery reads it: the parts predicates can select (``action.verb``, ...).

Until the CEL ``action`` variable lands, this yields nothing (every action reads as missing).
"""
from __future__ import annotations

from typing import Any

from .columns import MISSING

__all__ = ["action_view"]


def action_view(action: Any) -> Any:
    return MISSING
