"""Writing the discovered spec: the user's YAML as written, with the new predicates appended.

The user's predicates (their order is the bit order some valid-transition rules read by
position), ``unsafe``, monitors and comments are kept byte for byte; the new predicates
go after the last predicate, each with a comment saying what it added on held-out runs
and a ``description`` that says it in words, and a header comment sums up the search.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from ...errors import ForewarnError
from ..spec import RESERVED_NAMES

__all__ = ["NewPredicate", "unique_name", "insert_predicates"]

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class NewPredicate:
    name: str
    cel: str
    description: str
    comment: str  # what it added, one line


def unique_name(name: str, taken: set[str]) -> str:
    """``name`` made a valid predicate name not in ``taken`` (which it joins)."""
    import keyword

    base = name if _IDENT.match(name) and not keyword.iskeyword(name) and name not in RESERVED_NAMES else f"p_{name}"
    base = re.sub(r"[^A-Za-z0-9_]", "_", base)
    out, k = base, 2
    while out in taken:
        out, k = f"{base}_{k}", k + 1
    taken.add(out)
    return out


def _entry(p: NewPredicate, indent: str) -> str:
    body = yaml.safe_dump({p.name: {"cel": p.cel, "description": p.description}}, width=10**6, allow_unicode=True,
                          sort_keys=False, default_flow_style=False)
    lines = [f"{indent}# {p.comment}"] + [indent + line for line in body.splitlines()]
    return "\n".join(lines) + "\n"


def insert_predicates(text: str, predicates: Sequence[NewPredicate], header: Sequence[str], *,
                      source: str = "<spec>") -> str:
    """``text`` (a spec's YAML) with ``predicates`` appended to its ``predicates`` mapping and
    ``header`` as comment lines on top."""
    top = "".join(f"# {line}\n" for line in header)
    if not predicates:
        return top + text
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(root, yaml.MappingNode):
        raise ForewarnError(f"{source}: a spec must be a YAML mapping")
    node = next((v for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == "predicates"), None)
    if not isinstance(node, yaml.MappingNode) or not node.value:
        raise ForewarnError(f"{source}: 'predicates' must be a mapping")
    if node.flow_style:  # `predicates: {a: ..., b: ...}`: rewrite that mapping in block style
        start, end = node.start_mark.index, node.end_mark.index
        document = yaml.safe_load(text[start:end]) or {}
        for p in predicates:
            document[p.name] = {"cel": p.cel, "description": p.description}
        dumped = yaml.safe_dump(document, width=10**6, allow_unicode=True, sort_keys=False)
        block = "\n" + "".join(f"  {line}\n" for line in dumped.splitlines())
        return top + text[:start].rstrip(" ") + block.rstrip("\n") + text[end:]
    indent = " " * node.value[0][0].start_mark.column
    last = node.value[-1][1]
    at = last.end_mark.index
    # a block scalar or mapping ends at the start of the next line; a plain scalar at its last character
    if at > 0 and text[at - 1] != "\n":
        newline = text.find("\n", at)
        at = len(text) if newline < 0 else newline + 1
    prefix = text[:at] if text[:at].endswith("\n") or not text[:at] else text[:at] + "\n"
    added = "".join(_entry(p, indent) for p in predicates)
    return top + prefix + added + text[at:]
