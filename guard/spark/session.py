"""Starting (or joining) a Spark session for Forewarn, quietly.

Spark logs through log4j to stderr; its console progress bar is turned off and the
log level set to ``ERROR`` so that ``--format json`` on stdout stays one document.
"""
from __future__ import annotations

import os
import shutil
import sys
from typing import TYPE_CHECKING

from ...errors import InputError
from .._extras import require

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def require_pyspark() -> None:
    """Raise a one-line user error when pyspark or Java is missing (instead of a traceback)."""
    require("spark", "--engine spark")
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        raise InputError("--engine spark needs Java 17 or later (e.g. Debian's default-jre-headless); "
                            "none found on PATH or in JAVA_HOME")


def spark_session(master: str | None = None, app_name: str = "forewarn") -> SparkSession:
    """The active Spark session, or a new one on ``master`` (e.g. ``local[2]``, ``spark://…``, ``yarn``).

    A session already running (``spark-submit``, a notebook) is reused as it is: its
    master and configuration are the user's. Without a master, ``spark-submit``'s is
    used, else ``local[*]``. A new local session binds 127.0.0.1 and its
    Python workers run this interpreter, so they import the same ``guard``.
    """
    require_pyspark()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit: run here
        master = "local[*]"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "8"))
    if master is not None:
        builder = builder.master(master)
    if master is not None and master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
