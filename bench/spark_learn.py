"""Learning on Spark vs the single-process learner: steps per second and peak driver memory.

What it does
------------
1. Writes a JSONL trace file of 10⁶ steps and one of 10⁷ (``--steps``), runs of 20–80
   steps over a tool-agent state (about 170 bytes of JSON a step; six CEL predicates
   over nested fields, lists and strings; 300 distinct states, so the predicate memo
   answers most steps, as it does on real logs).
2. For each file, in fresh child processes: the single-process learner
   (``guard.learn_model``) and Spark ``local[2]`` (``guard.spark.learn_model_spark``,
   after a warm-up learn on a small file so JVM start and JIT are not counted; the
   session start is reported apart). Both produce the whole model (counting, smoothing,
   Storm, PAC); the script checks that their counts are the same.
3. Peak memory: the single process's RSS; for Spark, the Python driver's RSS (it
   receives the counts) and the driver JVM's (``VmHWM``; in ``local`` mode that JVM is
   also the executor, so it holds the read buffers of running tasks). The target is a
   driver whose memory does not grow with the number of steps.
4. A partition sweep on the 10⁶ file (2, 4, 8, 16 partitions on ``local[2]``) and the
   same file on ``local[1]``: the speed-up from one core to two is what each added core
   gives (tasks share nothing but the final, small group-by).

Nothing is asserted; targets are printed beside the figures. Wall-clock on a shared
machine: the load average is printed.

Run: ``python bench/spark_learn.py [--quick] [--steps N ...] [--json FILE]``
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

import _common as C

SPEC_YAML = """\
name: tool-agent-bench
predicates:
  busy: 'state.load > 0.7'
  failed: 'state.last.status == "error"'
  writes: 'state.last.tool in ["write_file", "delete_file", "send_email"]'
  secret: '"secret" in state.tags'
  retrying: 'state.retries >= 2'
  external: 'state.last.domain != "internal"'
unsafe: 'secret && external && writes'
guard:
  thresholds: {reflect: 0.9, ask_human: 0.5, stop: 0.2}
"""
TOOLS = ("search", "read_file", "write_file", "delete_file", "send_email", "calendar")
DOMAINS = ("internal", "internal", "internal", "example.com", "mail.example.org")
TARGET_RATIO = 3.0  # Spark local[2] within 3x of the single process


def states(rng: random.Random, count: int = 300) -> list[bytes]:
    """Distinct step objects as JSON text, ordered so that neighbours are alike (runs drift)."""
    out = []
    for i in range(count):
        tags = sorted(rng.sample(("public", "draft", "secret", "pii", "customer"), rng.randint(0, 2)))
        state = {"load": round(rng.random(), 2), "retries": rng.choice((0, 0, 0, 1, 2, 3)),
                 "tags": tags, "step_kind": "tool",
                 "last": {"tool": rng.choice(TOOLS), "status": rng.choice(("ok", "ok", "ok", "error")),
                          "domain": rng.choice(DOMAINS)}}
        out.append(orjson.dumps({"state": state, "t": float(i % 97)}))
    return out


def write_traces(path: Path, n_steps: int, seed: int) -> tuple[int, int]:
    """Runs of 20–80 steps (a random walk over the states) until ``n_steps`` steps are written."""
    rng = random.Random(seed)
    pool = states(rng)
    written = runs = 0
    with open(path, "wb") as out:
        while written < n_steps:
            length = min(rng.randint(20, 80), n_steps - written)
            at = rng.randrange(len(pool))
            steps = []
            for _ in range(length):
                at = (at + rng.randint(-3, 3)) % len(pool)
                steps.append(pool[at])
            out.write(b'{"id":"run-%d","steps":[' % runs + b",".join(steps) + b"]}\n")
            written += length
            runs += 1
    return runs, written


def counts_digest(model: Any) -> list[Any]:
    d = model.dtmc
    return [d.states, d.counts.indptr.tolist(), d.counts.indices.tolist(), d.counts.data.tolist(),
            sorted(d.initial.items())]


def worker_local(path: str) -> dict[str, Any]:
    from forewarn.guard import learn_model, parse_spec

    spec = parse_spec(SPEC_YAML)
    started = time.perf_counter()
    model = learn_model([path], spec)
    wall = time.perf_counter() - started
    return {"steps": model.provenance["steps"], "wall_s": wall, "steps_per_s": model.provenance["steps"] / wall,
            "rss_peak_mib": C.max_rss_mib(), "digest": hash(json.dumps(counts_digest(model)))}


def jvm_peak_mib(session: Any) -> float | None:
    """The driver JVM's peak RSS (VmHWM), from /proc."""
    proc = getattr(session.sparkContext._gateway, "proc", None)
    if proc is None:
        return None
    try:
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except (AttributeError, OSError):
        return None
    return None


def worker_spark(master: str, warmup: str, path: str, partitions: list[int]) -> list[dict[str, Any]]:
    from forewarn.guard import parse_spec
    from forewarn.guard.spark import learn_model_spark, spark_session

    spec = parse_spec(SPEC_YAML)
    started = time.perf_counter()
    session = spark_session(master)
    session_s = time.perf_counter() - started
    learn_model_spark([warmup], spec, spark=session)
    size = Path(path).stat().st_size
    out = []
    for count in partitions:
        started = time.perf_counter()
        model = learn_model_spark([path], spec, spark=session, split_bytes=size // count + 1)
        wall = time.perf_counter() - started
        out.append({"master": master, "partitions": count, "steps": model.provenance["steps"], "wall_s": wall,
                    "steps_per_s": model.provenance["steps"] / wall, "session_s": session_s,
                    "driver_rss_peak_mib": C.max_rss_mib(), "jvm_peak_mib": jvm_peak_mib(session),
                    "digest": hash(json.dumps(counts_digest(model)))})
    session.stop()
    return out


def child(*args: str) -> Any:
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the digests are compared across processes
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", *args],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"worker {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10⁵ and 10⁶ steps")
    parser.add_argument("--steps", type=int, nargs="+", help="file sizes in steps (default 10⁶ 10⁷)")
    parser.add_argument("--sweep", type=int, nargs="*", default=[2, 4, 8, 16], help="partition counts")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, *rest = args.worker
        if kind == "local":
            print(json.dumps(worker_local(rest[0])))
        else:
            print(json.dumps(worker_spark(rest[0], rest[1], rest[2], [int(p) for p in rest[3:]])))
        return
    sizes = args.steps or ([100_000, 1_000_000] if args.quick else [1_000_000, 10_000_000])
    print(json.dumps(C.machine()))
    rows, sweep = [], []
    with tempfile.TemporaryDirectory(prefix="forewarn-spark-bench-") as tmp:
        warmup = Path(tmp) / "warmup.jsonl"
        write_traces(warmup, 20_000, seed=1)
        for n in sizes:
            path = Path(tmp) / f"steps-{n}.jsonl"
            started = time.perf_counter()
            runs, steps = write_traces(path, n, seed=7)
            print(f"wrote {steps:,} steps in {runs:,} runs ({path.stat().st_size / 2**20:,.0f} MiB) "
                  f"in {time.perf_counter() - started:.1f} s", flush=True)
            local = child("local", str(path))
            spark = child("spark", "local[2]", str(warmup), str(path), "2")[0]
            rows.append({"steps": n, "mib": path.stat().st_size / 2**20, "local": local, "spark": spark,
                         "same_counts": local["digest"] == spark["digest"]})
            print(f"  local {local['steps_per_s']:,.0f} steps/s, spark local[2] {spark['steps_per_s']:,.0f} "
                  f"steps/s", flush=True)
            if n == sizes[0] or n == 1_000_000:
                sweep_path = path
        sweep = child("spark", "local[2]", str(warmup), str(sweep_path), *map(str, args.sweep))
        sweep += child("spark", "local[1]", str(warmup), str(sweep_path), "2")
    print()
    print(C.table(["steps", "MiB", "local steps/s", "local RSS MiB", "spark[2] steps/s", "ratio",
                   "driver RSS MiB", "driver JVM MiB", "session s", "same counts"],
                  [[r["steps"], r["mib"], r["local"]["steps_per_s"], r["local"]["rss_peak_mib"],
                    r["spark"]["steps_per_s"], r["local"]["steps_per_s"] / r["spark"]["steps_per_s"],
                    r["spark"]["driver_rss_peak_mib"], r["spark"]["jvm_peak_mib"], r["spark"]["session_s"],
                    r["same_counts"]] for r in rows],
                  title="single process vs Spark local[2] (whole learn: count, smooth, Storm, PAC)"))
    worst = max(r["local"]["steps_per_s"] / r["spark"]["steps_per_s"] for r in rows)
    print(f"target: Spark within {TARGET_RATIO}x of the single process: {C.verdict(worst <= TARGET_RATIO)} "
          f"(worst {worst:.2f}x)")
    drivers = [r["spark"]["driver_rss_peak_mib"] for r in rows]
    print(f"target: driver memory independent of steps: Python driver {drivers[0]:.0f} → {drivers[-1]:.0f} MiB "
          f"over {sizes[0]:,} → {sizes[-1]:,} steps")
    print()
    print(C.table(["master", "partitions", "steps/s", "wall s"],
                  [[s["master"], s["partitions"], s["steps_per_s"], s["wall_s"]] for s in sweep],
                  title=f"partition sweep on {sweep[0]['steps']:,} steps"))
    two = max(s["steps_per_s"] for s in sweep if s["master"] == "local[2]")
    one = max(s["steps_per_s"] for s in sweep if s["master"] == "local[1]")
    print(f"speed-up local[1] → local[2]: {two / one:.2f}x")
    C.write_json(args.json, {"rows": rows, "sweep": sweep})


if __name__ == "__main__":
    main()
