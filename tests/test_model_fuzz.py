"""Crafted model files (mutations of a real one, loaded by the CLI and by ``Guard``) and crafted specs.

Every case must end in a clean load or one ``ForewarnError`` line (exit 2): never a traceback,
never a hang (hypothesis' deadline is the per-case limit), never another exit code.
"""
from __future__ import annotations

import copy
import json
import re
import resource
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _support import CLI
from forewarn.errors import ForewarnError, ModelFileError
from forewarn.guard.model import GuardModel, _checksum
from forewarn.guard.runtime import Guard

_INT = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_SCALAR = st.one_of(st.none(), st.booleans(), _INT, st.floats(allow_nan=False), st.text(max_size=20),
                    st.sampled_from([0, 1, -1, 2**62, 1e308, -1e308, 5e-324, "end", "state", "P=? [F \"unsafe\"]"]))
_VALUE = st.recursive(_SCALAR, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=8)
_SPEC_EDITS = st.sampled_from([
    "predicates: {a: {python: 'os:system'}}\nunsafe: a\n", "[" * 200 + "]" * 200, "a: &x [1]\nb: *x\n",
    "predicates:\n  a: '" + "(" * 3000 + "state.a" + ")" * 3000 + "'\nunsafe: a\n", "", "- 1\n", "{",
])


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node[:3]):
            out += _paths(value, (*prefix, index))
    return out


@st.composite
def mutated(draw: st.DrawFn, document: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(document)
    paths = [p for p in _paths(doc) if p]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        parent: Any = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            action = draw(st.sampled_from(["set", "set", "delete", "grow", "spec", "unsafe", "deep", "index"]))
            if action == "set":
                parent[path[-1]] = draw(_VALUE)
            elif action == "delete":
                del parent[path[-1]]
            elif action == "grow" and isinstance(parent, list):
                parent.extend([copy.deepcopy(parent[path[-1]])] * draw(st.integers(1, 3)))
            elif action == "spec":
                doc["spec"] = draw(_SPEC_EDITS)
            elif action == "unsafe":  # the embedded spec's condition no longer parses (or names nothing)
                doc["spec"] = re.sub(r"(?m)^unsafe:.*$", draw(st.sampled_from(
                    ["unsafe: 'a &&'", "unsafe: ')('", "unsafe: 'nothing_named_so'", "unsafe: '1 + '"])), doc["spec"])
            elif action == "deep":  # a value nested deeper than orjson writes or reads (254 levels)
                parent[path[-1]] = _nested(draw(st.integers(250, 400)))
            elif action == "index":  # an index into the model's arrays out of their range
                parent[path[-1]] = draw(st.sampled_from([-1, 10**6, 2**63 - 1, -(2**63)]))
        except (KeyError, IndexError, TypeError):
            pass
    if draw(st.booleans()):  # the checksum an attacker recomputes, or the one left stale
        try:
            doc["checksum"] = _checksum(doc)
        except (TypeError, orjson.JSONEncodeError):
            pass
    return doc


@pytest.fixture(scope="module")
def real_model(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from forewarn.domains.embodied.builtin import builtin_model_path

    # the built-in model: monitors, several properties' worth of arrays, a PAC report with chain states
    return dict(orjson.loads(builtin_model_path(tmp_path_factory.mktemp("fuzz-cache")).read_bytes()))


@settings(max_examples=150, deadline=10_000, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                     HealthCheck.too_slow])
@given(data=st.data())
def test_crafted_model_files_fail_cleanly(real_model: dict[str, Any], forewarn_here: CLI, data: st.DataObject) -> None:
    document = data.draw(mutated(real_model))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.json"
        try:
            path.write_bytes(orjson.dumps(document))
        except (TypeError, orjson.JSONEncodeError):  # nested past orjson's limit: Python's json still writes it
            try:
                path.write_text(json.dumps(document), encoding="utf-8")
            except (TypeError, ValueError, RecursionError):
                return  # not writable as JSON: not a file anyone can hand over
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for command in (["check", path, "--format", "json"], ["states", path, "--format", "json"]):
            result = forewarn_here(*command)
            assert result.returncode in (0, 2), result.stderr
            assert "Traceback" not in result.stderr
            if result.returncode == 2:
                assert result.stderr.strip().startswith("error:") and result.stderr.count("\n") == 1, result.stderr
        try:
            Guard(GuardModel.load(path))
        except ForewarnError:
            pass
        grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        assert grown_mb < 200, f"loading one crafted file raised the peak memory by {grown_mb:.0f} MB"


def _checked(document: dict[str, Any], forewarn_here: CLI, tmp_path: Path) -> tuple[Path, Any]:
    """``check --format json`` on ``document`` written with its checksum recomputed (as an attacker would)."""
    document["checksum"] = _checksum(document)
    model = tmp_path / "model.json"
    model.write_bytes(orjson.dumps(document))
    return model, forewarn_here("check", model, "--format", "json")


@pytest.mark.parametrize("bound", ["tight", "empirical", "joint", "outcome"])
@pytest.mark.parametrize("part", ["limiting", "initial_limiting", "states"])
def test_a_pac_bound_naming_a_state_out_of_range_is_one_line(real_model: dict[str, Any], forewarn_here: CLI,
                                                              tmp_path: Path, bound: str, part: str) -> None:
    """Found by the test above: a bound's limiting state past the chain reached ``check``'s words as an IndexError."""
    document = copy.deepcopy(real_model)
    entry = document["pac"].get(bound)
    if entry is None:
        pytest.skip(f"the built-in model has no pac.{bound}")
    if part == "states":
        entry["states"][0]["state"] = 10**6
    else:
        entry[part] = [10**6]
    path, result = _checked(document, forewarn_here, tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: {path}: pac.{bound}.{part}: state 1000000 is out of "
                                     f"range (the chain has {document['pac']['chain_states']} states)"), result.stderr


@pytest.mark.parametrize("path", [("provenance", "runs"), ("pac", "tight", "runs_factor"),
                                  ("pac", "outcome", "runs_factor"), ("pac", "states", 1, "required")])
def test_runs_needed_past_64_bits_is_null_in_check_json(real_model: dict[str, Any], forewarn_here: CLI,
                                                        tmp_path: Path, path: tuple[Any, ...]) -> None:
    """Found by the fuzz test above: a count of 2⁶³ − 1 made ``check``'s runs_needed (factor × runs) too large
    for a JSON integer, and printing it raised a TypeError."""
    document = copy.deepcopy(real_model)
    parent: Any = document
    for key in path[:-1]:
        parent = parent[key]
    if parent is None or (isinstance(parent, dict) and path[-1] not in parent):
        pytest.skip(f"the built-in model has no {'.'.join(map(str, path))}")
    parent[path[-1]] = 2**63 - 1
    _, result = _checked(document, forewarn_here, tmp_path)
    assert "Traceback" not in result.stderr
    if result.returncode == 2:  # refused by the loader: one line
        assert result.stderr.strip().startswith("error:") and result.stderr.count("\n") == 1, result.stderr
    else:
        assert result.returncode == 0, result.stderr
        needed = [b["runs_needed"] for b in orjson.loads(result.stdout)["pac"].values() if isinstance(b, dict)
                  and "runs_needed" in b]
        assert needed and all(n is None or 0 <= n < 2**63 for n in needed)


@pytest.mark.parametrize("count", [1e308, -1.0, float(2**53)])
def test_transition_counts_out_of_range_are_one_line(real_model: dict[str, Any], forewarn_here: CLI,
                                                      tmp_path: Path, count: float) -> None:
    """Found by the fuzz test above: a count of 1e308 made the visits infinite, and casting them to integers
    raised a RuntimeWarning (an error under the tests' warning filter) instead of a one-line refusal."""
    document = copy.deepcopy(real_model)
    document["transitions"]["counts"][0] = count
    model, result = _checked(document, forewarn_here, tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == (f"error: {model}: transitions: counts must be finite, non-negative and add "
                                     "up to less than 2**53 per state"), result.stderr


_PAST_INT64 = [("transitions", "indices", 0), ("transitions", "indptr", 1), ("visits", 0), ("initial", 0, 0),
               ("initial", 0, 1), ("properties", 0, "markov_mismatch", 0), ("pac", "chain_states"),
               ("pac", "states", 0, "visits"), ("pac", "tight", "limiting", 0), ("invalid_observed",)]


@pytest.mark.parametrize("value", [2**63, 2**64 - 1])
@pytest.mark.parametrize("where", _PAST_INT64, ids=lambda where: ".".join(map(str, where)))
def test_an_integer_past_int64_is_one_line_naming_its_field(real_model: dict[str, Any], forewarn_here: CLI,
                                                            tmp_path: Path, where: tuple[Any, ...], value: int) -> None:
    """Issue 36: an integer in [2⁶³, 2⁶⁴) in transitions.indices was an OverflowError (a traceback on the CLI,
    a 500 over HTTP) when read into an int64 array; every integer field is now bounded where it is read."""
    document = copy.deepcopy(real_model)
    parent: Any = document
    for key in where[:-1]:
        parent = parent[key]
    if isinstance(parent, list) and where[-1] == len(parent):
        parent.append(value)  # an empty list (the built-in model's markov_mismatch): one entry
    else:
        parent[where[-1]] = value
    field = ".".join(map(str, where))
    model, result = _checked(document, forewarn_here, tmp_path)
    for command in ("check", "states"):
        result = forewarn_here(command, model, "--format", "json")
        assert result.returncode == 2, result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith(f"error: {model}: field {field}: Input should be "), result.stderr
    with pytest.raises(ModelFileError, match=rf"^{re.escape(str(model))}: field {re.escape(field)}: "):
        GuardModel.load(model)


def test_a_memory_label_past_63_bits_is_one_line(real_model: dict[str, Any], tmp_path: Path) -> None:
    """A state's code is its valuation with the memory label above it: together they must fit an int64."""
    document = copy.deepcopy(real_model)
    document["states"][0]["memory"] = 2**62
    document["checksum"] = _checksum(document)
    path = tmp_path / "model.json"
    path.write_bytes(orjson.dumps(document))
    with pytest.raises(ModelFileError, match=r"states\[0\]\.memory: 4611686018427387904 is past what 4 predicates"):
        GuardModel.load(path)


_CEL = st.one_of(st.sampled_from(["state.a", "state.b > 2", "!state.a", "state.x.y.z == 'q'", "size(state.l) > 1",
                                  "meta.task == 't'", "1 / 0 == 1", "state.a &&", "((", "state.a ? 1 : 2"]),
                 st.text(max_size=30))
_SPEC = st.fixed_dictionaries(
    {"predicates": st.dictionaries(st.from_regex(r"[a-z_][a-z0-9_]{0,6}", fullmatch=True),
                                   st.one_of(_CEL, st.fixed_dictionaries({"cel": _CEL}),
                                             st.fixed_dictionaries({"python": st.sampled_from(
                                                 ["os:system", "subprocess:run", "builtins:eval", "x:y", ":", "a.b"])})),
                                   min_size=1, max_size=4)},
    optional={"unsafe": _CEL, "name": st.text(max_size=10), "guard": _VALUE, "learning": _VALUE,
              "monitors": _VALUE, "valid_transitions": _VALUE, "extra": _VALUE})


@settings(max_examples=200, deadline=5_000)
@given(document=_SPEC, raw=st.booleans(), noise=st.text(max_size=40))
def test_crafted_specs_fail_cleanly(document: dict[str, Any], raw: bool, noise: str) -> None:
    import yaml

    from forewarn.errors import ForewarnError
    from forewarn.guard.predicates import PredicateSet
    from forewarn.guard.spec import parse_spec

    text = yaml.safe_dump(document) + (noise if raw else "")
    try:
        PredicateSet(parse_spec(text))  # nothing named in the spec is imported
    except ForewarnError:
        pass


def test_field_names_in_cel_never_become_code(tmp_path: Path) -> None:
    """The memo key and leaf binder are generated Python; a field name is only ever a quoted literal in it."""
    import yaml

    from forewarn.guard.predicates import PredicateSet
    from forewarn.guard.spec import parse_spec

    marker = tmp_path / "pwned"
    field = f"a'] + __import__('os').system('touch {marker}') + ['"
    nested = f"x\"]\n__import__('os').system('touch {marker}')#"
    expression = 'state["' + field.replace('"', '\\"') + '"] == 1 && state.b["' + nested.replace('"', '\\"')\
        .replace("\n", "\\n") + '"] == 2'
    predicates = PredicateSet(parse_spec(yaml.safe_dump({"predicates": {"p": expression}, "unsafe": "p"})))
    assert predicates.evaluate({field: 1, "b": {nested: 2}}) == 1
    assert predicates.evaluate({field: 1, "b": {nested: 3}}) == 0
    assert not marker.exists()
