"""Product size and precompute time with 3 monitors over a 64-state chain; decision latency.

The chain: 6 predicates (64 abstract states) learned from synthetic episodic runs in
which one predicate flips per step (``max_changed_predicates: 1``) and about 2% of runs
end per step. Three monitors with bound K: two bounded responses and one scoped response
pattern. For K = 10, 100, 1000 it prints the product's size, the time to build it and
to check it with Storm (sound), and the per-step decision latency of a session that
advances the 3 monitors and looks up the product state (p50/p99).

Run: python bench/monitor_product.py [--ks 10,100,1000] [--runs 4000] [--max-states 5000000] [--json FILE]
"""
from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import time
from pathlib import Path

from forewarn.guard import Guard, parse_spec
from forewarn.guard.learning import TransitionCounts, learn_dtmc, spec_transition_rule
from forewarn.guard.model import CheckedProperty, GuardModel
from forewarn.guard.monitoring import build_monitors, build_product
from forewarn.guard.pac import pac_report
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.storm import Method, build_sparse_dtmc, check_sparse_model, labels_of
from forewarn.monitors import ProductTooLargeError

SPEC = """\
name: bench
predicates: {{p0: state.p0, p1: state.p1, p2: state.p2, p3: state.p3, p4: state.p4, p5: state.p5}}
unsafe: 'p0 && p1 && p2 && p3 && p4 && p5'
valid_transitions: {{max_changed_predicates: 1}}
monitors:
  - {{name: m1, kind: bounded_response, trigger: 'p0 && !p1', response: p1, within: {k}}}
  - {{name: m2, kind: bounded_response, trigger: p2, response: 'p3 || p4', within: {k}}}
  - {{name: m3, kind: response, s: p4, p: '!p5', within: {k}, scope: between, q: p0, r: '!p0'}}
"""


def synthetic_counts(predicates: PredicateSet, runs: int, seed: int) -> TransitionCounts:
    rng = random.Random(seed)
    counts = TransitionCounts()
    for _ in range(runs):
        bits = rng.randrange(64) & 0b001111  # start away from the unsafe corner
        trace = [bits]
        while rng.random() > 0.02 and len(trace) < 400:
            bits ^= 1 << rng.randrange(6)
            trace.append(bits)
        counts.add(trace, predicates)
    return counts


def state_of(bits: int) -> dict[str, bool]:
    return {f"p{i}": bool(bits >> i & 1) for i in range(6)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ks", default="10,100,1000")
    parser.add_argument("--runs", type=int, default=4000)
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--max-states", type=int, default=5_000_000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    print(f"{'K':>6} {'chain':>6} {'product':>10} {'transitions':>12} {'build s':>8} {'sound s':>8} {'topo s':>7} "
          f"{'p50 µs':>7} {'p99 µs':>7} {'max RSS MB':>10}")
    for k in [int(x) for x in args.ks.split(",")]:
        spec = parse_spec(SPEC.format(k=k))
        predicates = PredicateSet(spec)
        counts = synthetic_counts(predicates, args.runs, seed=k)
        chain = learn_dtmc(counts, predicates, alpha=spec.learning.alpha,
                           rule=spec_transition_rule(1, 0, None, predicates.width))
        monitors = build_monitors(spec)
        started = time.perf_counter()
        try:
            product = build_product(chain, monitors, max_states=args.max_states)
        except ProductTooLargeError:
            seconds = time.perf_counter() - started
            print(f"{k:>6} {chain.size:>6} {'>' + format(args.max_states, ','):>10} {'':>12} {seconds:>8.2f} "
                  f"  refused: more than --max-states reachable product states", flush=True)
            results.append({"K": k, "chain_states": chain.size, "product_states": f">{args.max_states}",
                            "build_seconds_until_refused": seconds})
            continue
        build_seconds = time.perf_counter() - started
        storm_model = build_sparse_dtmc(product.matrix, labels_of(product))
        started = time.perf_counter()
        check_sparse_model(storm_model, 'P=? [F "unsafe"]', method=Method.TOPOLOGICAL)
        topological_seconds = time.perf_counter() - started
        started = time.perf_counter()
        outcome = check_sparse_model(storm_model, 'P=? [F "unsafe"]', method=Method.SOUND)
        check_seconds = time.perf_counter() - started
        definition = spec.guard.effective_properties()[0]
        model = GuardModel(spec, product, [CheckedProperty(definition, outcome)],
                           pac_report(chain, epsilon=0.05, delta=0.05), {"runs": args.runs})
        guard = Guard(model)
        rng = random.Random(1)
        bits = 0
        states = []
        for _ in range(args.samples):
            bits ^= 1 << rng.randrange(6)
            bits &= 0b011111  # stay out of the absorbing unsafe corner
            states.append(state_of(bits))
        session = guard.session()
        for state in states[:2000]:  # warm the caches
            session.observe(state)
        session = guard.session()
        gc.disable()
        latencies = []
        for state in states:
            t0 = time.perf_counter_ns()
            session.observe(state)
            latencies.append(time.perf_counter_ns() - t0)
        gc.enable()
        latencies.sort()
        p50, p99 = latencies[len(latencies) // 2] / 1e3, latencies[int(len(latencies) * 0.99)] / 1e3
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        row = {"K": k, "chain_states": chain.size, "product_states": product.size,
               "transitions": int(product.matrix.nnz), "build_seconds": build_seconds,
               "check_seconds": check_seconds,
               "topological_seconds": topological_seconds, "decision_p50_us": p50, "decision_p99_us": p99, "max_rss_mb": rss}
        results.append(row)
        print(f"{k:>6} {chain.size:>6} {product.size:>10,} {product.matrix.nnz:>12,} {build_seconds:>8.2f} "
              f"{check_seconds:>8.2f} {topological_seconds:>7.2f} {p50:>7.1f} {p99:>7.1f} {rss:>10.0f}", flush=True)
    print("target: decision p99 <= 150 µs in-process with 3 monitors")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
