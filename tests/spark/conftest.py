"""One real Spark session (``local[2]``) for the whole test session; skipped only without Java."""
from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

JAVA = bool(os.environ.get("JAVA_HOME")) or shutil.which("java") is not None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="Spark needs Java 17+ (Debian: default-jre-headless); none found")
    for item in items:
        if "spark" in item.keywords and not JAVA:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from forewarn.guard.spark import spark_session

    session = spark_session("local[2]", app_name="forewarn-tests")
    yield session
    session.stop()
