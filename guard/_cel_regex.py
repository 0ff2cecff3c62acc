"""CEL's ``matches`` at the cost of a search, not of a compilation: patterns compiled once, with RE2.

The CEL package compiles the pattern of a ``matches`` call on every evaluation (1.5–3.4 ms for
the patterns discovery proposes), and predicates run on every new text. So the expressions
Forewarn compiles are rewritten, token by token (never inside a string literal or a comment),
``x.matches(p)`` into ``x.MATCHES(p)`` and ``matches(x, p)`` into ``MATCHES(x, p)``, where
``MATCHES`` (:data:`FUNCTION`) is bound in every context to :func:`search`: the pattern is
compiled once (a bounded cache) by RE2, whose search is linear in the text, so no text an agent
writes can make a pattern backtrack.

The answer is the built-in's, to the bit: CEL's engine (Rust's ``regex``) reads ``\\w``, ``\\d``,
``\\s`` as Unicode classes and RE2 as ASCII ones, so they are rewritten into the Unicode classes
RE2 spells out; ``\\b`` and ``\\B`` cannot be, so on a text holding a non-ASCII word character a
pattern using them is answered by the built-in, unless the pattern without its ``\\b`` does not occur
in the text either (RE2 tells that first). A pattern written in syntax the two engines might
read apart (Rust's nested classes and class operators, a ``{`` that is not a plain count, an
escape outside a known list, anything RE2 rejects) is answered by the built-in whatever the
text. A pattern the built-in rejects is an error, as before: at load for a literal pattern.
"""
from __future__ import annotations

import re
from typing import Any

import cel
import re2

from ._cel_fields import _mask

FUNCTION = "__forewarn_matches"
CACHE_LIMIT = 512  # compiled patterns kept; past it the cache is emptied

_CALL = re.compile(r"(?<![\w])matches(?=\s*\()")
# Rust's \w: Alphabetic (letters, Nl, Other_Alphabetic), marks, Nd, Pc, Join_Control. The Other_Alphabetic
# code points outside letters and marks are the circled and squared Latin letters listed here.
_WORD = (r"\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\x{24B6}-\x{24E9}\x{1F130}-\x{1F149}"
         r"\x{1F150}-\x{1F169}\x{1F170}-\x{1F189}")
_SPACE = r"\t-\r \x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}"  # White_Space
# a non-ASCII word character: where RE2's ASCII \b and Rust's Unicode \b may part
_NON_ASCII_WORD = "|".join(f"[^\\x00-\\x7f\\P{{{p}}}]" for p in ("L", "Nl", "M", "Nd", "Pc")) + \
    r"|[\x{200C}\x{200D}\x{24B6}-\x{24E9}\x{1F130}-\x{1F189}]"
_SAFE_ESCAPES = frozenset("\\.+*?()[]{}|^$-/#&~ ntrfvaAzpPx") | frozenset("dDsSwWbB")
_COUNT = re.compile(r"\{[0-9]+(?:,[0-9]*)?\}")
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a rejected pattern is answered by the built-in, not logged to stderr
_OPTIONS.never_capture = True  # a yes or no is asked, never a group
_BUILTIN = cel.compile("t.matches(p)")

# pattern -> (RE2 program or None for the built-in, whether it uses \b or \B, the program without its \b or None)
_cache: dict[str, tuple[Any, bool, Any]] = {}
_non_ascii_word = re2.compile(_NON_ASCII_WORD, _OPTIONS)


def rewrite_matches(expression: str) -> str:
    """The expression with each ``matches`` call (either style) calling :data:`FUNCTION` instead."""
    masked = _mask(expression)
    pieces, last = [], 0
    for match in _CALL.finditer(masked):
        pieces += [expression[last:match.start()], FUNCTION]
        last = match.end()
    return "".join(pieces) + expression[last:]


def literal_patterns(expression: str) -> list[str]:
    """The patterns of the expression's ``matches`` calls that are constants (a literal, or literals joined)."""
    masked = _mask(expression)
    found = []
    for match in _CALL.finditer(masked):
        method = masked[:match.start()].rstrip().endswith(".")
        start = masked.index("(", match.end()) + 1
        depth, commas, stop = 0, [], len(masked)
        for i in range(start, len(masked)):
            c = masked[i]
            if c in "([{":
                depth += 1
            elif c in ")]}":
                if depth == 0:
                    stop = i
                    break
                depth -= 1
            elif c == "," and depth == 0:
                commas.append(i)
        if len(commas) != (0 if method else 1):
            continue  # the wrong arity: the built-in's own error stands
        argument = expression[commas[-1] + 1 if commas else start:stop]
        try:
            program = cel.compile(argument)
            value = program.execute({}) if not program.variables() else None
        except Exception:  # not a constant (a field, a call): checked when it is first searched with
            continue
        if isinstance(value, str):
            found.append(value)
    return found


def check_pattern(pattern: str) -> None:
    """Raise ValueError (one line) when the built-in rejects the pattern; compile it into the cache."""
    _compiled(pattern)


def search(text: Any, pattern: Any) -> bool:
    """``text.matches(pattern)``, exactly as CEL answers it: whether the pattern occurs anywhere in the text."""
    if text.__class__ is not str or pattern.__class__ is not str:
        raise TypeError(f"matches takes a string and a pattern string, not {type(text).__name__} "
                        f"and {type(pattern).__name__}")
    entry = _cache.get(pattern)
    if entry is None:
        entry = _compiled(pattern)
    program, boundary, relaxed = entry
    if program is None:
        return bool(_BUILTIN.execute({"t": text, "p": pattern}))
    if boundary and not text.isascii() and _non_ascii_word.search(text) is not None:
        # the pattern without its \b matches wherever the pattern does (an assertion dropped only adds
        # matches): where it does not match, neither does the pattern, and RE2 has answered
        if relaxed is not None and relaxed.match(text) is None:
            return False
        return bool(_BUILTIN.execute({"t": text, "p": pattern}))
    return program.match(text) is not None


def _compiled(pattern: str) -> tuple[Any, bool, Any]:
    entry = _cache.get(pattern)
    if entry is not None:
        return entry
    try:  # the built-in's verdict on the pattern, once: the same errors as before the rewriting
        _BUILTIN.execute({"t": "", "p": pattern})
    except Exception as exc:
        # CEL's message, without its wrapping: "... regex parse error: (unclosed ^ error: unclosed group. Check ..."
        first = " ".join(str(exc).split())
        reason = first.partition(" error: ")[2].rpartition(" error: ")[2].removesuffix(
            " Check function arguments and their types.").rstrip(".") or first
        raise ValueError(f"pattern {pattern!r} is not a valid regular expression: {reason[:200]}") from None
    program = relaxed = None
    boundary = "\\b" in pattern or "\\B" in pattern
    for relax in (False, True):
        translated = None if relax and (program is None or not boundary) else _translate(pattern, relax)
        if translated is None:
            continue
        try:
            # anchored at the start behind a lazy prefix: "occurs anywhere" asked as a match from 0, which the
            # forward DFA answers alone (an unanchored search also runs a reverse DFA for the match's start,
            # building its states on each new text: 330 µs at p99 against 35 µs on the instruction shape)
            compiled = re2.compile(f"(?s:.*?)(?:{translated})", _OPTIONS)
        except Exception:  # RE2 cannot read it: the built-in answers
            continue
        if relax:
            relaxed = compiled
        else:
            program = compiled
    entry = (program, boundary, relaxed)
    if len(_cache) >= CACHE_LIMIT:
        _cache.clear()
    _cache[pattern] = entry
    return entry


def _translate(pattern: str, relax: bool = False) -> str | None:
    """The pattern in RE2's syntax with Rust's Unicode meaning, or None when the two may read it apart.

    With ``relax``: the pattern without its ``\\b`` assertions (None when it has a ``\\B``)."""
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n or pattern[i + 1] not in _SAFE_ESCAPES:
                return None
            e = pattern[i + 1]
            i += 2
            if e in "dD":
                out.append("\\p{Nd}" if e == "d" else "\\P{Nd}")
            elif e in "sw":
                body = _SPACE if e == "s" else _WORD
                out.append(body if in_class else f"[{body}]")
            elif e in "SW":
                if in_class:  # a negated class inside a class: no RE2 spelling
                    return None
                out.append(f"[^{_SPACE if e == 'S' else _WORD}]")
            elif relax and e in "bB" and not in_class:
                if e == "B":
                    return None
            elif e in "xpP" and pattern.startswith("{", i):  # \x{41}, \p{Greek}: the braces are the escape's
                end = pattern.find("}", i)
                if end < 0:
                    return None
                out.append("\\" + e + pattern[i:end + 1])
                i = end + 1
            else:
                out.append("\\" + e)
            continue
        if in_class:
            if c == "[":
                if not pattern.startswith("[:", i):
                    return None  # Rust's nested class
                end = pattern.find(":]", i + 2)
                if end < 0:
                    return None
                out.append(pattern[i:end + 2])
                i = end + 2
                continue
            if pattern.startswith(("&&", "--", "~~"), i):
                return None  # Rust's class operators
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            out.append(c)
            i += 1
            if pattern.startswith("^", i):
                out.append("^")
                i += 1
            if pattern.startswith("]", i):  # a leading ] is a literal in both
                out.append("]")
                i += 1
            continue
        elif c == "{" and not _COUNT.match(pattern, i):
            return None  # RE2 reads a literal brace where Rust may read a count
        out.append(c)
        i += 1
    return "".join(out)
