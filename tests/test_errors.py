"""One error family (issue 11, point 6): every user error is a ForewarnError with a one-line
message, and the CLI turns each into ``error: <message>`` on stderr and exit status 2.

Each case is a real bad input to a real command. It runs twice: through ``main()`` (exit
status, one line, no traceback) and through the click command itself, which lets the
exception out, so the test also names the family member that carried it.
"""
from __future__ import annotations

import copy
import importlib
import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest
import typer

from _support import CLI, TOY_SPEC, Result
from forewarn import errors as family
from forewarn.errors import ForewarnError


def one_line_error(result: Result, *fragments: str) -> str:
    assert result.returncode == 2, (result.args, result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    # Storm may log a line of its own first (C++ `ERROR (...)`); ours is the last and the only `error:`
    ours = [line for line in lines if line.startswith("error: ")]
    assert len(ours) == 1 and lines[-1] == ours[0], lines
    for fragment in fragments:
        assert fragment in ours[0], (fragment, ours[0])
    return ours[0]


def raised(*args: str | Path) -> BaseException:
    """What the command raises when nothing catches it (the click command, not ``main()``)."""
    from forewarn.guard.cli import app

    with pytest.raises(BaseException) as caught:
        typer.main.get_command(app)([str(a) for a in args], standalone_mode=False, prog_name="forewarn")
    return caught.value


@pytest.fixture
def files(tmp_path: Path, toy_traces: Path, toy_model_path: Path) -> dict[str, Path]:
    """The toy domain's traces, spec and model, and a set of bad files beside them."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(TOY_SPEC)
    written: dict[str, str | bytes] = {
        "bad_spec.yaml": "predicates: [\n",
        "bad_traces.jsonl": "not json\n",
        "bad_model.json": "{}\n",
        "missing_field.jsonl": json.dumps({"run_id": "r", "steps": [{"state": {"a": True}}]}) + "\n",
        "not_allowed.yaml": TOY_SPEC.replace("cel: 'state.b > 2'", "python: json.loads"),
        "semantics.yaml": TOY_SPEC + "monitors:\n  - name: eventually_b\n    kind: existence\n    p: 'b'\n",
        "chain.pm": "dtmc\nmodule m\n  x: [0..1] init 0;\n  [] x=0 -> (x'=1);\nendmodule\n",
        "not_a_key.pem": "not a key\n",
        "latin1.txt": "café\n".encode("latin-1"),
        "not_a.db": "not a database, and long enough for SQLite to read a header of 100 bytes from it: "
                    "................................................\n",
    }
    out = {"traces": toy_traces, "spec": spec, "model": toy_model_path}
    for name, text in written.items():
        out[name] = tmp_path / name
        if isinstance(text, bytes):
            out[name].write_bytes(text)
        else:
            out[name].write_text(text)
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    public = Ed25519PrivateKey.generate().public_key()
    out["trusted.pem"] = tmp_path / "trusted.pem"
    out["trusted.pem"].write_bytes(public.public_bytes(serialization.Encoding.PEM,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo))
    return out


def _cases() -> list[tuple[str, Callable[[dict[str, Path], Path], list[str | Path]], str, str, tuple[str, ...]]]:
    # (id, arguments, family member raised, its module, fragments of the line)
    return [
        ("spec", lambda f, o: ["learn", f["traces"], "-s", f["bad_spec.yaml"], "-o", o],
         "SpecError", "forewarn.errors", ("bad_spec.yaml:2: YAML does not parse",)),
        ("spec-not-utf8", lambda f, o: ["learn", f["traces"], "-s", f["latin1.txt"], "-o", o],
         "SpecError", "forewarn.errors", ("latin1.txt:1: not UTF-8 text (byte 0xe9 at offset 3)",)),
        ("trace", lambda f, o: ["learn", f["bad_traces.jsonl"], "-s", f["spec"], "-o", o],
         "TraceError", "forewarn.errors", ("bad_traces.jsonl:1: not valid JSON",)),
        ("model-file", lambda f, o: ["check", f["bad_model.json"]],
         "ModelFileError", "forewarn.errors", ("bad_model.json: not a Forewarn model file",)),
        ("signature", lambda f, o: ["check", f["model"], "--trusted-key", f["trusted.pem"]],
         "SignatureError", "forewarn.guard.signing", ("the model is not signed",)),
        ("key-file", lambda f, o: ["check", f["model"], "--trusted-key", f["not_a_key.pem"]],
         "SignatureError", "forewarn.guard.signing", ("not_a_key.pem: not a PEM public key",)),
        ("check", lambda f, o: ["check", f["chain.pm"], "--property", "P=? [F garbage"],
         "CheckError", "forewarn.errors", ("Storm cannot parse property 'P=? [F garbage'",)),
        ("predicate", lambda f, o: ["replay", f["missing_field.jsonl"], "-m", f["model"]],
         "TraceError", "forewarn.errors", ("missing_field.jsonl:1: steps[0].state",
                                                 "reads field 'b', which the state lacks")),
        ("option-value", lambda f, o: ["learn", f["traces"], "-s", f["spec"], "-o", o, "--alpha", "-1"],
         "ConfigError", "forewarn.errors", ("--alpha: the smoothing α must lie in [0, 1e+06], got -1",)),
        ("demo-value", lambda f, o: ["demo", "--runs", "0", "--out", o],
         "ConfigError", "forewarn.errors", ("--runs and --episodes must be at least 1",)),
        ("usage", lambda f, o: ["learn", f["traces"], "-s", f["spec"], "-o", o, "--master", "local[1]"],
         "UsageError", "forewarn.errors", ("--master applies to --engine spark only",)),
        ("code-not-allowed", lambda f, o: ["learn", f["traces"], "-s", f["not_allowed.yaml"], "-o", o],
         "SpecError", "forewarn.errors", ("predicate 'b'", "'json.loads' is not registered")),
        ("monitor", lambda f, o: ["learn", f["traces"], "-s", f["semantics.yaml"], "-o", o],
         "SpecError", "forewarn.errors", ("monitor 'eventually_b'",)),
        ("target", lambda f, o: ["tune", f["traces"], "-s", f["spec"], "--target", "detection=0.999999"],
         "TargetUnreachable", "forewarn.guard.evaluation.tune", ("target detection=0.999999: no θ reaches it",)),
        ("llmcheck-source", lambda f, o: ["llmcheck", "-m", f"ngram:{o}.txt", "--prompt", "hi",
                                          "-p", 'P=? [F "words>0"]'],
         "SourceError", "forewarn.guard.llmcheck.errors", ("cannot read the n-gram training file",)),
        ("llmcheck-source-not-utf8", lambda f, o: ["llmcheck", "-m", f"ngram:{f['latin1.txt']}", "--prompt", "hi",
                                                   "-p", 'P=? [F "words>0"]'],
         "SourceError", "forewarn.guard.llmcheck.errors", ("is not UTF-8 text (byte 0xe9 at offset 3)",)),
        ("llmcheck-query", lambda f, o: ["llmcheck", "-m", f"ngram:{f['spec']}", "--prompt", "hi",
                                         "-p", 'P=? [F "nolabel"]'],
         "QueryError", "forewarn.guard.llmcheck.errors", ("label 'nolabel'",)),
        ("llmcheck-quantification", lambda f, o: ["llmcheck", "-m", f"ngram:{f['spec']}", "--prompt", "hi",
                                                  "-p", 'P=? [F "x>0"]', "-q", "x=nosuchkind"],
         "QuantificationError", "forewarn.guard.llmcheck.errors", ("unknown quantification 'nosuchkind'",)),
        ("server-config", lambda f, o: ["serve", "--host", "0.0.0.0", "--insecure-no-auth"],
         "ConfigError", "forewarn.server.settings", ("only allowed on a loopback address",)),
        ("server-config-not-utf8", lambda f, o: ["serve", "--config", f["latin1.txt"]],
         "ConfigError", "forewarn.server.settings", ("latin1.txt: not UTF-8 text (byte 0xe9 at offset 3)",)),
        # `serve` fails before it binds a port: the model and the database are opened first
        ("server-model", lambda f, o: ["serve", "--insecure-no-auth", "--port", "9", "--db", f"{o}.db",
                                       "--model", f["bad_model.json"]],
         "ModelFileError", "forewarn.errors", ("bad_model.json: not a Forewarn model file",)),
        ("server-storage", lambda f, o: ["serve", "--insecure-no-auth", "--port", "9", "--db", f["not_a.db"]],
         "StorageError", "forewarn.server.storage", ("cannot open the database: file is not a database",)),
    ]


def _marks(case_id: str) -> list[pytest.MarkDecorator]:
    """The extra a case's command needs (conftest.py: `pytest --core` leaves it out)."""
    extra = case_id.split("-")[0]
    return [getattr(pytest.mark, extra)] if extra in ("llmcheck", "server") else []


@pytest.mark.parametrize(("args", "name", "module", "fragments"),
                         [pytest.param(*case[1:], id=case[0], marks=_marks(case[0])) for case in _cases()])
def test_each_family_member_is_one_line_and_exit_2(forewarn_here: CLI, files: dict[str, Path], tmp_path: Path,
                                                    args: Callable[..., list[str | Path]], name: str, module: str,
                                                    fragments: tuple[str, ...]) -> None:
    argv = args(files, tmp_path / "out")
    one_line_error(forewarn_here(*argv), *fragments)
    exc = raised(*argv)
    expected = getattr(importlib.import_module(module), name)
    assert isinstance(exc, expected) and isinstance(exc, ForewarnError), (type(exc), exc)
    assert "\n" not in str(exc)


def test_a_located_error_keeps_the_family_member_it_wraps(files: dict[str, Path], tmp_path: Path) -> None:
    """The file and line are on the SpecError or TraceError; what went wrong is its cause, in the family too."""
    from forewarn.errors import PredicateError, TraceError
    from forewarn.guard.trust import CodeNotAllowed
    from forewarn.monitors import MonitorError, MonitorSemanticsError

    out = tmp_path / "m.json"
    not_allowed = raised("learn", files["traces"], "-s", files["not_allowed.yaml"], "-o", out)
    assert isinstance(not_allowed.__cause__, CodeNotAllowed)
    semantics = raised("learn", files["traces"], "-s", files["semantics.yaml"], "-o", out)
    assert isinstance(semantics.__cause__, MonitorSemanticsError) and isinstance(semantics.__cause__, MonitorError)
    missing = raised("replay", files["missing_field.jsonl"], "-m", files["model"])
    assert isinstance(missing, TraceError) and isinstance(missing.__cause__, PredicateError)


# -- the state space too large to build --------------------------------------------------

PREDICATES = 14  # 2**14 valuations: ~9,500 distinct states in the runs below, past the dense limit


def _random_runs(path: Path, runs: int = 600, steps: int = 30) -> Path:
    rng = random.Random(1)
    with open(path, "w") as out:
        for r in range(runs):
            states = [{"state": {f"x{i}": rng.random() < 0.5 for i in range(PREDICATES)}} for _ in range(steps)]
            out.write(json.dumps({"run_id": f"r{r}", "steps": states}) + "\n")
    return path


def _wide_spec(path: Path, extra: str = "") -> Path:
    lines = ["name: wide", "predicates:"] + [f"  p{i}: 'state.x{i}'" for i in range(PREDICATES)]
    path.write_text("\n".join(lines + ["unsafe: 'p0 && p1 && p2 && p3 && p4 && p5'", extra]) + "\n")
    return path


def test_a_state_space_past_the_dense_limit_is_one_line_saying_the_limit_and_the_way_out(
        forewarn_here: CLI, tmp_path: Path) -> None:
    from forewarn.errors import StateSpaceTooLargeError

    runs, spec, out = _random_runs(tmp_path / "runs.jsonl"), _wide_spec(tmp_path / "spec.yaml"), tmp_path / "m.json"
    line = one_line_error(forewarn_here("learn", runs, "-s", spec, "-o", out),
                          "abstract states with every transition valid would need",
                          "over the limit of 50,000,000 (forewarn.guard.learning.DENSE_LIMIT)",
                          "valid_transitions: max_changed_predicates", "learning: structure: observed")
    states = int(line.split("error: ")[1].split(" abstract states")[0].replace(",", ""))
    assert 7_072 <= states <= 2**PREDICATES  # past √(5·10⁷) states, so past the limit
    exc = raised("learn", runs, "-s", spec, "-o", out)
    assert isinstance(exc, StateSpaceTooLargeError) and (exc.states, exc.limit) == (states, 50_000_000)
    assert not out.exists()  # nothing half-written
    # the way out the message names works on the same runs
    observed = _wide_spec(tmp_path / "observed.yaml", "learning:\n  structure: observed")
    assert forewarn_here("learn", runs, "-s", observed, "-o", out).returncode == 0 and out.exists()


def test_the_dense_limit_is_read_when_learning(forewarn_here: CLI, files: dict[str, Path], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit is a module setting read on each call: lowered, the toy's 3 states are too many."""
    from forewarn.guard import learning

    monkeypatch.setattr(learning, "DENSE_LIMIT", 5)
    one_line_error(forewarn_here("learn", files["traces"], "-s", files["spec"], "-o", tmp_path / "m.json"),
                   "error: 4 abstract states with every transition valid would need 20 matrix entries, "
                   "over the limit of 5 (")


def test_a_rule_that_allows_too_much_is_stopped_at_the_limit_too(
        forewarn_here: CLI, files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ``irreversible``-only rule keeps nearly every pair: counted as they are made, not after."""
    from forewarn.guard import learning

    monkeypatch.setattr(learning, "DENSE_LIMIT", 5)
    spec = tmp_path / "irreversible.yaml"
    spec.write_text(TOY_SPEC + "valid_transitions:\n  irreversible: [a]\n")
    one_line_error(forewarn_here("learn", files["traces"], "-s", spec, "-o", tmp_path / "m.json"),
                   "the transitions the spec's valid_transitions allow pass the limit of 5 matrix entries")
    monkeypatch.setattr(learning, "DENSE_LIMIT", 50_000_000)
    assert forewarn_here("learn", files["traces"], "-s", spec, "-o", tmp_path / "m.json").returncode == 0


def test_a_monitor_product_too_large_to_pack_is_one_line(forewarn_here: CLI, files: dict[str, Path],
                                                        tmp_path: Path) -> None:
    """Six monitors with 10⁵-step deadlines: 10³⁰ monitor-state combinations (numpy's product of
    them used to wrap around, and learning failed later with a KeyError traceback)."""
    from forewarn.monitors import ProductTooLargeError

    monitors = "".join(f"  - name: m{i}\n    kind: bounded_response\n    trigger: 'a'\n    response: 'b'\n"
                       f"    within: 100000\n" for i in range(6))
    spec = tmp_path / "monitors.yaml"
    spec.write_text(TOY_SPEC + "monitors:\n" + monitors)
    out = tmp_path / "m.json"
    one_line_error(forewarn_here("learn", files["traces"], "-s", spec, "-o", out),
                   "the monitors' state spaces are too large to combine", "lower the monitors' bounds ('within')")
    exc = raised("learn", files["traces"], "-s", spec, "-o", out)
    assert isinstance(exc, ProductTooLargeError) and isinstance(exc, family.StateSpaceTooLargeError)


# -- the documented names ------------------------------------------------------------------

DOCUMENTED = [  # (module, name, extra base besides InputError) as docs/errors.md lists them: bad input
    ("forewarn.errors", "SpecError", None),
    ("forewarn.errors", "TraceError", None),
    ("forewarn.errors", "PredicateError", None),
    ("forewarn.errors", "PredicateBudgetExceeded", family.PredicateError),
    ("forewarn.errors", "ModelFileError", None),
    ("forewarn.errors", "CheckError", None),
    ("forewarn.errors", "ConfigError", None),
    ("forewarn.errors", "UsageError", None),
    ("forewarn.errors", "MonitorError", None),
    ("forewarn.errors", "StateSpaceTooLargeError", None),
    ("forewarn.guard.signing", "SignatureError", family.ModelFileError),
    ("forewarn.guard.trust", "CodeNotAllowed", None),
    ("forewarn.guard.trust", "CodeNotFound", None),
    ("forewarn.guard.predicates", "CodeNotAllowed", None),
    ("forewarn.guard.evaluation.tune", "TargetUnreachable", None),
    ("forewarn.monitors", "MonitorError", family.MonitorError),
    ("forewarn.monitors", "ConditionError", family.MonitorError),
    ("forewarn.monitors", "MonitorSemanticsError", family.MonitorError),
    ("forewarn.monitors", "ProductTooLargeError", family.StateSpaceTooLargeError),
    ("forewarn.domains.embodied.errors", "EmbodiedError", None),
    ("forewarn.domains.embodied.errors", "ActionParseError", None),
    ("forewarn.domains.embodied.errors", "TaskFileError", None),
]
WITH_EXTRAS = [  # (module, name, extra base, the extra the module needs): bad input
    ("forewarn.guard.llmcheck.errors", "LLMCheckError", None, "llmcheck"),
    ("forewarn.guard.llmcheck.errors", "SourceError", None, "llmcheck"),
    ("forewarn.guard.llmcheck.errors", "QueryError", None, "llmcheck"),
    ("forewarn.guard.llmcheck.errors", "QuantificationError", None, "llmcheck"),
    ("forewarn.guard.langchain", "ExtractionError", None, "langchain"),
    ("forewarn.guard.langchain", "ReviewError", None, "langchain"),
    ("forewarn.server.settings", "ConfigError", family.ConfigError, "server"),
    ("forewarn.server.storage", "OverBudget", None, "server"),
    ("forewarn.server.models_registry", "UnknownModel", None, "server"),
    ("forewarn.server.sessions", "SessionNotFound", KeyError, "server"),
]


@pytest.mark.parametrize(("module", "name", "base"), DOCUMENTED, ids=[f"{m}.{n}" for m, n, _ in DOCUMENTED])
def test_documented_names_are_in_the_family(module: str, name: str, base: type | None) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, family.InputError) and issubclass(cls, ValueError)
    assert base is None or issubclass(cls, base)


@pytest.mark.parametrize(("module", "name", "base"), [
    pytest.param(m, n, b, id=f"{m}.{n}", marks=getattr(pytest.mark, extra)) for m, n, b, extra in WITH_EXTRAS])
def test_documented_names_of_the_integrations_are_in_the_family(module: str, name: str, base: type | None) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, family.InputError) and issubclass(cls, ValueError)
    assert base is None or issubclass(cls, base)


INFRASTRUCTURE = [  # (module, name, extra base, the extra the module needs, or None): not the user's input
    ("forewarn.guard._extras", "MissingExtra", ImportError, None),
    ("forewarn.guard.client", "ServerError", None, "client"),
    ("forewarn.guard.client", "SidecarUnreachable", None, "client"),
    ("forewarn.server.storage", "StorageError", None, "server"),
    ("forewarn.server.storage", "DatabaseLocked", None, "server"),
    ("forewarn.server.storage", "Conflict", None, "server"),
]


@pytest.mark.parametrize(("module", "name", "base"), [
    pytest.param(m, n, b, id=f"{m}.{n}", marks=[getattr(pytest.mark, extra)] if extra else [])
    for m, n, b, extra in INFRASTRUCTURE])
def test_infrastructure_errors_are_in_the_family_but_not_value_errors(module: str, name: str,
                                                                       base: type | None) -> None:
    """An outage (a locked database, an unreachable sidecar) is no bad value: ``except ValueError`` misses it."""
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, ForewarnError) and not issubclass(cls, ValueError)
    assert base is None or issubclass(cls, base)


def test_the_root_is_no_value_error_and_bad_input_is() -> None:
    assert not issubclass(ForewarnError, ValueError)
    assert issubclass(family.InputError, ForewarnError) and issubclass(family.InputError, ValueError)


def test_the_family_is_one_set_of_classes_under_two_names() -> None:
    """Defined in forewarn.errors (a leaf the monitors may import), documented as forewarn.errors."""
    import forewarn.errors

    for name in family.__all__:
        assert getattr(family, name) is getattr(forewarn.errors, name)
    assert set(family.__all__) == set(forewarn.errors.__all__)


@pytest.mark.server
def test_the_family_keeps_the_old_catches_working() -> None:
    from forewarn.server.sessions import SessionNotFound

    with pytest.raises(KeyError):  # the server caught it as a KeyError
        raise SessionNotFound("s-1")
    assert str(SessionNotFound("s-1")) == "no session 's-1'"
    assert str(copy.copy(SessionNotFound("s-1"))) == "no session 's-1'"
    with pytest.raises(ValueError):
        raise family.StateSpaceTooLargeError("too many", states=10, limit=5)


def test_messages_are_one_line_and_the_detail_is_kept() -> None:
    report = "Parsing error at 1:2:\n  expecting <basic path formula>, here:\n\tF garbage\n\t ^\n"
    exc = family.CheckError(report)
    assert str(exc) == "Parsing error at 1:2: expecting <basic path formula>, here: F garbage ^"
    assert exc.detail == report and exc.message == str(exc)
    spec = family.SpecError("bad\nthing", source="s.yaml", line=3)
    assert str(spec) == "s.yaml:3: bad thing" and spec.line == 3
    assert family.ForewarnError("one line").detail is None


def test_bad_arguments_to_learning_are_config_errors() -> None:
    from forewarn.guard.learning import learn_dtmc

    with pytest.raises(family.ConfigError, match="structure must be 'valid' or 'observed'"):
        learn_dtmc(None, None, alpha=0.1, structure="dense")  # type: ignore[arg-type]
    with pytest.raises(family.ConfigError, match="alpha must be >= 0"):
        learn_dtmc(None, None, alpha=-1)  # type: ignore[arg-type]
