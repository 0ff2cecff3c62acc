"""A throw-away PostgreSQL cluster for the tests and bench/http_load.py: ``initdb`` in a temporary folder, ``pg_ctl`` on a
free loopback port, stopped (and its folder removed) at the end. Debian's ``postgresql`` package
provides the binaries (on PATH, or under /usr/lib/postgresql/*/bin); as root they run as ``postgres``."""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from _ports import free_port


def pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return candidates[-1] if candidates else None


def _as_owner(cmd: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root: the cluster belongs to the postgres user then
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@contextmanager
def cluster() -> Iterator[str]:
    """Start a cluster; yields the URL of its ``postgres`` database (trust authentication, loopback only)."""
    initdb, pg_ctl = pg_bin("initdb"), pg_bin("pg_ctl")
    assert initdb and pg_ctl
    folder = Path(tempfile.mkdtemp(prefix="forewarn-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    data, port = folder / "data", free_port()
    try:
        subprocess.run(_as_owner([initdb, "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync",
                                  "-E", "UTF8"]), check=True, capture_output=True)
        # durable commits as in production (fsync, synchronous_commit on): the figures must be honest
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections=200"
        subprocess.run(_as_owner([pg_ctl, "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w",
                                  "start"]), check=True, capture_output=True)
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run(_as_owner([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"]),
                           capture_output=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def fresh_database(url: str, name: str) -> str:
    """A new empty database on the cluster of ``url``; its URL."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.rsplit("/", 1)[0] + "/" + name
