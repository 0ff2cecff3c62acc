"""The group-commit writer the server's database and the MCP proxy's audit store share
(``guard/store_writer.py``), and the tables both create (``guard/store_schema.py``), on real SQLite files."""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from forewarn.errors import ConfigError
from forewarn.guard import store_schema
from forewarn.guard.store_writer import GroupWriter


def _open(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    return conn


def test_a_bad_job_does_not_sink_the_others_of_its_group(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite"
    conn = _open(path)
    conn.execute("CREATE TABLE t (k INTEGER PRIMARY KEY)")
    outcomes: dict[int, tuple[Any, BaseException | None]] = {}
    writer = GroupWriter(conn, name="test-writer", linger=0.2)

    def deliver(k: int) -> Any:
        return lambda result, exc: outcomes.__setitem__(k, (result, exc))

    writer.put(lambda c: c.execute("INSERT INTO t VALUES (1)").rowcount, deliver(1))
    writer.put(lambda c: c.execute("INSERT INTO t VALUES (1)").rowcount, deliver(2))  # the same key: refused
    writer.put(lambda c: c.execute("INSERT INTO t VALUES (3)").rowcount, deliver(3))
    writer.start()
    writer.close()
    assert not writer.is_alive()
    assert outcomes[1] == (1, None) and outcomes[3] == (1, None)
    assert outcomes[2][0] is None and isinstance(outcomes[2][1], sqlite3.IntegrityError)
    check = sqlite3.connect(path)
    assert [k for (k,) in check.execute("SELECT k FROM t ORDER BY k")] == [1, 3]
    # one group (queued before the writer started): it failed whole, then each of its jobs ran alone
    assert writer.commits == 1
    check.close()


def test_close_commits_what_is_queued_without_waiting_out_the_linger(tmp_path: Path) -> None:
    path = tmp_path / "b.sqlite"
    conn = _open(path)
    conn.execute("CREATE TABLE t (k INTEGER)")
    writer = GroupWriter(conn, name="test-writer", linger=60.0)
    writer.start()
    done = threading.Event()
    writer.put(lambda c: c.execute("INSERT INTO t VALUES (7)"), lambda result, exc: done.set())
    writer.close(timeout=10)  # the flush ends the 60 s linger at once
    assert done.is_set() and not writer.is_alive()
    check = sqlite3.connect(path)
    assert check.execute("SELECT k FROM t").fetchall() == [(7,)]
    check.close()


def test_the_tables_are_created_once_and_another_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    conn = _open(path)
    store_schema.migrate(conn, path, ConfigError, "the proxy")
    store_schema.migrate(conn, path, ConfigError, "the proxy")  # a second opener changes nothing
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"meta", "sessions", "decisions", "proposals", "approvals", "models", "model_versions"} <= tables
    columns = {row[1] for row in conn.execute("PRAGMA table_info(sessions)")}
    assert {"tenant", "metadata_held"} <= columns
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchall() == [
        (str(store_schema.SCHEMA_VERSION),)]
    conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    with pytest.raises(ConfigError, match=r"c\.sqlite: database schema version 99 is not supported \(the proxy uses"):
        store_schema.migrate(conn, path, ConfigError, "the proxy")
    conn.close()
