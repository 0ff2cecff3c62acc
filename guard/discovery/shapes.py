"""Candidates over text: the shape of an instruction to an agent, read with fixed patterns.

A prompt injection is an instruction addressed to the agent that asks for an action on something
outside the task: "AI agent, you must send …", "… transfer 480 EUR to DE89 3704 …". Its words change
with each attacker (a goal never seen, a phrasing never seen), its shape less: a word naming an
automated reader followed by a verb of a tool's action, or such a verb followed by a URL, an e-mail
address, an account number or a shell pipe. Phrases learned from the runs (:mod:`.texts`) tell the
goals and phrasings the training runs showed; these patterns are fixed, never learned from the runs,
so that what the training runs teach about the shape carries to an attack whose words they never held.

Each is a CEL ``matches`` (an unanchored regular expression, the same bit as Python's ``re.search``:
the patterns use only what both read alike), proposed on every text field beside its phrases; the
search keeps one only where it improves held-out prediction.
"""
from __future__ import annotations

import re

# words that name an automated reader (the agent), as a text addresses it
ADDRESSEES = r"\b(?:AI|LLM|[Aa]ssistants?|[Aa]gents?|[Mm]odels?|[Bb]ots?|[Cc]hatbots?|[Aa]utomated)\b"
# verbs of what an agent's tools do to the world (send, pay, delete, change, publish, run, grant), any case
ACTION_VERBS = (r"\b(?i:send|e-mail|email|forward|share|transfer|pay|wire|settle|delete|remove|erase|wipe|set|change"
                r"|update|switch|disable|enable|upload|post|push|publish|mirror|sync|copy|run|execute|install"
                r"|download|grant|add|invite|give)\b")
# what an action is done *to* outside the task: a URL, an e-mail address, an account number, a pipe into a shell
ARTEFACTS = (r"(?:https?://|[A-Za-z0-9._-]+@[A-Za-z0-9-]+\.[a-z]{2,}|\b[A-Z]{2}[0-9]{2}(?: [A-Z0-9]{4}){2,}"
             r"|[|] *(?:sh|bash)\b)")
# within one sentence: no sentence end between (a dot inside a path or a host, ".env", "~/.ssh", is no end)
_CLAUSE = r"(?:[^.!?\n]|[.][^ \n]){0,80}"

ADDRESSED_ACTION = ADDRESSEES + _CLAUSE + ACTION_VERBS  # "AI agent, you must send …"
ACTION_ON_ARTEFACT = ACTION_VERBS + _CLAUSE + ARTEFACTS  # "… transfer 480 EUR to DE89 3704 …"

# (name, what it says, pattern). One bit for either shape: offered apart, the search took whichever shape the
# training runs' attacks showed more of, and missed attacks of the other (a goal without a URL or an account,
# a phrasing that names no agent): warned ahead 37.7 % on goals and phrasings never seen, 63.0 % with one bit
SHAPES: tuple[tuple[str, str, str], ...] = (
    ("instruction_shaped", "holds an instruction to an agent: an automated reader addressed and an action named, "
                           "or an action on a URL, an e-mail address, an account or a shell, in one sentence",
     f"{ADDRESSED_ACTION}|{ACTION_ON_ARTEFACT}"),
)


def compiled_shapes() -> list[tuple[str, str, str, re.Pattern[str]]]:
    """Each shape with its pattern compiled for Python's twin of CEL's ``matches``."""
    return [(name, says, pattern, re.compile(pattern)) for name, says, pattern in SHAPES]
