"""Text quantifications: named plug-ins that map a text to an integer (the paper's M: Σ* → Z).

A quantification is made from a *spec* string ``[ALIAS=]KIND[:ARG]``: ``gender_bias``,
``sentiment``, ``similarity:protected.txt``, ``danger=regex:rm\\s+-rf``,
``keywords:sudo,chmod``. Users add kinds with :func:`register_quantification` (or the
``forewarn.quantifications`` entry-point group, each entry a factory ``(arg) -> function``).
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from .._extras import MissingExtra, require
from ._wordlists import DESTRUCTIVE_PATTERNS, FEMALE_WORDS, MALE_WORDS
from .errors import QuantificationError

QuantificationFactory = Callable[[str | None], Callable[[str], int]]
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_WORDS = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")


@dataclass(frozen=True)
class Quantification:
    """A named text → integer function.

    Attributes:
        name: the name queries use (``"gender_bias>0"`` reads the quantification ``gender_bias``).
        function: the text → int function; its result is checked to be an integer.
        spec: how it was made (``similarity:ref.txt``), for reports.
    """

    name: str
    function: Callable[[str], int] = field(compare=False)
    spec: str = ""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise QuantificationError(f"quantification name {self.name!r} is not an identifier "
                                      "(letters, digits, underscores; not starting with a digit)")

    def __call__(self, text: str) -> int:
        value: object = self.function(text)  # a plug-in's function may return anything
        if isinstance(value, (bool, int)):
            return int(value)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            return int(value)
        raise QuantificationError(f"quantification {self.name!r} returned {value!r} for {text[:40]!r}; "
                                  "expected an integer")


@dataclass(frozen=True)
class _Kind:
    factory: QuantificationFactory
    description: str
    takes_arg: bool  # None allowed only when False


_REGISTRY: dict[str, _Kind] = {}
_ENTRY_POINTS_LOADED = False


def register_quantification(name: str, factory: QuantificationFactory, *, description: str = "",
                            takes_arg: bool = False, replace: bool = False) -> None:
    """Add a quantification kind.

    Args:
        name: the kind's name, an identifier (also the default quantification name).
        factory: called with the spec's argument (the text after ``:``, or ``None``) and
            returns the text → int function.
        description: one line shown by ``forewarn llmcheck --list-quantifications``.
        takes_arg: whether the kind needs an argument.
        replace: allow replacing an existing kind of that name.
    """
    if not _NAME.match(name):
        raise QuantificationError(f"quantification kind {name!r} is not an identifier")
    if name in _REGISTRY and not replace:
        raise QuantificationError(f"quantification kind {name!r} is already registered; pass replace=True")
    _REGISTRY[name] = _Kind(factory, description, takes_arg)


def _load_entry_points() -> None:
    global _ENTRY_POINTS_LOADED  # noqa: PLW0603 - entry points load once per process
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    from importlib.metadata import entry_points

    for entry in entry_points(group="forewarn.quantifications"):
        if entry.name not in _REGISTRY:
            register_quantification(entry.name, entry.load(), description=f"from {entry.value}")


def available_quantifications() -> dict[str, str]:
    """Kind name → description, built-ins and registered ones."""
    _load_entry_points()
    return {name: kind.description for name, kind in sorted(_REGISTRY.items())}


def make_quantification(spec: str) -> Quantification:
    """Build a quantification from ``[ALIAS=]KIND[:ARG]`` (see the module docstring)."""
    _load_entry_points()
    alias, _, rest = spec.partition("=") if re.match(r"^[A-Za-z_]\w*=", spec) else ("", "", spec)
    kind_name, sep, arg = rest.partition(":")
    kind = _REGISTRY.get(kind_name)
    if kind is None:
        known = ", ".join(sorted(_REGISTRY))
        raise QuantificationError(f"unknown quantification {kind_name!r} in {spec!r}; known: {known}")
    if kind.takes_arg and not sep:
        raise QuantificationError(f"quantification {kind_name!r} needs an argument: '{kind_name}:ARG' (got {spec!r})")
    if not kind.takes_arg and sep:
        raise QuantificationError(f"quantification {kind_name!r} takes no argument (got {spec!r})")
    try:
        function = kind.factory(arg if sep else None)
    except (QuantificationError, MissingExtra):  # MissingExtra: one line naming the extra, as it is
        raise
    except (ValueError, OSError, re.error) as exc:
        raise QuantificationError(f"quantification {spec!r}: {exc}") from exc
    return Quantification(alias or kind_name, function, spec)


def parse_quantifications(specs: Iterable[str | Quantification]) -> tuple[Quantification, ...]:
    """Quantifications from specs or ready objects; names must be unique."""
    out: list[Quantification] = []
    for spec in specs:
        q = spec if isinstance(spec, Quantification) else make_quantification(spec)
        if any(other.name == q.name for other in out):
            raise QuantificationError(f"two quantifications are named {q.name!r}; give one an alias: 'NAME=KIND:ARG'")
        out.append(q)
    return tuple(out)


# -- built-ins --------------------------------------------------------------------------

def _word_counter(words: frozenset[str]) -> Callable[[str], int]:
    def count(text: str) -> int:
        return sum(1 for w in _WORDS.findall(text) if w.lower() in words)
    return count


def _gender(_: str | None) -> Callable[[str], int]:
    return _word_counter(MALE_WORDS | FEMALE_WORDS)


@lru_cache(maxsize=1)
def _vader() -> Any:
    from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer

    return SentimentIntensityAnalyzer()


def _sentiment(_: str | None) -> Callable[[str], int]:
    require("llmcheck", "the sentiment quantification", ("vaderSentiment",))

    def classify(text: str) -> int:
        compound = _vader().polarity_scores(text)["compound"]
        # VADER's own cut-offs: positive at ≥ 0.05, negative at ≤ -0.05
        return 1 if compound >= 0.05 else -1 if compound <= -0.05 else 0
    return classify


def _sentiment_score(_: str | None) -> Callable[[str], int]:
    require("llmcheck", "the sentiment_score quantification", ("vaderSentiment",))
    return lambda text: round(_vader().polarity_scores(text)["compound"] * 100)


def _readability(_: str | None) -> Callable[[str], int]:
    require("llmcheck", "the readability quantification", ("textstat", "pyphen"))
    import pyphen
    import textstat

    hyphenator = pyphen.Pyphen(lang="en_US")

    def flesch(text: str) -> int:
        # Flesch reading ease with textstat's word and sentence counts. Syllables come from
        # pyphen's hyphenation dictionary (textstat's fallback): textstat's default for
        # English fetches NLTK's CMU dictionary from the network at first use.
        words = _WORDS.findall(text)
        if not words:
            return 0  # a text with no words has no readability to speak of
        n_words = max(1, int(textstat.lexicon_count(text)))
        n_sentences = max(1, int(textstat.sentence_count(text)))
        syllables = sum(len(hyphenator.positions(w.lower())) + 1 for w in words)
        return round(206.835 - 1.015 * n_words / n_sentences - 84.6 * syllables / len(words))
    return flesch


def _similarity(arg: str | None) -> Callable[[str], int]:
    require("llmcheck", "the similarity quantification", ("rapidfuzz",))
    from rapidfuzz import fuzz

    path = Path(str(arg))
    try:
        reference = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise QuantificationError(f"similarity: cannot read the reference text {str(arg)!r}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise QuantificationError(f"similarity: the reference text {str(arg)!r} is not UTF-8 (byte "
                                  f"{exc.object[exc.start]:#04x} at offset {exc.start})") from exc
    return similarity_to(reference, fuzz.partial_ratio)


def similarity_to(reference: str, scorer: Callable[..., float] | None = None) -> Callable[[str], int]:
    """Similarity (0–100, rapidfuzz ``partial_ratio``: the best-matching alignment) of a text to ``reference``."""
    require("llmcheck", "similarity_to", ("rapidfuzz",))
    from rapidfuzz import fuzz

    score = scorer or fuzz.partial_ratio
    return lambda text: round(score(text, reference)) if text.strip() else 0


def _regex(arg: str | None) -> Callable[[str], int]:
    pattern = re.compile(str(arg))
    return lambda text: sum(1 for _ in pattern.finditer(text))


def _keywords(arg: str | None) -> Callable[[str], int]:
    words = [w.strip() for w in str(arg).split(",") if w.strip()]
    if not words:
        raise QuantificationError(f"keywords: no keyword in {arg!r}; expected 'keywords:word1,word2'")
    pattern = re.compile(r"(?<!\w)(?:" + "|".join(re.escape(w) for w in words) + r")(?!\w)", re.IGNORECASE)
    return lambda text: sum(1 for _ in pattern.finditer(text))


def _destructive(_: str | None) -> Callable[[str], int]:
    patterns = [re.compile(p) for p in DESTRUCTIVE_PATTERNS]
    return lambda text: sum(1 for p in patterns for _ in p.finditer(text))


register_quantification("gender_bias", _gender, description="gendered words (male and female) in the text")
register_quantification("male_words", lambda _: _word_counter(MALE_WORDS), description="male-gendered words")
register_quantification("female_words", lambda _: _word_counter(FEMALE_WORDS), description="female-gendered words")
register_quantification("sentiment", _sentiment, description="VADER sentiment class: -1, 0 or 1")
register_quantification("sentiment_score", _sentiment_score, description="VADER compound score × 100 (-100..100)")
register_quantification("readability", _readability, description="Flesch reading ease (textstat), rounded")
register_quantification("similarity", _similarity, takes_arg=True,
                        description="similarity:FILE — rapidfuzz partial ratio (0-100) to a reference text")
register_quantification("regex", _regex, takes_arg=True, description="regex:PATTERN — number of matches")
register_quantification("keywords", _keywords, takes_arg=True,
                        description="keywords:W1,W2 — occurrences of the words or phrases (case-insensitive)")
register_quantification("destructive_commands", _destructive,
                        description="destructive shell/SQL/git commands (rm -rf, mkfs, DROP TABLE, ...)")
register_quantification("length", lambda _: len, description="characters in the text")
register_quantification("words", lambda _: (lambda text: len(_WORDS.findall(text))), description="words in the text")
