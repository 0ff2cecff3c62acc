from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from _support import TOY_SPEC
from forewarn.errors import ModelFileError
from forewarn.guard.model import SCHEMA_VERSION, GuardModel, _checksum
from forewarn.guard.spec import Spec

Edit = Callable[[dict[str, Any]], None]


def test_save_load_round_trip_preserves_everything(toy_model: GuardModel, tmp_path: Path) -> None:
    path = toy_model.save(tmp_path / "sub" / "model.json")
    loaded = GuardModel.load(path)
    a, b = toy_model.dtmc, loaded.dtmc
    assert b.predicates == a.predicates == ["a", "b"]
    assert b.states == a.states
    assert b.unsafe.tolist() == a.unsafe.tolist()
    assert b.initial == a.initial
    assert b.alpha == a.alpha and b.invalid_observed == a.invalid_observed
    assert (b.matrix != a.matrix).nnz == 0 and (b.counts != a.counts).nnz == 0
    assert b.matrix.indptr.tolist() == a.matrix.indptr.tolist()
    o, p = toy_model.outcome, loaded.outcome
    assert p.formula == o.formula == 'P=? [F "unsafe"]'
    assert p.values.tolist() == o.values.tolist()
    assert p.lower is not None and o.lower is not None and p.lower.tolist() == o.lower.tolist()
    assert p.upper is not None and o.upper is not None and p.upper.tolist() == o.upper.tolist()
    assert (p.method, p.precision) == (o.method, o.precision)
    assert loaded.pac == toy_model.pac
    assert loaded.provenance == toy_model.provenance
    assert loaded.spec.to_document() == toy_model.spec.to_document() and loaded.spec.text == TOY_SPEC
    # the document of the loaded model is the same, checksum included
    assert loaded.to_document() == toy_model.to_document()
    assert not list(path.parent.glob(".model.json.*")), "no temporary file left behind"


def test_saving_replaces_an_existing_file(toy_model: GuardModel, tmp_path: Path) -> None:
    path = tmp_path / "model.json"
    path.write_text("old", encoding="utf-8")
    toy_model.save(path)
    assert GuardModel.load(path).dtmc.states == toy_model.dtmc.states


@pytest.mark.parametrize(("content", "match"), [
    (b"", "invalid JSON"),
    (b"this is not json", "invalid JSON"),
    (b"[1, 2, 3]", "not a Forewarn model file"),
    (b'{"format": "something-else", "schema_version": 1}', "not a Forewarn model file"),
])
def test_files_that_are_not_models(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "model.json"
    path.write_bytes(content)
    with pytest.raises(ModelFileError, match=match) as info:
        GuardModel.load(path)
    assert str(path) in str(info.value)


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="cannot read model file"):
        GuardModel.load(tmp_path / "absent.json")


def test_a_truncated_file(toy_model_path: Path) -> None:
    data = toy_model_path.read_bytes()
    toy_model_path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match="truncated or corrupt"):
        GuardModel.load(toy_model_path)


def test_an_unknown_schema_version(toy_model: GuardModel) -> None:
    document = toy_model.to_document()
    document["schema_version"] = SCHEMA_VERSION + 1
    document["checksum"] = _checksum(document)
    with pytest.raises(ModelFileError, match=f"schema version {SCHEMA_VERSION + 1} is not supported"):
        GuardModel.from_document(document)


def test_a_hand_edited_probability_breaks_the_checksum(toy_model_path: Path) -> None:
    document = orjson.loads(toy_model_path.read_bytes())
    first = document["transitions"]["probabilities"][0]
    text = toy_model_path.read_text(encoding="utf-8")
    edited = text.replace(f"{first!r}", f"{first + 0.001!r}", 1)
    assert edited != text
    toy_model_path.write_text(edited, encoding="utf-8")
    with pytest.raises(ModelFileError, match="checksum mismatch"):
        GuardModel.load(toy_model_path)


def _row_not_summing_to_one(d: dict[str, Any]) -> None:
    d["transitions"]["probabilities"][0] += 0.01


def _probability_zero(d: dict[str, Any]) -> None:
    d["transitions"]["probabilities"][0] = 0.0


def _value_above_one(d: dict[str, Any]) -> None:
    d["properties"][0]["values"][0] = 1.5


def _negative_value(d: dict[str, Any]) -> None:
    d["properties"][0]["values"][1] = -0.25


def _lower_above_value(d: dict[str, Any]) -> None:
    d["properties"][0]["lower"][0] = d["properties"][0]["values"][0] + 0.1


def _value_above_upper(d: dict[str, Any]) -> None:
    d["properties"][0]["upper"][1] = d["properties"][0]["values"][1] - 0.1


def _unsafe_not_absorbing(d: dict[str, Any]) -> None:
    d["states"][0]["unsafe"] = True  # state 0 has five successors


def _end_not_last(d: dict[str, Any]) -> None:
    d["states"] = d["states"][::-1]


def _target_out_of_range(d: dict[str, Any]) -> None:
    d["transitions"]["indices"][0] = len(d["states"]) + 3


def _wrong_number_of_values(d: dict[str, Any]) -> None:
    d["properties"][0]["values"].pop()


def _short_indptr(d: dict[str, Any]) -> None:
    d["transitions"]["indptr"].pop()


def _predicates_differ_from_spec(d: dict[str, Any]) -> None:
    d["predicates"] = ["b", "a"]


def _duplicate_valuation(d: dict[str, Any]) -> None:
    d["states"][1]["valuation"] = d["states"][0]["valuation"]


def _initial_out_of_range(d: dict[str, Any]) -> None:
    d["initial"].append([99, 1])


def _unknown_field(d: dict[str, Any]) -> None:
    d["extra"] = 1


def _alpha_of_wrong_type(d: dict[str, Any]) -> None:
    d["alpha"] = "lots"


def _embedded_spec_invalid(d: dict[str, Any]) -> None:
    d["spec"] = "predicates: {}\nunsafe: a\n"


@pytest.mark.parametrize(("edit", "match"), [
    (_row_not_summing_to_one, r"state 0: outgoing probabilities sum to 1\.01"),
    (_probability_zero, r"probabilities must lie in \(0, 1\]"),
    (_value_above_one, r"properties\[0\]\.values: probabilities must lie in \[0, 1\]"),
    (_negative_value, r"properties\[0\]\.values: probabilities must lie in \[0, 1\]"),
    (_lower_above_value, "lower <= value <= upper"),
    (_value_above_upper, "lower <= value <= upper"),
    (_unsafe_not_absorbing, "state 0 is marked unsafe, but the embedded spec"),
    (_end_not_last, "exactly one 'end' state"),
    (_target_out_of_range, "target index is outside"),
    (_wrong_number_of_values, "one value per state"),
    (_short_indptr, "inconsistent lengths"),
    (_predicates_differ_from_spec, "differ from the embedded spec"),
    (_duplicate_valuation, "same valuation"),
    (_initial_out_of_range, r"initial: entry \(99, 1\)"),
    (_unknown_field, "field extra"),
    (_alpha_of_wrong_type, "field alpha"),
    (_embedded_spec_invalid, "embedded spec is invalid"),
])
def test_inconsistent_documents_with_a_valid_checksum(toy_model: GuardModel, edit: Edit, match: str) -> None:
    document = copy.deepcopy(toy_model.to_document())
    GuardModel.from_document(copy.deepcopy(document))  # the unedited document loads
    edit(document)
    document["checksum"] = _checksum(document)
    with pytest.raises(ModelFileError, match=match) as info:
        GuardModel.from_document(document, source="edited.json")
    assert str(info.value).startswith("edited.json")


def test_a_document_without_certified_bounds_loads(toy_model: GuardModel) -> None:
    document = toy_model.to_document()
    document["properties"][0]["lower"] = None
    document["properties"][0]["upper"] = None
    document["check"]["method"] = "topological"
    document["checksum"] = _checksum(document)
    loaded = GuardModel.from_document(document)
    assert loaded.outcome.lower is None and loaded.outcome.upper is None
    assert np.array_equal(loaded.outcome.values, toy_model.outcome.values)


def test_a_spec_built_in_code_is_embedded_as_yaml(toy_model: GuardModel) -> None:
    spec = Spec.model_validate(toy_model.spec.to_document())
    assert spec.text is None
    model = GuardModel(spec, toy_model.dtmc, toy_model.outcome, toy_model.pac, toy_model.provenance)
    loaded = GuardModel.from_document(model.to_document())
    assert loaded.spec.to_document() == spec.to_document()
