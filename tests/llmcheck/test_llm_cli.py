from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import stormpy
import typer
from typer.testing import CliRunner

from _llm_support import needs_hf
from forewarn.guard.cli.llmcheck import parse_sweep, register
from forewarn.guard.llmcheck import LLMCheckError

app = typer.Typer()


@app.callback()
def _root() -> None:
    """A stand-in for the forewarn app."""


register(app)
runner = CliRunner()
PROPERTY = 'P=? [F "gender_bias>0"]'


def run(*args: str) -> tuple[int, str, BaseException | None]:
    result = runner.invoke(app, ["llmcheck", *args])
    return result.exit_code, result.stdout, result.exception


def test_table_report(corpus_path: Path) -> None:
    code, out, exc = run("--model", f"ngram:{corpus_path}", "--prompt", "the player", "--alpha", "0.8", "--k", "3",
                         "--depth", "5", "--quantify", "gender_bias", "--property", PROPERTY)
    assert code == 0, exc
    for needle in ("probability", "with unexplored mass", "unexplored mass (terminal)", "states / transitions",
                   "model calls / batches", "satisfy the property", "violate it"):
        assert needle in out


def test_json_report_and_prism_export(corpus_path: Path, tmp_path: Path) -> None:
    target = tmp_path / "out.prism"
    code, out, exc = run("--model", f"ngram:{corpus_path}", "--ngram-order", "2", "--prompt", "the player",
                         "--property", PROPERTY, "--format", "json", "--export", "prism", "-o", str(target))
    assert code == 0, exc
    data = json.loads(out)
    assert data["lower"] <= data["value"] <= data["upper"]
    assert data["model"]["states"] > 1 and data["cost"]["model_calls"] == data["model"]["expanded"]
    assert data["export"] == str(target)
    program = stormpy.parse_prism_program(str(target))
    props = stormpy.parse_properties(data["storm_formula"], program)
    model = stormpy.build_model(program, props)
    values = stormpy.model_checking(model, props[0]).get_value_vector()
    assert math.isclose(values[int(model.initial_states[0])], data["value"], abs_tol=1e-9)


def test_sweep_as_written_in_the_issue(corpus_path: Path) -> None:
    code, out, exc = run("--model", f"ngram:{corpus_path}", "--prompt", "the player", "--property", PROPERTY,
                         "--format", "json", "--sweep", "alpha=0.5,0.8,0.9", "k=3,5,15")
    assert code == 0, exc
    points = json.loads(out)["points"]
    assert [(p["alpha"], p["k"]) for p in points] == [(a, k) for a in (0.5, 0.8, 0.9) for k in (3, 5, 15)]
    assert sum(p["new_calls"] for p in points) < sum(p["expanded"] for p in points)  # the cache serves the sweep
    for a in (0.5, 0.8, 0.9):
        row = [p for p in points if p["alpha"] == a]
        masses = [p["unexplored_mass"] for p in row]
        assert masses == sorted(masses, reverse=True)  # a larger k never leaves more unexplored


@needs_hf
def test_a_hugging_face_model_directory(tiny_model_dir: Path) -> None:
    code, out, exc = run("--model", str(tiny_model_dir), "--prompt", "the agent will", "--depth", "3",
                         "--property", 'P=? [F "danger>0"]', "--quantify", "danger=keywords:rm",
                         "--batch-size", "4", "--format", "json")
    assert code == 0, exc
    data = json.loads(out)
    assert 0 < data["value"] < 1 and data["cost"]["prefixes_per_batch"] <= 4


def test_list_quantifications() -> None:
    code, out, _ = run("--list-quantifications")
    assert code == 0 and "gender_bias" in out and "destructive_commands" in out


@pytest.mark.parametrize(("args", "message"), [
    (["--prompt", "x", "--property", PROPERTY], "needs --model"),
    (["--model", "ngram:/nonexistent/file.txt", "--prompt", "x", "--property", PROPERTY], "cannot read"),
    (["--model", "ngram:{corpus}", "--prompt", "x", "--property", 'P=? [F "nope"]'], "neither a comparison"),
    (["--model", "ngram:{corpus}", "--prompt", "x", "--property", PROPERTY, "k=3"], "sweep axes follow --sweep"),
    (["--model", "ngram:{corpus}", "--prompt", "x", "--property", PROPERTY, "--alpha", "0"], "alpha must lie"),
])
def test_user_errors_are_forewarn_errors(corpus_path: Path, args: list[str], message: str) -> None:
    _, _, exc = run(*[a.replace("{corpus}", str(corpus_path)) for a in args])
    assert isinstance(exc, LLMCheckError) and message in str(exc)


def test_parse_sweep() -> None:
    assert parse_sweep(["alpha=0.5,0.8 k=3,5", "depth=2"]) == {"alpha": [0.5, 0.8], "k": [3.0, 5.0], "depth": [2.0]}
    for bad in ("beta=1", "k=1.5", "alpha=x", "alpha="):
        with pytest.raises(LLMCheckError):
            parse_sweep([bad])


def test_importing_the_command_does_not_import_transformers() -> None:
    import subprocess
    import sys

    code = ("import sys, forewarn.guard.llmcheck, forewarn.guard.cli.llmcheck; "
            "sys.exit(any(m in sys.modules for m in ('torch', 'transformers', 'nltk', 'textstat')))")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0
