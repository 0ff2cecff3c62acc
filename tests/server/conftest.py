from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from _sidecar import KEYS, ServerThread, settings
from forewarn.domains.embodied.builtin import builtin_model_path
from forewarn.guard.client import Client


@pytest.fixture(scope="session")
def builtin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The built-in demo model, learned once per test run into a temporary cache."""
    return builtin_model_path(tmp_path_factory.mktemp("forewarn-cache"))


@pytest.fixture(scope="session")
def builtin_v2_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another version of the built-in model: same spec and predicates, other runs, other values."""
    from forewarn.domains.embodied import generate_traces
    from forewarn.domains.embodied.builtin import BUILTIN_TASK
    from forewarn.domains.embodied.spec import write_spec
    from forewarn.domains.embodied.tasks import load_tasks
    from forewarn.guard.pipeline import learn_model
    from forewarn.guard.spec import load_spec

    folder = tmp_path_factory.mktemp("builtin-v2")
    task = next(t for t in load_tasks("unsafe") if t.id == BUILTIN_TASK)
    generate_traces([task], 120, 11, folder / "traces.jsonl")
    write_spec(task, folder / "spec.yaml")
    return learn_model([folder / "traces.jsonl"], load_spec(folder / "spec.yaml")).save(folder / "v2.json")


@pytest.fixture(scope="session")
def toy_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model with other predicates (a, b) than the built-in one."""
    import orjson

    from _support import TOY_SPEC, toy_run
    from forewarn.guard.pipeline import learn_model
    from forewarn.guard.spec import parse_spec

    folder = tmp_path_factory.mktemp("toy")
    runs = [toy_run("r1", [0, 1, 3]), toy_run("r2", [0, 2, 2]), toy_run("r3", [0, 1, 0]), toy_run("r4", [3])]
    traces = folder / "toy.jsonl"
    traces.write_text("\n".join(orjson.dumps(r).decode() for r in runs) + "\n", encoding="utf-8")
    return learn_model([traces], parse_spec(TOY_SPEC)).save(folder / "toy.json")


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[str]:
    """One throw-away PostgreSQL cluster for the whole run (the URL of its maintenance database)."""
    from _postgres import cluster, pg_bin

    if pg_bin("initdb") is None or pg_bin("pg_ctl") is None:
        pytest.skip("PostgreSQL is not installed (no initdb/pg_ctl; .ci/run installs Debian's postgresql)")
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")
    with cluster() as url:
        yield url


@pytest.fixture
def postgres_db(postgres_cluster: str, request: pytest.FixtureRequest) -> str:
    """A fresh, empty database for one test: its postgresql:// URL."""
    import re

    from _postgres import fresh_database

    return fresh_database(postgres_cluster, "t_" + re.sub(r"\W", "_", request.node.name)[-50:].lower())


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "backends: run the test's `server` on SQLite and on PostgreSQL")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "server" in metafunc.fixturenames and metafunc.definition.get_closest_marker("backends"):
        metafunc.parametrize("backend", ["sqlite", "postgresql"], indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """The database the `server` fixture uses: SQLite unless the test is marked ``backends``."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture
def server(tmp_path: Path, builtin_path: Path, toy_path: Path, backend: str,
           request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    """A real uvicorn on loopback serving the built-in model (default) and the toy one."""
    db = tmp_path / "forewarn.db" if backend == "sqlite" else request.getfixturevalue("postgres_db")
    with ServerThread(settings(db, {"builtin": builtin_path, "toy": toy_path})) as running:
        yield running


@pytest.fixture
def http(server: ServerThread) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client


@pytest.fixture
def agent(server: ServerThread) -> Iterator[Client]:
    with Client(server.url, api_key=KEYS["agent"]) as client:
        yield client


@pytest.fixture
def approver(server: ServerThread) -> Iterator[Client]:
    with Client(server.url, api_key=KEYS["approver"]) as client:
        yield client


@pytest.fixture
def admin(server: ServerThread) -> Iterator[Client]:
    with Client(server.url, api_key=KEYS["admin"]) as client:
        yield client
