"""Learn + check time of learned chains of 10², 10³, 10⁴ and 10⁵ abstract states.

How the chains are made
-----------------------
They are *learned* chains: the script builds the input ``guard.learning.learn_dtmc``
takes (a ``TransitionCounts``: transition counts, initial states, runs, steps) and lets
``learn_dtmc`` do the smoothing with the spec rule ``max_changed_predicates: 1``, as
``forewarn learn`` does after counting. The counts come from simulated agent runs in
the abstract space, not from concrete states (the path from JSONL to counts is what
``bench/learn_throughput.py`` measures):

* a spec with ``w`` Boolean predicates ``p0 … p{w-1}`` (7, 11, 14 and 17 of them for
  10², 10³, 10⁴, 10⁵ states) and ``unsafe: p0 && p1 && p2``;
* a fixed random set of reachable valuations (1.1 x the target size, 55–85 % of the
  2^w), so a state has about 5–15 valid neighbours at Hamming distance 1;
* runs start in one of 8 safe valuations; at each step a run ends with probability
  1 % (so runs last about 100 steps and about 1 % of the probability mass is
  absorbed per step: slow absorption is what makes value iteration work hard), stays
  put with probability 30 % (an agent step that changes no predicate), or flips one
  predicate (p0–p2 four times less often than the others) if the result is reachable.
  A run that enters an unsafe valuation stops there (unsafe is absorbing).
* about 30 steps per reachable state in all (3·10⁶ steps for 10⁵ states).

After smoothing, a transient state has about 8–16 successors (itself, its valid
neighbours, ``end``), and 5–10 % of the states are unsafe (absorbing).

What is measured, per size (each size in its own process, so its peak RSS is its own)
------------------------------------------------------------------------------------
* learn: ``learn_dtmc`` (smoothing, valid successors, CSR matrices);
* PAC: ``guard.pac.pac_report`` (``forewarn learn`` runs it after checking), up to
  ``--pac-max`` states, because its sparse LU solve grows much faster than the chain
  (73 s of CPU at 10⁴ states here, against 0.8 s to learn; not attempted at 10⁵);
* build: ``labels_of`` + ``build_sparse_dtmc`` (the float model Storm checks);
* check: ``check_sparse_model`` for ``P=? [F "unsafe"]`` with ``Method.SOUND``
  (Forewarn's default: certified bounds, precision 1e-6), ``Method.TOPOLOGICAL`` and,
  up to ``--exact-max`` (default 10²), ``Method.EXACT`` (exact rows + rational build +
  check, in a child process stopped after ``--exact-timeout`` seconds). Exact rational
  solving blows up on these chains: 1 s of CPU at 186 states, 38 s at 307 states,
  not done within 240 s at 10³ (nor within 60 s with any of Storm's linear-equation
  solvers: default, elimination, Eigen, gmm++, native); so the default stops at 10²;
* the largest absolute difference between the methods' values over all states, and
  the widest certified interval (upper − lower) of the sound result;
* memory: tracemalloc peak of Python/NumPy allocations during learn + build + sound
  check (a second, untimed pass: tracemalloc slows allocation), and the process's peak
  RSS (``resource.getrusage``), which also sees Storm's C++ memory, beside the RSS
  the input counts alone took.

Run: ``python bench/precompute.py [--quick] [--sizes 100,1000] [--json FILE]``
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import _common as C
from forewarn.guard.learning import END, TransitionCounts, learn_dtmc
from forewarn.guard.pac import pac_report
from forewarn.guard.pipeline import transition_rule
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.spec import Spec, parse_spec
from forewarn.guard.storm import Method, build_sparse_dtmc, check_sparse_model, labels_of

FORMULA = 'P=? [F "unsafe"]'
TARGET_SOUND_1E5_S = 2.0
WIDTHS = {100: 7, 1000: 11, 10_000: 14, 100_000: 17}
UNSAFE_BITS = 0b111


def width_for(size: int) -> int:
    return WIDTHS.get(size) or max(4, math.ceil(math.log2(1.1 * size / 0.75)))


def chain_spec(width: int) -> Spec:
    predicates = "\n".join(f"  p{i}: 'state.p{i}'" for i in range(width))
    return parse_spec(f"name: chain-{width}\npredicates:\n{predicates}\nunsafe: 'p0 && p1 && p2'\n"
                      "valid_transitions:\n  max_changed_predicates: 1\nlearning:\n  alpha: 0.1\n")


def simulate_counts(size: int, width: int, *, seed: int = 0, visits: int = 30, p_end: float = 0.01,
                    p_stay: float = 0.3) -> TransitionCounts:
    """Counts of simulated agent runs over ``width`` predicates (see the module docstring)."""
    rng = np.random.default_rng(seed)
    space = 1 << width
    n_allowed = min(space, round(1.1 * size))
    allowed = np.zeros(space, dtype=bool)
    allowed[rng.choice(space, size=n_allowed, replace=False)] = True
    masks = np.arange(space)
    unsafe = (masks & UNSAFE_BITS) == UNSAFE_BITS
    candidates = np.flatnonzero(allowed & ((masks & UNSAFE_BITS) == 0))
    starts = rng.choice(candidates, size=min(8, candidates.size), replace=False)
    weights = np.ones(width)
    weights[:3] = 0.25
    weights /= weights.sum()
    total = visits * n_allowed
    walkers = int(min(8192, max(8, total // 400)))  # each walker makes several runs
    current = rng.choice(starts, size=walkers)
    initial = Counter(current.tolist())
    runs, unsafe_runs, steps = walkers, 0, 0
    end_code = space
    codes = []
    while steps < total:
        r = rng.random(walkers)
        flip = 1 << rng.choice(width, size=walkers, p=weights)
        proposal = current ^ flip
        move = allowed[proposal] & (r >= p_end + p_stay)
        nxt = np.where(move, proposal, current)
        ended = r < p_end
        codes.append(current.astype(np.int64) * (end_code + 1) + np.where(ended, end_code, nxt))
        steps += walkers
        hit = ~ended & unsafe[nxt]
        unsafe_runs += int(hit.sum())
        restart = ended | hit
        k = int(restart.sum())
        if k:
            fresh = rng.choice(starts, size=k)
            initial.update(fresh.tolist())
            runs += k
            nxt = nxt.copy()
            nxt[restart] = fresh
        current = nxt
    pairs, counts = np.unique(np.concatenate(codes), return_counts=True)
    src = (pairs // (end_code + 1)).tolist()
    dst = [END if d == end_code else d for d in (pairs % (end_code + 1)).tolist()]
    out = TransitionCounts()
    out.counts = Counter(dict(zip(zip(src, dst), counts.tolist())))
    out.initial = initial
    out.unsafe = {d for d in dst if d != END and unsafe[d]}
    out.runs, out.steps, out.unsafe_runs = runs, steps, unsafe_runs
    return out


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """Wall-clock seconds of one call (see :func:`timed2` for CPU seconds too)."""
    value, wall, _ = timed2(fn, *args, **kwargs)
    return value, wall


def timed2(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float, float]:
    """(value, wall seconds, CPU seconds of this process) of one call."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - wall0, time.process_time() - cpu0


def exact_worker(size: int, seed: int) -> dict[str, Any]:
    """Exact check in its own process (may be stopped by the parent's timeout)."""
    width = width_for(size)
    spec = chain_spec(width)
    predicates = PredicateSet(spec)
    dtmc = learn_dtmc(simulate_counts(size, width, seed=seed), predicates, alpha=float(spec.learning.alpha),
                      rule=transition_rule(spec, predicates))
    rows, rows_wall, rows_cpu = timed2(lambda: [dtmc.exact_row(i) for i in range(dtmc.size)])
    model, build_wall, build_cpu = timed2(build_sparse_dtmc, dtmc.matrix, labels_of(dtmc), exact_rows=rows)
    outcome, check_wall, check_cpu = timed2(check_sparse_model, model, FORMULA, method=Method.EXACT)
    return {"wall_s": rows_wall + build_wall + check_wall, "cpu_s": rows_cpu + build_cpu + check_cpu,
            "parts_cpu_s": {"exact_rows": rows_cpu, "build": build_cpu, "check": check_cpu},
            "values": outcome.values.tolist()}


def size_worker(size: int, seed: int, pac_max: int, trace_memory: bool) -> dict[str, Any]:
    width = width_for(size)
    spec = chain_spec(width)
    predicates = PredicateSet(spec)
    rule = transition_rule(spec, predicates)
    counts, gen_s = timed(simulate_counts, size, width, seed=seed)
    rss_input = C.max_rss_mib()

    wall: dict[str, float | None] = {}
    cpu: dict[str, float | None] = {}
    dtmc, wall["learn"], cpu["learn"] = timed2(learn_dtmc, counts, predicates, alpha=float(spec.learning.alpha), rule=rule)
    labels, wall["labels"], cpu["labels"] = timed2(labels_of, dtmc)
    model, wall["build"], cpu["build"] = timed2(build_sparse_dtmc, dtmc.matrix, labels)
    sound, wall["sound"], cpu["sound"] = timed2(check_sparse_model, model, FORMULA, method=Method.SOUND)
    topo, wall["topological"], cpu["topological"] = timed2(check_sparse_model, model, FORMULA,
                                                           method=Method.TOPOLOGICAL)
    wall["pac"] = cpu["pac"] = amplification = None
    if size <= pac_max:
        pac, wall["pac"], cpu["pac"] = timed2(pac_report, dtmc, epsilon=spec.learning.epsilon,
                                              delta=spec.learning.delta)
        amplification = pac.amplification
    rss_peak = C.max_rss_mib()

    peak_py = tracemalloc_s = None
    if trace_memory:
        traced_from = time.perf_counter()
        del model
        tracemalloc.start()
        again = learn_dtmc(counts, predicates, alpha=float(spec.learning.alpha), rule=rule)
        model = build_sparse_dtmc(again.matrix, labels_of(again))
        check_sparse_model(model, FORMULA, method=Method.SOUND)
        peak_py = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        tracemalloc_s = time.perf_counter() - traced_from

    init = sorted(dtmc.initial)
    row_len = np.diff(dtmc.matrix.indptr)
    transient = ~dtmc.absorbing
    return {
        "size_target": size, "predicates": width, "states": dtmc.size, "transitions": int(dtmc.matrix.nnz),
        "unsafe_states": int(dtmc.unsafe.sum()), "succ_mean": float(row_len[transient].mean()),
        "succ_max": int(row_len.max()), "runs": counts.runs, "steps": counts.steps,
        "unsafe_runs": counts.unsafe_runs, "observed_pairs": len(counts.counts),
        "generate_s": gen_s, "wall_s": wall, "cpu_s": cpu,
        "storm_reported_s": {"sound": sound.seconds, "topological": topo.seconds},
        "pac_amplification": amplification,
        "sound_bound_width": float(np.max(sound.upper - sound.lower)) if sound.lower is not None else None,
        "diff_sound_topological": float(np.max(np.abs(sound.values - topo.values))),
        "p_unsafe_initial_mean": float(np.mean(sound.values[init])),
        "rss_input_mib": rss_input, "rss_peak_mib": rss_peak, "tracemalloc_peak_mib": peak_py,
        "tracemalloc_pass_s": tracemalloc_s,
        "sound_values": sound.values.tolist(), "topological_values": topo.values.tolist(),
    }


def run_child(args: list[str], timeout: float | None) -> tuple[dict[str, Any] | None, str | None]:
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"stopped after {timeout:.0f} s"
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["?"])[-1]
        return None, f"failed: {tail}"
    return json.loads(done.stdout.strip().splitlines()[-1]), None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes 10², 10³, 10⁴ only (about 20 s)")
    parser.add_argument("--sizes", help="comma-separated target sizes (default 100,1000,10000,100000)")
    parser.add_argument("--exact-max", type=int, default=100,
                        help="largest target size checked exactly (default 10²: at 10³ it does not finish in minutes)")
    parser.add_argument("--exact-timeout", type=float, default=60.0, help="seconds before an exact check is stopped")
    parser.add_argument("--pac-max", type=int, default=1000,
                        help="largest target size whose PAC report is timed (default 10³; 10⁴ takes over a minute)")
    parser.add_argument("--no-tracemalloc", action="store_true",
                        help="skip the tracemalloc pass (about a third of the default run's time, at 10⁵)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--exact-worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker is not None:
        print(json.dumps(size_worker(args.worker, args.seed, args.pac_max, not args.no_tracemalloc)))
        return 0
    if args.exact_worker is not None:
        print(json.dumps(exact_worker(args.exact_worker, args.seed)))
        return 0

    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else \
        ([100, 1000, 10_000] if args.quick else [100, 1000, 10_000, 100_000])
    results: list[dict[str, Any]] = []
    for size in sizes:
        child = ["--worker", str(size), "--seed", str(args.seed), "--pac-max", str(args.pac_max)]
        if args.no_tracemalloc:
            child.append("--no-tracemalloc")
        row, error = run_child(child, timeout=900)
        if row is None:
            print(f"size {size}: {error}", file=sys.stderr)
            results.append({"size_target": size, "error": error})
            continue
        sound = np.array(row.pop("sound_values"))
        topo = np.array(row.pop("topological_values"))
        row["exact"] = None
        if size <= args.exact_max:
            exact, error = run_child(["--exact-worker", str(size), "--seed", str(args.seed)], args.exact_timeout)
            if exact is None:
                row["exact"] = {"skipped": error}
            else:
                values = np.array(exact.pop("values"))
                exact["diff_sound_exact"] = float(np.max(np.abs(sound - values)))
                exact["diff_topological_exact"] = float(np.max(np.abs(topo - values)))
                row["exact"] = exact
        else:
            row["exact"] = {"skipped": f"above --exact-max {args.exact_max}"}
        results.append(row)
        print(f"  size {size:>7}: {row['states']} states, learn {row['cpu_s']['learn']:.2f} s CPU, "
              f"sound {row['cpu_s']['sound']:.3f} s CPU", file=sys.stderr)

    ok = [r for r in results if "error" not in r]
    print()
    print(C.table(
        ["states", "preds", "transitions", "succ/state", "unsafe", "runs", "steps", "unsafe runs", "P(unsafe) init"],
        [[r["states"], r["predicates"], r["transitions"], r["succ_mean"], r["unsafe_states"], r["runs"], r["steps"],
          r["unsafe_runs"], r["p_unsafe_initial_mean"]] for r in ok],
        title="Chains (learned from simulated agent runs; smoothing with max_changed_predicates: 1)"))

    def exact_cell(r: dict[str, Any], key: str) -> Any:
        e = r["exact"]
        return e.get(key) if e and "skipped" not in e else None

    for clock, label in (("cpu_s", "CPU seconds of the process (robust to a shared machine)"),
                         ("wall_s", "wall-clock seconds")):
        print()
        rows = []
        for r in ok:
            t = r[clock]
            build = t["labels"] + t["build"]
            rows.append([r["states"], t["learn"], t["pac"], build, t["sound"], t["topological"],
                         exact_cell(r, clock), t["learn"] + build + t["sound"],
                         r["wall_s"]["learn"] and r["cpu_s"]["learn"] / r["wall_s"]["learn"]])
        print(C.table(["states", "learn", "PAC", "build", "sound", "topological", "exact", "learn+build+sound",
                       "CPU share"], rows,
                      title=f"Time, {label}; build = labels_of + build_sparse_dtmc; "
                            "exact = exact rows + rational build + check"))
    print()
    print(C.table(
        ["states", "|sound-topo|", "|sound-exact|", "|topo-exact|", "sound bound width", "tracemalloc MiB",
         "RSS input MiB", "peak RSS MiB"],
        [[r["states"], r["diff_sound_topological"], exact_cell(r, "diff_sound_exact"),
          exact_cell(r, "diff_topological_exact"), r["sound_bound_width"], r["tracemalloc_peak_mib"],
          r["rss_input_mib"], r["rss_peak_mib"]] for r in ok],
        title="Agreement (max absolute difference over all states) and memory"))
    for r in ok:
        if r["exact"] and "skipped" in r["exact"]:
            print(f"  exact at {r['states']} states: not run ({r['exact']['skipped']}); exact rational solving "
                  "took 38 s CPU at 307 states and did not finish in 240 s at 10³ on this machine")
    for r in ok:
        if r["cpu_s"]["pac"] is None:
            print(f"  PAC report at {r['states']} states: not timed (above --pac-max {args.pac_max}; "
                  "guard.pac's sparse LU solve took 73 s CPU at 10⁴ here)")
    print("  CPU share = learn CPU / learn wall: well below 1 means other processes took the cores.")

    big = [r for r in ok if r["size_target"] >= 100_000]
    print()
    if big:
        r = big[0]
        rows = []
        for what, keys in (("sound check", ("sound",)), ("build + sound check", ("labels", "build", "sound")),
                           ("learn + build + sound check", ("learn", "labels", "build", "sound"))):
            cpu_total = sum(r["cpu_s"][k] for k in keys)
            wall_total = sum(r["wall_s"][k] for k in keys)
            rows.append([f"{what}, {r['states']:,} states", f"{cpu_total:.2f} s", f"{wall_total:.2f} s",
                         C.verdict(cpu_total <= TARGET_SOUND_1E5_S)])
        print(C.table(["target: certified values for 10⁵ states in <= 2 s", "CPU", "wall", "verdict (CPU)"], rows,
                      title="Target"))
    else:
        print("Target (certified values for 10⁵ states in <= 2 s): not measured in this run (no 10⁵ size)")

    C.write_json(args.json, {
        "benchmark": "precompute",
        "config": {"sizes": sizes, "exact_max": args.exact_max, "exact_timeout": args.exact_timeout,
                   "pac_max": args.pac_max, "seed": args.seed, "quick": args.quick},
        "results": results,
        "target_sound_1e5_s": TARGET_SOUND_1E5_S,
    })
    return 0


if __name__ == "__main__":
    sys.exit(main())
