"""Secrets in tool results redacted before the model reads them, where the operator asks (``redact:``).

A tool's result enters the model's context, and from there any later call's arguments. With
``redact`` set, every text in a ``tools/call`` result (its ``content`` text blocks, embedded resources'
text, and the strings of ``structuredContent``) has the well-known token and key formats — AWS access
keys, GitHub and Slack tokens, JWTs, private-key blocks, … — and, if asked, long high-entropy strings
replaced by ``[REDACTED:KIND]``. :func:`redact_result` returns the new result and one
:class:`Redaction` per replacement: its kind and where (the content block or JSON path, and the
offset), never the value. Pure; the relays call it after the guard has read the result as it came
into the session's state (so ``secrets_read`` still sees what the model no longer does).

With the ``pii`` extra, personal data too (``redact: {pii: [email, phone, credit_card, ...]}``:
:mod:`.pii` names what is found and how), masked and recorded the same way (``[REDACTED:email]``).
"""
from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from . import pii

# kind → pattern (the whole match is replaced)
PATTERNS: dict[str, re.Pattern[str]] = {
    "private_key": re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)"),
    "aws_access_key": re.compile(r"(?<![A-Z0-9])(AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Z0-9])"),
    "aws_secret_key": re.compile(r"(?i)(?<=aws_secret_access_key)(\s*[=:]\s*[\"']?)[A-Za-z0-9/+=]{40}"),
    "github_token": re.compile(r"(?<![A-Za-z0-9_])(gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})"),
    "slack_token": re.compile(r"(?<![A-Za-z0-9-])xox[abposr]-[A-Za-z0-9-]{10,200}"),
    "slack_webhook": re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+"),
    "jwt": re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}"),
    "google_api_key": re.compile(r"(?<![A-Za-z0-9_-])AIza[0-9A-Za-z_-]{35}"),
    "openai_key": re.compile(r"(?<![A-Za-z0-9_-])sk-(proj-|ant-)?[A-Za-z0-9_-]{20,}"),
    "stripe_key": re.compile(r"(?<![A-Za-z0-9_])(sk|rk)_(live|test)_[A-Za-z0-9]{16,}"),
    "password_assignment": re.compile(r"(?i)(?<=password)(\s*[=:]\s*)[\"']?[^\s\"']{6,}"),
}
# a literal each kind's match holds (case as written; "i": in the lower-cased text): a pattern runs only on a text
# that holds its literal, since a regex that cannot start from a literal tries every position (most results hold none)
_LITERALS: dict[str, tuple[str, ...]] = {
    "private_key": ("PRIVATE KEY-----",), "aws_access_key": ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA"),
    "aws_secret_key": ("i", "aws_secret_access_key"), "slack_token": ("xox",),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "slack_webhook": ("hooks.slack.com",), "jwt": ("eyJ",), "google_api_key": ("AIza",), "openai_key": ("sk-",),
    "stripe_key": ("_live_", "_test_"), "password_assignment": ("i", "password"),
}
_CANDIDATE = re.compile(r"[A-Za-z0-9+/_=-]{24,}")  # a run that may be a generic secret (entropy decides)


@dataclass(frozen=True, slots=True)
class RedactPolicy:
    """What is redacted: ``kinds`` (of :data:`PATTERNS`; empty: none) and ``entropy`` (runs of 24+ token
    characters with at least ``min_entropy`` bits a character and both letters and digits)."""

    kinds: frozenset[str] = frozenset()
    entropy: bool = False
    min_entropy: float = 4.0
    pii: frozenset[str] = frozenset()  # personal data (of :data:`.pii.KINDS`), scored at least pii_threshold
    pii_threshold: float = 0.4  # (Presidio scores a phone number with no context words around it 0.4)

    def __post_init__(self) -> None:
        unknown = sorted(self.kinds - set(PATTERNS))
        if unknown:
            raise ConfigError(f"redact: unknown kind(s) {unknown}; known: {sorted(PATTERNS)}")
        unknown = sorted(self.pii - set(pii.KINDS))
        if unknown:
            raise ConfigError(f"redact.pii: unknown kind(s) {unknown}; known: {sorted(pii.KINDS)}")
        if not 0 <= self.pii_threshold <= 1:
            raise ConfigError(f"redact.pii_threshold: expected a score in [0, 1], got {self.pii_threshold}")

    @property
    def active(self) -> bool:
        return bool(self.kinds) or self.entropy or bool(self.pii)

    @classmethod
    def from_config(cls, data: Any) -> RedactPolicy:
        """From the config's ``redact`` field: ``off``, ``secrets`` (every kind and high entropy), ``pii``
        (every kind of personal data), ``all`` (both), a list of kinds (``entropy`` among them for high-entropy
        strings, personal data's kinds too), or a mapping ``{kinds: [...], entropy: bool, min_entropy: bits,
        pii: [...] or true, pii_threshold: score}``."""
        if data is None or data == "off" or data is False:
            return cls()
        if data == "secrets" or data is True:
            return cls(frozenset(PATTERNS), True)
        if data in ("pii", "all"):
            every = data == "all"
            return cls(frozenset(PATTERNS) if every else frozenset(), every, pii=frozenset(pii.KINDS))
        if isinstance(data, list):
            names = {str(k) for k in data}
            return cls(frozenset(names - {"entropy"} - set(pii.KINDS)), "entropy" in names,
                       pii=frozenset(names & set(pii.KINDS)))
        if isinstance(data, Mapping):
            extra = sorted(set(data) - {"kinds", "entropy", "min_entropy", "pii", "pii_threshold"})
            if extra:
                raise ConfigError(f"field 'redact': unknown field(s) {extra}; known: entropy, kinds, min_entropy, "
                                  f"pii, pii_threshold")
            kinds = data.get("kinds", sorted(PATTERNS))
            if not isinstance(kinds, list):
                raise ConfigError(f"field 'redact.kinds': expected a list of kinds, got {kinds!r}")
            personal = data.get("pii", [])
            personal = sorted(pii.KINDS) if personal is True else [] if personal is False else personal
            if not isinstance(personal, list):
                raise ConfigError(f"field 'redact.pii': expected true or a list of kinds, got {personal!r}")
            return cls(frozenset(str(k) for k in kinds), bool(data.get("entropy", True)),
                       float(data.get("min_entropy", 4.0)), frozenset(str(k) for k in personal),
                       float(data.get("pii_threshold", 0.4)))
        raise ConfigError(f"field 'redact': expected off, secrets, pii, all, a list of kinds or a mapping, "
                          f"got {data!r}")


@dataclass(frozen=True, slots=True)
class Redaction:
    """One replaced secret: its ``kind``, ``where`` (``content[0].text``, ``structuredContent.key``), the
    character ``offset`` there and its ``length`` — never the value."""

    kind: str
    where: str
    offset: int
    length: int

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "where": self.where, "offset": self.offset, "length": self.length}


def redact_text(text: str, policy: RedactPolicy, where: str = "text") -> tuple[str, list[Redaction]]:
    """``text`` with what ``policy`` names replaced by ``[REDACTED:KIND]``, and what was replaced (offsets in
    the original text)."""
    spans: list[tuple[int, int, str]] = []
    lower: str | None = None
    for kind in sorted(policy.kinds):
        literals = _LITERALS[kind]
        if literals[0] == "i":
            lower = text.lower() if lower is None else lower
            if not any(word in lower for word in literals[1:]):
                continue
        elif not any(word in text for word in literals):
            continue
        for hit in PATTERNS[kind].finditer(text):
            start = hit.end(1) if kind in ("aws_secret_key", "password_assignment") else hit.start()
            if hit.end() > start:
                spans.append((start, hit.end(), kind))
    if policy.entropy and max(map(len, text.split()), default=0) >= 24:
        for hit in _CANDIDATE.finditer(text):
            run = hit.group()
            if _generic(run, policy.min_entropy):
                spans.append((hit.start(), hit.end(), "high_entropy"))
    if policy.pii:
        spans += pii.find(text, sorted(policy.pii), policy.pii_threshold)
    if not spans:
        return text, []
    spans.sort(key=lambda s: (s[0], -(s[1] - s[0])))
    out, records, at = [], [], 0
    for start, end, kind in spans:
        if start < at:  # (inside a span already replaced: a JWT is also high-entropy)
            continue
        out += [text[at:start], f"[REDACTED:{kind}]"]
        records.append(Redaction(kind, where, start, end - start))
        at = end
    out.append(text[at:])
    return "".join(out), records


def redact_result(result: Mapping[str, Any], policy: RedactPolicy) -> tuple[Mapping[str, Any], list[Redaction]]:
    """A ``tools/call`` result with its secrets redacted (the same object when there were none), and
    what was redacted."""
    if not policy.active:
        return result, []
    records: list[Redaction] = []
    content = result.get("content")
    new_content: list[Any] | None = None
    if isinstance(content, list):
        items = []
        for index, item in enumerate(content):
            items.append(_item(item, f"content[{index}]", policy, records))
        if records:
            new_content = items
    structured = result.get("structuredContent")
    before = len(records)
    new_structured = _value(structured, "structuredContent", policy, records, 0) if structured is not None else None
    if not records:
        return result, []
    out = dict(result)
    if new_content is not None:
        out["content"] = new_content
    if len(records) > before:
        out["structuredContent"] = new_structured
    return out, records


def redact_read(method: str, result: Mapping[str, Any], policy: RedactPolicy
                ) -> tuple[Mapping[str, Any], list[Redaction]]:
    """A ``resources/read`` result (its ``contents`` texts) or a ``prompts/get`` result (its ``messages``'
    content: text, or an embedded resource's text) with its secrets redacted, as :func:`redact_result` does
    for a call's (the same object when there were none)."""
    if not policy.active:
        return result, []
    field = "contents" if method == "resources/read" else "messages"
    items = result.get(field)
    if not isinstance(items, list):
        return result, []
    records: list[Redaction] = []
    out = []
    for index, item in enumerate(items):
        where = f"{field}[{index}]"
        if field == "messages" and isinstance(item, Mapping) and isinstance(item.get("content"), Mapping):
            content = _item(item["content"], f"{where}.content", policy, records)
            out.append(item if content is item["content"] else {**item, "content": content})
        else:
            out.append(_item(item, where, policy, records))
    if not records:
        return result, []
    return {**result, field: out}, records


def _item(item: Any, where: str, policy: RedactPolicy, records: list[Redaction]) -> Any:
    if not isinstance(item, Mapping):
        return item
    if isinstance(item.get("text"), str):
        text, found = redact_text(item["text"], policy, f"{where}.text")
        if found:
            records += found
            return {**item, "text": text}
    resource = item.get("resource")
    if isinstance(resource, Mapping) and isinstance(resource.get("text"), str):
        text, found = redact_text(resource["text"], policy, f"{where}.resource.text")
        if found:
            records += found
            return {**item, "resource": {**resource, "text": text}}
    return item


def _value(value: Any, where: str, policy: RedactPolicy, records: list[Redaction], depth: int) -> Any:
    if isinstance(value, str):
        text, found = redact_text(value, policy, where)
        records += found
        return text
    if depth > 64:
        return value
    if isinstance(value, Mapping):
        return {k: _value(v, f"{where}.{k}", policy, records, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_value(v, f"{where}[{i}]", policy, records, depth + 1) for i, v in enumerate(value)]
    return value


def _generic(run: str, min_entropy: float) -> bool:
    """A run of token characters that reads as a random secret: letters and digits mixed, high entropy."""
    if not (any(c.isdigit() for c in run) and any(c.isalpha() for c in run)):
        return False
    if run.isdigit() or re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", run):  # (git and sha hashes: not secrets)
        return False
    counts = Counter(run)
    bits = -sum(n / len(run) * math.log2(n / len(run)) for n in counts.values())
    return bits >= min_entropy

