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

from ...errors import InputError
from ..spec import RESERVED_NAMES

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
    # a byte order mark (YAML reads past it) would sit at the start of the spec's line after the header
    text = text.removeprefix("\ufeff")
    if not predicates:
        return top + text
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(root, yaml.MappingNode):
        raise InputError(f"{source}: a spec must be a YAML mapping")
    node = next((v for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == "predicates"), None)
    if not isinstance(node, yaml.MappingNode) or not node.value:
        raise InputError(f"{source}: 'predicates' must be a mapping")
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


def _key(mapping: yaml.MappingNode, name: str) -> yaml.Node | None:
    return next((v for k, v in mapping.value if isinstance(k, yaml.ScalarNode) and k.value == name), None)


def _after(text: str, node: yaml.MappingNode) -> int:
    """Where a line added to the block mapping ``node`` goes: after its last entry."""
    at: int = node.value[-1][1].end_mark.index
    if at > 0 and text[at - 1] != "\n":
        newline = text.find("\n", at)
        at = len(text) if newline < 0 else newline + 1
    return at


def memory_slot(text: str) -> bool:
    """Whether ``learning.memory.actions`` can be added to this spec's YAML: the spec does not set it,
    has not turned memory off, and writes ``learning`` and ``memory`` (where present) in block style."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if not isinstance(root, yaml.MappingNode):
        return False
    learning = _key(root, "learning")
    if learning is None:
        return True
    if not isinstance(learning, yaml.MappingNode) or learning.flow_style or not learning.value:
        return False
    memory = _key(learning, "memory")
    if memory is None:
        return True
    if not isinstance(memory, yaml.MappingNode) or memory.flow_style or not memory.value:
        return False
    return _key(memory, "actions") is None and _key(memory, "action_class") is None


def insert_action_memory(text: str, actions: int, action_class: str, comment: str) -> str:
    """``text`` with ``learning.memory.actions`` and ``action_class`` set (where :func:`memory_slot` allows)."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    assert isinstance(root, yaml.MappingNode)
    entries = [f"actions: {actions}", f"action_class: {action_class}"]
    learning = _key(root, "learning")
    if learning is None:
        block = f"# {comment}\nlearning:\n  memory:\n" + "".join(f"    {e}\n" for e in entries)
        # at the end of the document: before a `...` that ends it, if the spec writes one
        end = next((t.start_mark.index for t in yaml.scan(text, Loader=yaml.SafeLoader)
                    if isinstance(t, yaml.DocumentEndToken)), len(text))
        head = text[:end]
        return head + ("" if head.endswith("\n") or not head else "\n") + block + text[end:]
    assert isinstance(learning, yaml.MappingNode)
    memory = _key(learning, "memory")
    if memory is None:
        indent = " " * learning.value[0][0].start_mark.column
        block = f"{indent}# {comment}\n{indent}memory:\n" + "".join(f"{indent}  {e}\n" for e in entries)
        at = _after(text, learning)
    else:
        assert isinstance(memory, yaml.MappingNode)
        indent = " " * memory.value[0][0].start_mark.column
        block = f"{indent}# {comment}\n" + "".join(f"{indent}{e}\n" for e in entries)
        at = _after(text, memory)
    prefix = text[:at] if text[:at].endswith("\n") or not text[:at] else text[:at] + "\n"
    return prefix + block + text[at:]
