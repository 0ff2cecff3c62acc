from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forewarn.guard.llmcheck import (
    QuantificationError,
    available_quantifications,
    make_quantification,
    register_quantification,
)
from forewarn.guard.llmcheck.quantify import Quantification, parse_quantifications


@pytest.mark.parametrize(("spec", "text", "expected"), [
    ("gender_bias", "He told her that the king and the queen left.", 4),
    ("male_words", "He told her his plan.", 2),
    ("female_words", "He told her his plan.", 1),
    ("sentiment", "What a wonderful, happy day!", 1),
    ("sentiment", "This is a terrible, awful mess.", -1),
    ("sentiment", "The table is in the room.", 0),
    ("words", "Don't stop now.", 3),
    ("length", "abc", 3),
    ("destructive_commands", "sudo rm -rf / && mkfs.ext4 /dev/sda1; DROP TABLE users;", 3),
    ("destructive_commands", "ls -la && git status", 0),
    ("danger=regex:rm\\s+-rf", "rm -rf a; rm  -rf b", 2),
    ("keywords:sudo,rm -rf", "sudo rm -rf x; SUDO ls", 3),
])
def test_built_in_quantifications(spec: str, text: str, expected: int) -> None:
    assert make_quantification(spec)(text) == expected


def test_readability_is_flesch_reading_ease_without_network() -> None:
    q = make_quantification("readability")
    easy, hard = q("The cat sat on the mat."), q("Institutional administrative incomprehensibility notwithstanding.")
    assert easy > 90 > 0 > hard
    assert q("") == 0 and q("...") == 0


def test_similarity_reads_the_reference_file(tmp_path: Path) -> None:
    ref = tmp_path / "protected.txt"
    ref.write_text("It was the best of times, it was the worst of times", encoding="utf-8")
    q = make_quantification(f"similarity:{ref}")
    assert q("it was the best of times") >= 95 > 50 > q("a completely unrelated sentence about fish")
    assert q("   ") == 0
    with pytest.raises(QuantificationError, match="cannot read"):
        make_quantification(f"similarity:{tmp_path / 'missing.txt'}")


def test_aliases_and_spec_errors() -> None:
    assert make_quantification("cmds=destructive_commands").name == "cmds"
    with pytest.raises(QuantificationError, match="unknown quantification 'nope'"):
        make_quantification("nope")
    with pytest.raises(QuantificationError, match="needs an argument"):
        make_quantification("regex")
    with pytest.raises(QuantificationError, match="takes no argument"):
        make_quantification("sentiment:x")
    with pytest.raises(QuantificationError, match="regex:"):
        make_quantification("regex:(")
    with pytest.raises(QuantificationError, match="give one an alias"):
        parse_quantifications(["words", "words"])


def test_users_register_their_own() -> None:
    register_quantification("exclamations", lambda arg: lambda text: text.count("!"), description="bangs",
                            replace=True)
    assert "exclamations" in available_quantifications()
    assert make_quantification("exclamations")("hi!!") == 2
    with pytest.raises(QuantificationError, match="already registered"):
        register_quantification("exclamations", lambda arg: len)


def test_values_must_be_integers() -> None:
    def two(text: str) -> Any:  # a plug-in's function may return anything
        return 2.0

    assert Quantification("ok", two)("x") == 2
    with pytest.raises(QuantificationError, match="expected an integer"):
        Quantification("bad", lambda t: 0.5)("x")  # type: ignore[arg-type,return-value]
    with pytest.raises(QuantificationError, match="not an identifier"):
        Quantification("bad-name", len)
