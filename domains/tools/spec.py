"""The tool domain's spec, shipped as ``spec.yaml`` next to this module."""
from __future__ import annotations

from pathlib import Path

from ...guard.spec import Spec, load_spec

SPEC_PATH = Path(__file__).with_name("spec.yaml")


def load_tool_spec() -> Spec:
    """The parsed spec of the tool-using agent domain (predicates over the extractor's state)."""
    return load_spec(SPEC_PATH)
