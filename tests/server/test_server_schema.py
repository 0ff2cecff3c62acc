"""Property-based tests from the server's own OpenAPI document (schemathesis) against real uvicorn:
no 500s, every response matches its documented status, content type and schema, and invalid
input is refused with a 4xx.

Driven through hypothesis directly: schemathesis' pytest plugin (lazy fixtures) does not run
under this pytest version.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, assume, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from _sidecar import ServerThread, auth
from _sidecar import settings as server_settings
from forewarn.server.app import create_app
from forewarn.server.settings import ServerSettings

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          negative_data_rejection]
_PATHS = create_app(ServerSettings(insecure_no_auth=True)).openapi()["paths"]
# negative data needs something to break: a parameter or a body
CASES = [(method.upper(), path, mode) for path, item in _PATHS.items() for method, spec in item.items()
         for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
         if mode is GenerationMode.POSITIVE or spec.get("parameters") or spec.get("requestBody")]
EXAMPLES = int(os.environ.get("FOREWARN_SCHEMA_EXAMPLES", "25"))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, builtin_path: Path, toy_path: Path) -> Iterator[ServerThread]:
    db = tmp_path_factory.mktemp("schema") / "schema.db"
    # long polls (/v1/changes, /v1/approvals/{id}) answer within half a second: the examples must not wait
    limits = ServerSettings().limits.model_copy(update={"max_wait_seconds": 0.5})
    with ServerThread(server_settings(db, {"builtin": builtin_path, "toy": toy_path}, limits=limits)) as running:
        yield running


@pytest.fixture(scope="module")
def api_schema(live: ServerThread) -> Any:
    return schemathesis.openapi.from_url(f"{live.url}/openapi.json")


@pytest.mark.parametrize("method, path, mode", CASES)
def test_api_conforms(api_schema: Any, live: ServerThread, method: str, path: str, mode: GenerationMode) -> None:
    operation = api_schema[path][method]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case: Any) -> None:
        # Query values that reach the wire as a valid request: None is dropped by requests, and a list of
        # at most one item is sent as that item. A 200 for those is right, not a finding.
        assume(not any(value is None or (isinstance(value, list) and len(value) <= 1)
                       for value in (case.query or {}).values()))
        case.call_and_validate(base_url=live.url, headers=auth("admin"), checks=CHECKS, timeout=30)

    run()
