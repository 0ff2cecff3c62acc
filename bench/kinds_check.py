"""learning.kinds: coverage on the two-types construction, and the decision latency with kinds on.

What it does
------------
1. *Coverage* (``bench/_coverage.py``'s ``two_types`` fixture: two hidden kinds sharing abstract
   states, one intending the hazard): many simulated learnings through the pipeline with
   ``learning.kinds`` (2, and ``auto``), each learned state's stored interval against the true
   first-visit risk; beside it the single chain as ``forewarn learn`` writes it by default (interval
   chain ∩ first-visit interval, Markov test fallback). Needed: every state covered in ≥ 1 − δ of
   learnings. Also the *session* coverage of the kinds' model: after each prefix of a fresh run of the
   fixture, the session's interval against the true risk given that prefix (the kinds' posterior under
   the true chains, in Fractions).
   Beside it (issue 40) each kind's start interval against the *labelled-runs oracle*: a
   Clopper–Pearson interval on the runs of each true kind, as if their labels were known.
2. *Decision latency*: ``bench/decision_latency.py``'s household model and state stream, ``Session.observe``
   timed one call at a time, for the model learned with ``kinds: 1`` (today's chain, decisions cached)
   and ``kinds: 2`` (the posterior updated per step, the decision mixed per step, not cached).

Run: ``python bench/kinds_check.py [--quick] [--learnings N] [--json FILE]``
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from decision_latency import stream_runs, time_observe

import _common as C
from _common import write_json
from _coverage import MIXTURES, Coverage, coverage, kinds_coverage, simulate
from _toy import AB, TOY_SPEC, reach_probabilities, toy_state
from forewarn.guard import Guard, learn_model, parse_spec
from forewarn.guard.learning import END


def session_coverage(learnings: int, runs: int, seed: int, name: str = "two_types") -> dict[str, float]:
    """Per learning, one fresh run of the fixture observed step by step: is the true risk given the prefix
    inside the session's interval at every step? (The truth weighs the true kinds by their posterior.)"""
    from forewarn.guard.pipeline import model_from_counts, prepare

    kinds = MIXTURES[name]
    spec = parse_spec(TOY_SPEC.replace("  delta: 0.05\n", "  delta: 0.05\n  kinds: 2\n"))
    predicates, monitors = prepare(spec)
    rng = np.random.default_rng(seed)
    risk = []
    for _, chain in kinds:
        rows = {s: dict(r) for s, r in chain.items()}
        rows[AB], rows[END] = {AB: Fraction(1)}, {END: Fraction(1)}
        risk.append(reach_probabilities(rows, {AB}))
    covered = steps = missed_steps = 0
    errors: list[float] = []
    widths: list[float] = []
    oracle: list[float] = []
    for _ in range(learnings):
        paths: Counter[tuple[int, ...]] = Counter()
        counts = simulate(kinds, runs, rng, predicates, paths=paths)
        # the oracle: per true kind, Clopper–Pearson at δ/2K on the runs of that kind that visited each state and
        # then reached the hazard, weighed by the true posterior (labelled runs of a mixture: by the fixture's weights)
        labelled = _labelled_state_widths(kinds, runs, rng, predicates)
        guard = Guard(model_from_counts(counts, spec, predicates, monitors, paths=paths))
        probe: Counter[tuple[int, ...]] = Counter()
        simulate(kinds, 1, rng, predicates, paths=probe)
        (path,) = probe
        session = guard.session()
        posterior = [w for w, _ in kinds]
        ok = True
        for t, bits in enumerate(path):
            if t:
                posterior = [p * chain[path[t - 1]].get(bits, Fraction(0)) for p, (_, chain) in zip(posterior, kinds)]
                total = sum(posterior)
                posterior = [p / total for p in posterior]
            truth = float(sum(p * r.get(bits, Fraction(0)) for p, r in zip(posterior, risk)))
            decision = session.observe(toy_state(bits))
            if decision.unsafe_now:
                break
            steps += 1
            assert decision.p_unsafe is not None and decision.ci_low is not None and decision.ci_high is not None
            errors.append(abs(decision.p_unsafe - truth))
            widths.append(decision.ci_high - decision.ci_low)
            oracle.append(float(sum(p * labelled[k].get(bits, 1.0) for k, p in enumerate(posterior))))
            # within Storm's precision (1e-6): robust value iteration leaves ~1e-9 where the exact minimum is 0
            inside = decision.ci_low - 1e-6 <= truth <= decision.ci_high + 1e-6
            missed_steps += not inside
            ok &= inside
        covered += ok
    return {"learnings": learnings, "runs_covered": covered / learnings, "steps": steps,
            "step_misses": missed_steps, "mean_error": float(np.mean(errors)), "mean_width": float(np.mean(widths)),
            "oracle_width": float(np.mean(oracle))}


def _labelled_state_widths(kinds: list[tuple[Fraction, Any]], runs: int, rng: np.random.Generator,
                           predicates: Any, delta: float = 0.05) -> list[dict[int, float]]:
    """Per true kind, per abstract state: the width of the Clopper–Pearson interval (δ/2K) on a fresh sample's runs of
    that kind that visited the state, by whether they then reached the hazard (the labelled-runs oracle)."""
    from forewarn.guard.intervals import clopper_pearson

    out = []
    for n, (_, chain) in zip(rng.multinomial(runs, [float(w) for w, _ in kinds]), kinds):
        own: Counter[tuple[int, ...]] = Counter()
        simulate([(Fraction(1), chain)], int(n), rng, predicates, paths=own)
        visited: Counter[int] = Counter()
        reached: Counter[int] = Counter()
        for path, copies in own.items():
            for bits in set(path) - {AB}:
                visited[bits] += copies
                reached[bits] += copies * (path[-1] == AB)
        states = sorted(visited)
        low, high = clopper_pearson(np.array([reached[b] for b in states]), np.array([visited[b] for b in states]),
                                    delta / (2 * len(kinds)))
        out.append({b: float(h - lo) for b, lo, h in zip(states, low, high)})
    return out


def labelled_oracle(learnings: int, runs: int, seed: int, delta: float = 0.05, name: str = "two_types"
                    ) -> dict[str, float]:
    """Per learning of ``kinds: 2`` on fixture ``name``: each kind's stored interval at the start state (learned kinds
    matched to the true ones by their start value) beside the labelled-runs oracle, a Clopper–Pearson interval
    on the runs of each true kind (their own labels) at the same δ/2K; and the pooled start interval."""
    from forewarn.guard.intervals import clopper_pearson
    from forewarn.guard.learning import TransitionCounts
    from forewarn.guard.pipeline import model_from_counts, prepare

    kinds = MIXTURES[name]
    spec = parse_spec(TOY_SPEC.replace("  delta: 0.05\n", f"  delta: {delta}\n  kinds: 2\n"))
    predicates, monitors = prepare(spec)
    rng = np.random.default_rng(seed)
    truth = []
    for _, chain in kinds:
        rows = {s: dict(r) for s, r in chain.items()}
        rows[AB], rows[END] = {AB: Fraction(1)}, {END: Fraction(1)}
        truth.append(float(reach_probabilities(rows, {AB})[0]))
    widths, oracle, covered, pooled, kept, supported = [], [], 0, [], 0, 0
    for _ in range(learnings):
        paths: Counter[tuple[int, ...]] = Counter()
        labelled = []
        for n, (_, chain) in zip(rng.multinomial(runs, [float(w) for w, _ in kinds]), kinds):
            own: Counter[tuple[int, ...]] = Counter()
            simulate([(Fraction(1), chain)], int(n), rng, predicates, paths=own)
            paths.update(own)
            reached = sum(c for path, c in own.items() if path[-1] == AB)
            low, high = clopper_pearson(np.array([reached]), np.array([max(int(n), 1)]), delta / 4)
            labelled.append(float(high[0] - low[0]))
        counts = TransitionCounts()
        for path, copies in paths.items():
            for _ in range(copies):
                counts.add(list(path), predicates)
        model = model_from_counts(counts, spec, predicates, monitors, paths=paths)
        start = model.dtmc.index()[0]
        (prop,) = model.properties
        assert prop.ci_low is not None and prop.ci_high is not None
        pooled.append(float(prop.ci_high[start] - prop.ci_low[start]))
        if model.kinds is None:
            continue
        kept += 1
        supported += "supported" not in model.provenance["levers"]["kinds"]
        columns = [model.kinds.columns[k][0] for k in range(model.kinds.kinds)]
        order = np.argsort([-c.values[start] for c in columns])  # the riskier learned kind ↔ the first true one
        ok = True
        for true_k, k in enumerate(order.tolist()):
            c = columns[k]
            assert c.ci_low is not None and c.ci_high is not None
            widths.append(float(c.ci_high[start] - c.ci_low[start]))
            ok &= bool(c.ci_low[start] - 1e-6 <= truth[true_k] <= c.ci_high[start] + 1e-6)
        oracle += labelled
        covered += ok
    return {"learnings": learnings, "runs": runs, "kept_two": kept, "per_kind_width": float(np.mean(widths)),
            "labelled_width": float(np.mean(oracle)), "per_kind_covered": covered / max(kept, 1),
            "pooled_start_width": float(np.mean(pooled)), "supported": supported}


# Session 2's figures (bench/kinds_check.py --quick, 10 learnings; docs/intervals.md), before issue 40 item 2
BEFORE_WIDTH = {("two_types", 200): 0.388, ("two_types", 1000): 0.127, ("two_kinds_mild", 200): 0.743,
                ("two_kinds_mild", 1000): 0.532}
BEFORE_AUTO = {("two_types", 1000): "10/10", ("two_kinds_mild", 200): "0/10", ("two_kinds_mild", 1000): "0/10",
               ("balanced", 1000): "0/10", ("second_order", 1000): "0/10"}


def latency(samples: int, warmup: int, seed: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="forewarn-bench-") as tmp:
        traces = Path(tmp) / "train.jsonl"
        C.write_jsonl(traces, C.household_runs(10000, seed=seed))
        stream = stream_runs(warmup + samples + 500, seed=seed + 1000)
        for kinds in (1, 2):
            spec = parse_spec(C.SPEC_YAML.replace("guard:", f"learning:\n  kinds: {kinds}\nguard:"))
            started = time.perf_counter()
            model = learn_model([traces], spec)
            learned = time.perf_counter() - started
            samples_ns, _ = time_observe(Guard(model), stream, warmup, samples)
            out[f"kinds: {kinds}"] = {**C.summarize_ns(samples_ns), "learn_seconds": learned,
                                      "kinds_kept": 1 if model.kinds is None else model.kinds.kinds}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--learnings", type=int, help="simulated learnings per row (default 200; quick 40)")
    parser.add_argument("--runs", type=int, default=200, help="runs per learning")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    learnings = args.learnings or (40 if args.quick else 200)
    results: dict[str, Any] = {}
    rows = []
    plans: list[tuple[str, Callable[[], Coverage]]] = [
        ("chain (default learn)", lambda: coverage("two_types", learnings=learnings, runs=args.runs, seed=23)),
        ("kinds: 2", lambda: kinds_coverage("two_types", learnings=learnings, runs=args.runs, kinds=2, seed=23)),
        ("kinds: auto", lambda: kinds_coverage("two_types", learnings=max(learnings // 4, 10), runs=args.runs,
                                               kinds="auto", seed=23))]
    for label, run in plans:
        started = time.perf_counter()
        result = run()
        seconds = time.perf_counter() - started
        rows.append([label, result.learnings, f"{result.rate:.3f}", f"{result.start_rate:.3f}",
                     f"{np.mean(result.point_errors):.4f}", f"{np.mean(result.widths):.3f}", f"{seconds:.0f}"])
        results[label] = {"learnings": result.learnings, "all_states": result.rate, "start": result.start_rate,
                          "point_error": float(np.mean(result.point_errors)), "width": float(np.mean(result.widths)),
                          "seconds": seconds}
        print(f"  {label}: {seconds:.0f} s", file=sys.stderr, flush=True)
    print(C.table(["model", "learnings", "every state covered", "start covered", "point error", "mean width",
                   "seconds"], rows, title=f"two_types, {args.runs} runs per learning, δ = 0.05 (needed ≥ 0.95)"))
    oracle_rows = []
    for name, runs in (("two_types", 200), ("two_types", 1000), ("two_kinds_lingering", 200),
                       ("two_kinds_lingering", 1000), ("two_kinds_mild", 200), ("two_kinds_mild", 1000)):
        o = labelled_oracle(learnings, runs, seed=31, name=name)
        results[f"oracle_{name}_{runs}"] = o
        before = BEFORE_WIDTH.get((name, runs))
        oracle_rows.append([name, runs, o["learnings"], f"{o['per_kind_width']:.3f}",
                            "–" if before is None else f"{before:.3f}", f"{o['labelled_width']:.3f}",
                            f"{o['per_kind_width'] / o['labelled_width']:.2f}x",
                            C.verdict(o["per_kind_width"] <= 2 * o["labelled_width"]), f"{o['per_kind_covered']:.3f}",
                            C.verdict(o["per_kind_covered"] >= 0.95), f"{o['supported']}/{o['learnings']}",
                            f"{o['pooled_start_width']:.3f}"])
    print()
    print(C.table(["fixture", "runs", "learnings", "per-kind start width", "before (session 2)",
                   "labelled-runs CP width", "ratio", "≤ 2x", "per-kind covered", "≥ 0.95", "BIC supports 2",
                   "pooled start width"], oracle_rows,
                  title="kinds: 2: each kind's start interval beside runs labelled with their true kind (δ/2K each)"))
    auto_rows = []
    for name, runs in (("two_types", 1000), ("two_kinds_lingering", 200), ("two_kinds_lingering", 1000),
                       ("two_kinds_mild", 200), ("two_kinds_mild", 1000), ("balanced", 1000), ("second_order", 1000)):
        a = kinds_coverage(name, learnings=max(learnings // 2, 10), runs=runs, kinds="auto", seed=3)
        results[f"auto_{name}_{runs}"] = {"kept_two": a.flagged, "learnings": a.learnings, "covered": a.rate}
        kept_before = BEFORE_AUTO.get((name, runs), "–")
        auto_rows.append([name, runs, f"{a.flagged}/{a.learnings}", kept_before, f"{a.rate:.3f}"])
    print()
    print(C.table(["fixture", "runs", "kept more than one kind", "before (session 2)", "every state covered"],
                  auto_rows,
                  title="kinds: auto by BIC (two_types, two_kinds_lingering, two_kinds_mild: start risks differ by "
                        "≥ 0.3; balanced one kind; second_order two kinds whose risks differ by 0.2)"))
    for name, runs in (("two_types", 200), ("two_types", 1000), ("two_kinds_lingering", 1000)):
        session = session_coverage(max(learnings // 2, 10), runs, seed=5, name=name)
        results[f"session_{name}_{runs}"] = session
        print(f"\nsession ({name}, {runs} runs, kinds: 2, posterior per prefix): every step covered in "
              f"{session['runs_covered']:.3f} of {session['learnings']} runs; step misses "
              f"{session['step_misses']}/{session['steps']}; mean error {session['mean_error']:.4f}; mean interval "
              f"width {session['mean_width']:.3f} (before, two_types at 200 runs: 0.540); the labelled-runs "
              f"intervals weighed by the true posterior {session['oracle_width']:.3f}")
    timing = latency(4000 if args.quick else 20000, 2000, seed=7)
    results["latency"] = timing
    print()
    print(C.table(["model", "p50 µs", "p99 µs", "mean µs", "kinds kept", "learn s"],
                  [[k, f"{v['p50_us']:.1f}", f"{v['p99_us']:.1f}", f"{v['mean_us']:.1f}", v["kinds_kept"],
                    f"{v['learn_seconds']:.1f}"] for k, v in timing.items()],
                  title="Session.observe, household stream"))
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
