"""The sidecar with a model of several kinds (learning.kinds): its sessions are the library's Session, so they
weigh the kinds by their posterior, and a session resumed after a restart replays it."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import httpx
import numpy as np
import orjson
import pytest

from _coverage import MIXTURES, simulate
from _sidecar import ServerThread, auth, settings
from _support import NONE, TOY_SPEC, A, B, toy_run, toy_state
from forewarn.guard.model import GuardModel
from forewarn.guard.pipeline import learn_model
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import parse_spec
from forewarn.guard.storm import Method


@pytest.fixture(scope="module")
def kinds_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("kinds-model")
    spec = parse_spec(TOY_SPEC.replace("  delta: 0.05\n", "  delta: 0.05\n  kinds: 2\n"))
    paths: Counter[tuple[int, ...]] = Counter()
    simulate(MIXTURES["two_types"], 300, np.random.default_rng(11), PredicateSet(spec), paths=paths)
    runs = [toy_run(f"r{n}-{c}", list(path)) for n, (path, copies) in enumerate(sorted(paths.items()))
            for c in range(copies)]
    traces = folder / "runs.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in runs) + b"\n")
    return learn_model([traces], spec, method=Method.TOPOLOGICAL).save(folder / "kinds.json")


def test_sidecar_sessions_weigh_the_kinds_and_resume_their_posterior(tmp_path: Path, kinds_path: Path) -> None:
    guard = Guard(GuardModel.load(kinds_path))
    local = guard.session()
    expected = [local.observe(toy_state(bits)).p_unsafe for bits in (NONE, B)]
    expected_preview = local.preview(toy_state(A)).p_unsafe
    db = tmp_path / "kinds.db"
    policy = {"thresholds": {"reflect": 0.0, "ask_human": 0.0, "stop": 0.0}}  # decisions only, no approvals
    with ServerThread(settings(db, {"kinds": kinds_path})) as server, httpx.Client(base_url=server.url) as http:
        sid = http.post("/v1/sessions", json={"model": "kinds", "policy": policy}, headers=auth("agent")).json()["id"]
        got = [http.post(f"/v1/sessions/{sid}/observe", json={"state": toy_state(bits)},
                         headers=auth("agent")).json()["p_unsafe"] for bits in (NONE, B)]
        assert got == expected
        preview = http.post(f"/v1/sessions/{sid}/preview", json={"state": toy_state(A)}, headers=auth("agent")).json()
        assert preview["p_unsafe"] == expected_preview
    # a new server process knows the session only from the database: the posterior is replayed from its steps
    with ServerThread(settings(db, {"kinds": kinds_path})) as server, httpx.Client(base_url=server.url) as http:
        after = http.post(f"/v1/sessions/{sid}/observe", json={"state": toy_state(A)}, headers=auth("agent")).json()
        assert after["p_unsafe"] == local.observe(toy_state(A)).p_unsafe == expected_preview
        fresh = http.post("/v1/sessions", json={"model": "kinds", "policy": policy}, headers=auth("agent")).json()["id"]
        http.post(f"/v1/sessions/{fresh}/observe", json={"state": toy_state(NONE)}, headers=auth("agent"))
        other = http.post(f"/v1/sessions/{fresh}/preview", json={"state": toy_state(A)}, headers=auth("agent")).json()
        assert other["p_unsafe"] < 0.2 < after["p_unsafe"]  # the same state, another prefix, another kind
