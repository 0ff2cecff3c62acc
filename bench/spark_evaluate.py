"""Cross-validation on Spark vs the single-process ``evaluate``: wall-clock, and the same figures.

Generates tool-agent runs (``domains.tools.generator``) in uneven groups (``meta.task``:
squares modulo 11), then runs a 5-fold grouped evaluation in this process and on Spark
``local[2]`` (after a warm-up evaluation on a small file, so JVM start and JIT are not
counted; the session start is reported apart). The script checks that the two JSON
documents are equal. Nothing is asserted on time; on one machine Spark pays three passes
over the runs and its task overhead, and gains only where the logs no longer fit.

Run: ``python bench/spark_evaluate.py [--runs N]``
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import orjson


def write_runs(path: Path, runs: int, seed: int) -> None:
    from forewarn.domains.tools.generator import generate_traces

    raw = path.with_suffix(".raw")
    generate_traces(runs, seed, raw)
    lines = []
    for n, line in enumerate(raw.read_bytes().splitlines()):
        run = orjson.loads(line)
        run["meta"] = {**run.get("meta", {}), "task": f"t{(n * n) % 11}"}
        lines.append(orjson.dumps(run))
    path.write_bytes(b"\n".join(lines) + b"\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    from forewarn.domains.tools.spec import load_tool_spec
    from forewarn.guard.evaluation.evaluate import evaluate
    from forewarn.guard.spark import evaluate_spark, spark_session
    from forewarn.guard.traces import read_runs

    spec, thetas = load_tool_spec(), [0.1, 0.3, 0.5, 0.7, 0.9]
    with tempfile.TemporaryDirectory() as folder:
        small, big = Path(folder) / "small.jsonl", Path(folder) / "runs.jsonl"
        write_runs(small, 60, 1)
        write_runs(big, args.runs, 2)
        steps = sum(len(orjson.loads(line)["steps"]) for line in big.read_bytes().splitlines())
        started = time.perf_counter()
        local = evaluate(list(read_runs(big)), spec, thetas, folds=5, group_by="meta.task")
        local_s = time.perf_counter() - started
        started = time.perf_counter()
        spark = spark_session("local[2]", app_name="forewarn-bench")
        session_s = time.perf_counter() - started
        evaluate_spark([str(small)], spec, thetas, folds=5, group_by="meta.task", spark=spark)  # warm-up
        started = time.perf_counter()
        distributed = evaluate_spark([str(big)], spec, thetas, folds=5, group_by="meta.task", spark=spark)
        spark_s = time.perf_counter() - started
        spark.stop()
    same = distributed.to_dict() == local.to_dict()
    print(f"{args.runs} runs, {steps} steps, 5 folds by meta.task; load average {os.getloadavg()[0]:.1f}")
    print(f"single process : {local_s:7.1f} s  ({steps / local_s:,.0f} steps/s)   <- baseline")
    print(f"spark local[2] : {spark_s:7.1f} s  ({steps / spark_s:,.0f} steps/s), session start {session_s:.1f} s")
    print(f"figures identical (whole JSON document): {same}")


if __name__ == "__main__":
    main()
