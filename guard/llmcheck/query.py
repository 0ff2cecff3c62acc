"""Queries: a PCTL property over labels generated from quantification values.

A label is either a comparison of a quantification with an integer, ``"gender_bias>0"``,
``"sentiment<=-1"``, ``"similarity>=80"`` (written in quotes, or bare as in the paper:
``P=? [F gender_bias>0]``), or a reserved label: ``init`` (the start text), ``leaf``
(depth L reached), ``ended`` (the model ended the text), ``cut`` (not expanded: budget),
``terminal`` (the unexplored mass). Storm only takes identifiers as labels, so each
comparison is renamed (``gender_bias_gt_0``) in the formula Storm sees.
"""
from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .errors import QueryError

RESERVED_LABELS = ("init", "leaf", "ended", "cut", "terminal")
_OPS: dict[str, tuple[str, Callable[[int, int], bool]]] = {
    ">=": ("ge", operator.ge), "<=": ("le", operator.le), "!=": ("ne", operator.ne),
    "==": ("eq", operator.eq), "=": ("eq", operator.eq), ">": ("gt", operator.gt), "<": ("lt", operator.lt),
}
_COMPARISON = re.compile(r"^\s*([A-Za-z_]\w*)\s*(>=|<=|!=|==|=|>|<)\s*([+-]?\d+)\s*$")
_TOP = re.compile(r"^\s*P\s*(?:(=\s*\?)|(<=|>=|<|>)\s*([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?))\s*\[(.*)\]\s*$", re.DOTALL)
_QUOTED = re.compile(r'"([^"]*)"')


@dataclass(frozen=True)
class Comparison:
    """``quantity op value``, e.g. ``gender_bias > 0``."""

    quantity: str
    op: str
    value: int

    @property
    def text(self) -> str:
        return f"{self.quantity}{self.op}{self.value}"

    @property
    def storm_label(self) -> str:
        name, _ = _OPS[self.op]
        number = f"m{-self.value}" if self.value < 0 else str(self.value)
        return f"{self.quantity}_{name}_{number}"

    def holds(self, value: int) -> bool:
        return _OPS[self.op][1](value, self.value)


@dataclass(frozen=True)
class Query:
    """A parsed property.

    Attributes:
        text: the property as the user wrote it.
        path: the path formula inside ``P[...]``, with Storm label names.
        comparisons: the comparison labels, by Storm label name.
        reserved: the reserved labels it uses.
        bound: for ``P>=0.9 [...]``, the operator and threshold (the answer is then a verdict).
    """

    text: str
    path: str
    comparisons: dict[str, Comparison]
    reserved: tuple[str, ...]
    bound: tuple[str, float] | None = None

    def formula(self, operator_: str = "P") -> str:
        """The Storm formula: ``P=? [...]``, or ``Pmin=?``/``Pmax=?`` for the bounds."""
        return f"{operator_}=? [{self.path}]"

    @property
    def quantities(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.quantity for c in self.comparisons.values()))

    @property
    def atoms(self) -> tuple[str, ...]:
        """Every Storm label the formula reads, comparisons first."""
        return tuple(self.comparisons) + tuple(r for r in self.reserved if r not in self.comparisons)

    def verdict(self, value: float) -> bool | None:
        if self.bound is None:
            return None
        op, threshold = self.bound
        return bool(_OPS[op][1](value, threshold))  # type: ignore[arg-type]


def parse_query(text: str, quantities: Iterable[str] = ()) -> Query:
    """Parse ``P=? [path formula]`` (or ``P>=b [...]``) and collect its labels.

    Args:
        text: the property.
        quantities: quantification names that may appear bare (unquoted) in comparisons.
    """
    top = _TOP.match(text)
    if top is None:
        raise QueryError(f"expected a probability query 'P=? [...]' or 'P>=b [...]', got {text!r}")
    bound = None if top.group(1) else (top.group(2), float(top.group(3)))
    if bound is not None and not 0.0 <= bound[1] <= 1.0:
        raise QueryError(f"the probability bound in {text!r} must lie in [0, 1]")
    body = top.group(4)
    names = sorted(set(quantities), key=len, reverse=True)
    if names:
        # the paper writes comparisons bare (P=? [F gender>0]); quote those outside quotes
        bare = re.compile(r'(?<![\w"])(' + "|".join(map(re.escape, names)) + r')\s*(>=|<=|!=|==|=|>|<)\s*([+-]?\d+)')
        parts = re.split(r'("[^"]*")', body)
        body = "".join(p if p.startswith('"') else bare.sub(lambda m: f'"{m.group(1)}{m.group(2)}{m.group(3)}"', p)
                       for p in parts)
    comparisons: dict[str, Comparison] = {}
    reserved: list[str] = []

    def rename(match: re.Match[str]) -> str:
        label = match.group(1)
        if label in RESERVED_LABELS:
            if label not in reserved:
                reserved.append(label)
            return match.group(0)
        found = _COMPARISON.match(label)
        if found is None:
            hint = f' (did you mean "{label}>0"?)' if re.fullmatch(r"[A-Za-z_]\w*", label) else ""
            raise QueryError(f"label {label!r} in {text!r} is neither a comparison 'QUANTITY OP INTEGER' "
                             f"nor one of {', '.join(RESERVED_LABELS)}{hint}")
        comparison = Comparison(found.group(1), found.group(2), int(found.group(3)))
        comparisons.setdefault(comparison.storm_label, comparison)
        return f'"{comparison.storm_label}"'

    path = _QUOTED.sub(rename, body)
    if re.search(r"\bP\s*(?:min|max)?\s*(?:=\s*\?|[<>]=?)", path):
        raise QueryError(f"nested probability operators are not supported in {text!r}")
    return Query(text, path.strip(), comparisons, tuple(reserved), bound)
