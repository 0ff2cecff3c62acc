"""pyspark is optional: nothing outside ``--engine spark`` imports it."""
from __future__ import annotations

import subprocess
import sys


def test_the_core_and_the_cli_do_not_import_pyspark() -> None:
    code = ("import sys, forewarn.guard, forewarn.guard.cli, forewarn.guard.pipeline, forewarn.guard.runtime, "
            "forewarn.guard.replay, forewarn.guard.spark, forewarn.server; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
