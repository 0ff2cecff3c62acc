"""No path from data to code: a spec or model names Python only by a name operator code registered.

The attack these refuse (issue 22): an allow-listed module's own ``import logging`` let a model
name ``mypkg.predicates:logging.config.dictConfig``, and a state shaped as a logging
configuration with a ``"()": "subprocess.getoutput"`` factory ran a shell command. Every route
below reaches code by attribute traversal or by importing a module named in data; each is
refused before anything is imported, and the marker file the payload would write never appears.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

import forewarn
from _support import CLI, TOY_SPEC, install_package
from forewarn.errors import ForewarnError, SpecError
from forewarn.guard.model import GuardModel, _checksum
from forewarn.guard.pipeline import learn_model
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import parse_spec
from forewarn.guard.trust import CodeNotAllowed, CodeNotFound, registered_callable


@pytest.fixture
def operator_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An installed package that registers ``mypkg.heavy`` and imports ``logging.config`` itself
    (the module attribute the attack went through), plus a module-level object."""
    site = install_package(tmp_path / "site", "mypkg", {"mypkg_predicates": (
        "import logging.config\nimport os\nimport subprocess\n"
        "THRESHOLD = 10\n"
        "def heavy(state):\n    return state['weight'] > THRESHOLD\n")},
        {"mypkg.heavy": "mypkg_predicates:heavy"})
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "mypkg_predicates", raising=False)
    return site


def _spec(reference: str, *, rule: bool = False) -> str:
    if rule:
        return TOY_SPEC + f"valid_transitions:\n  function: '{reference}'\n"
    return f"predicates:\n  p: {{python: '{reference}'}}\nunsafe: p\n"


# Every way a name could reach code other than what was registered under exactly that name.
ATTRIBUTE_ROUTES = [
    "mypkg_predicates:logging.config.dictConfig",  # the reported exploit: an allowed module's import
    "mypkg_predicates:os.system",
    "mypkg_predicates:subprocess.getoutput",
    "mypkg_predicates:heavy.__globals__",
    "mypkg_predicates:THRESHOLD",  # a module-level object of the operator's module
    "logging.config:dictConfig",
    "builtins:eval",
    "builtins:__import__",
    "os:system",
    "mypkg.heavy:__call__",
]
DOTTED_NAMES = [  # names, not paths: an exact key or nothing
    "logging.config.dictConfig",
    "mypkg_predicates.logging.config.dictConfig",
    "mypkg.heavy.__globals__",
    "mypkg.heavy.__call__",
    "mypkg_predicates.heavy",
    "mypkg_predicates",
    "__import__",
    "builtins.eval",
    "builtins.__import__",
    "eval",
    "os.system",
    "subprocess.getoutput",
    "forewarn.driving.valid_transition",  # Forewarn's own transition rule is no predicate
]
NOT_NAMES = ["getattr(os, 'system')", "__import__('os').system", "os .system", "a/b", "../x", "", ".x", "x.",
             "x..y", "$(touch /tmp/x)", "x;y", "é"]


@pytest.mark.parametrize("reference", ATTRIBUTE_ROUTES)
@pytest.mark.parametrize("rule", [False, True], ids=["predicate", "transition-rule"])
def test_an_import_path_is_refused_with_how_to_register(operator_package: Path, reference: str, rule: bool) -> None:
    with pytest.raises(SpecError, match="is an import path, which a spec may no longer name: register") as info:
        PredicateSet(parse_spec(_spec(reference, rule=rule)))
    message = str(info.value)
    assert "\n" not in message and "@forewarn.predicate(" in message and "'forewarn.predicates'" in message
    assert "mypkg_predicates" not in sys.modules  # refused before anything was imported


@pytest.mark.parametrize("name", DOTTED_NAMES)
def test_a_name_nobody_registered_is_refused(operator_package: Path, name: str) -> None:
    with pytest.raises(SpecError, match=rf"python predicate '{name}' is not registered \(registered: mypkg.heavy\)"):
        PredicateSet(parse_spec(_spec(name)))
    assert "mypkg_predicates" not in sys.modules


@pytest.mark.parametrize("name", NOT_NAMES)
def test_what_is_not_a_name_is_refused(name: str) -> None:
    with pytest.raises(CodeNotAllowed, match=r"is not a registered name|is an import path"):
        registered_callable(name)


def test_the_dictconfig_payload_never_runs(operator_package: Path, toy_model: GuardModel, tmp_path: Path) -> None:
    """The reported exploit, as a crafted model file: refused on load, so the payload state never meets it."""
    marker = tmp_path / "pwned"
    payload = {"a": True, "b": 5, "version": 1,
               "handlers": {"h": {"()": "subprocess.getoutput", "cmd": f"touch {marker}"}}}
    for reference in ("'mypkg_predicates:logging.config.dictConfig'", "logging.config.dictConfig"):
        document = toy_model.to_document()
        document["spec"] = document["spec"].replace("cel: 'state.b > 2'", f"python: {reference}")
        document["checksum"] = _checksum(document)
        with pytest.raises(ForewarnError, match=r"is an import path|is not registered"):  # one line
            Guard(GuardModel.from_document(document)).decide(payload)
    assert PredicateSet(toy_model.spec).evaluate(payload) == 0b11  # on an honest model: just a state
    assert not marker.exists()


def test_a_registered_predicate_works_in_learn_and_guard(operator_package: Path, tmp_path: Path) -> None:
    spec = parse_spec(TOY_SPEC.replace("cel: 'state.b > 2'", "python: mypkg.heavy"))
    runs = tmp_path / "runs.jsonl"
    states = [{"a": False, "weight": 1}, {"a": True, "weight": 1}, {"a": True, "weight": 20}]
    runs.write_text('{"id": "r", "steps": [' + ", ".join(
        f'{{"state": {{"a": {str(s["a"]).lower()}, "weight": {s["weight"]}}}}}' for s in states) + "]}\n",
        encoding="utf-8")
    model = learn_model([runs], spec)
    saved = model.save(tmp_path / "m.json")
    assert b"mypkg_predicates" not in saved.read_bytes()  # the model file carries the name only
    guard = Guard.load(saved)  # its sessions would warn (every first call stopped); decide() opens none
    assert guard.predicates.evaluate({"a": True, "weight": 20}) == 0b11
    assert guard.decide({"a": True, "weight": 20}).unsafe_now


def test_the_decorator_registers_by_name(tmp_path: Path) -> None:
    @forewarn.predicate("app.near")
    def near(state: dict[str, float]) -> bool:
        return state["distance"] < 1.0

    predicates = PredicateSet(parse_spec("predicates:\n  n: {python: app.near}\nunsafe: n\n"))
    assert predicates.evaluate({"distance": 0.5}) == 1 and predicates.evaluate({"distance": 2.0}) == 0
    assert forewarn.predicate("app.near")(near) is near  # the same function again: fine

    def other(state: dict[str, float]) -> bool:
        return False

    with pytest.raises(CodeNotAllowed, match=r"'app\.near' is registered twice"):
        forewarn.predicate("app.near")(other)
    with pytest.raises(CodeNotAllowed, match="are Forewarn's own"):
        forewarn.predicate("forewarn.driving.valid_transition")(other)
    with pytest.raises(CodeNotAllowed, match="is an import path"):
        forewarn.predicate("app:near")
    with pytest.raises(CodeNotAllowed, match="not a function"):
        forewarn.predicate("app.value")(42)  # type: ignore[type-var]


def test_colliding_entry_points_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = install_package(tmp_path / "one", "pkg-one", {"one_preds": "def near(state):\n    return True\n"},
                            {"near": "one_preds:near", "far": "one_preds:near"})
    second = install_package(tmp_path / "two", "pkg-two", {"two_preds": "def near(state):\n    return False\n"},
                             {"near": "two_preds:near"})
    monkeypatch.syspath_prepend(str(first))
    monkeypatch.syspath_prepend(str(second))
    monkeypatch.syspath_prepend(str(first))  # one distribution seen through two path entries is one
    with pytest.raises(CodeNotAllowed, match=r"'near' is registered by more than one installed package "
                                             r"\(pkg-one: one_preds:near, pkg-two: two_preds:near\)"):
        registered_callable("near")
    assert registered_callable("far")({}) is True

    @forewarn.predicate("far")
    def far(state: object) -> bool:  # the decorator and an entry point disagree: refused too
        return False

    with pytest.raises(CodeNotAllowed, match=r"'far' is registered twice: by @forewarn\.predicate"):
        registered_callable("far")
    assert "one_preds" in sys.modules and "two_preds" not in sys.modules


def test_an_entry_point_that_does_not_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = install_package(tmp_path / "site", "broken", {"broken_preds": "X = 1\n"},
                           {"gone": "broken_preds:missing", "value": "broken_preds:X"})
    monkeypatch.syspath_prepend(str(site))
    with pytest.raises(CodeNotFound, match="entry point 'broken_preds:missing' does not load: AttributeError"):
        registered_callable("gone")
    with pytest.raises(CodeNotFound, match="entry point 'broken_preds:X' is not a function"):
        registered_callable("value")


def test_nothing_in_the_working_directory_registers_or_shadows(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "imported"
    planted = f"open({str(marker)!r}, 'w').close()\ndef run(state):\n    return True\n"
    work = install_package(tmp_path / "work", "planted", {"planted_rce": planted}, {"planted": "planted_rce:run"})
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend("")  # as `python -m` and uvicorn's --app-dir put it there
    with pytest.raises(CodeNotAllowed, match="'planted' is not registered"):
        registered_callable("planted")
    # an installed package registers `shadowed`; a copy of its module in the working directory would win
    site = install_package(tmp_path / "site", "shadowed", {"shadowed_preds": "def run(state):\n    return False\n"},
                           {"shadowed": "shadowed_preds:run"})
    (work / "shadowed_preds.py").write_text(planted, encoding="utf-8")
    monkeypatch.setattr(sys, "path", [*sys.path, str(site)])  # installed, but after the working directory
    monkeypatch.delitem(sys.modules, "shadowed_preds", raising=False)
    with pytest.raises(CodeNotAllowed, match="a copy in the working directory shadows it"):
        registered_callable("shadowed")
    assert not marker.exists()


def test_the_cli_with_a_registered_predicate(forewarn_here: CLI, operator_package: Path, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(TOY_SPEC.replace("cel: 'state.b > 2'", "python: mypkg.heavy"), encoding="utf-8")
    traces = tmp_path / "t.jsonl"
    traces.write_text('{"id": "r", "steps": [{"state": {"a": true, "weight": 1}}, '
                      '{"state": {"a": true, "weight": 30}}]}\n', encoding="utf-8")
    model = tmp_path / "m.json"
    assert forewarn_here("learn", traces, "-s", spec, "-o", model).returncode == 0
    result = forewarn_here("replay", traces, "--model", model)
    assert result.returncode == 0, result.stderr


@pytest.mark.server  # the serve case needs the server extra
def test_the_cli_refuses_the_retired_allow_list(forewarn_here: CLI, toy_spec_path: Path, toy_traces: Path,
                                                tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    traces = toy_traces
    for argv in (["learn", traces, "-s", toy_spec_path, "-o", tmp_path / "m.json", "--allow-python", "mypkg"],
                 ["serve", "--allow-python", "mypkg", "--db", tmp_path / "x.db"]):
        result = forewarn_here(*argv)
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert "an allow-list of modules is no longer accepted" in result.stderr
    monkeypatch.setenv("FOREWARN_PYTHON_PREDICATES", "mypkg")
    result = forewarn_here("check", tmp_path / "m.json")
    assert result.returncode == 2 and "FOREWARN_PYTHON_PREDICATES is set: an allow-list" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "x.db").exists()


def test_an_old_python_reference_on_the_cli_is_one_line(forewarn_here: CLI, tmp_path: Path) -> None:
    spec = tmp_path / "old.yaml"
    spec.write_text(TOY_SPEC.replace("cel: 'state.b > 2'", "python: 'mypkg.predicates:heavy'"), encoding="utf-8")
    result = forewarn_here("learn", tmp_path, "-s", spec, "-o", tmp_path / "m.json")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert ("python predicate 'mypkg.predicates:heavy' is an import path, which a spec may no longer name: register "
            "the function in code (@forewarn.predicate('heavy')) or as an entry point heavy = "
            "'mypkg.predicates:heavy' in group 'forewarn.predicates'") in " ".join(result.stderr.split())
    assert isinstance(CodeNotAllowed("x"), ForewarnError)


@pytest.mark.parametrize("command", ["check", "states", "replay"])
def test_the_cli_refuses_a_model_naming_an_unregistered_predicate(forewarn_here: CLI, toy_model: GuardModel,
                                                                   toy_traces: Path, tmp_path: Path,
                                                                   command: str) -> None:
    """Issue 36: ``check`` printed the values of a model whose predicate ``b`` names code nobody registered,
    and exited 0; values no process here can evaluate the predicates of guard nothing. Every command that
    loads a model to decide refuses it: one line naming the name and how to register it, exit 2."""
    document = toy_model.to_document()
    document["spec"] = document["spec"].replace("cel: 'state.b > 2'", "python: app.high_b")
    document["checksum"] = _checksum(document)
    model = tmp_path / "named.json"
    model.write_bytes(orjson.dumps(document))
    argv = {"check": ["check", model], "states": ["states", model], "replay": ["replay", toy_traces, "--model", model]}
    result = forewarn_here(*argv[command])
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: {model} (embedded spec):"), result.stderr
    assert ("predicate 'b': python predicate 'app.high_b' is not registered (registered: none); operator code "
            "registers functions with @forewarn.predicate(NAME) or entry points in group 'forewarn.predicates'"
            ) in result.stderr

    @forewarn.predicate("app.high_b")
    def high_b(state: dict[str, Any]) -> bool:
        return bool(state["b"] > 2)

    again = forewarn_here(*argv[command])
    assert again.returncode == 0, again.stderr  # registered: the same model is read
