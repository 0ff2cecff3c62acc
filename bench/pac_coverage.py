"""PAC bounds against the truth: the tighter per-state bound beside the paper's.

Part 1 (simulation). Three known chains over the toy domain (bench/_pac_sim.py: short
and risky, long loops, a rare risky corner). For each, a pilot learning from 200 runs
gives the runs each bound asks for (its ``runs_factor`` × 200). Then, at the runs the
tighter bound asks for, at the runs the paper's asks for, and at a tenth of the former,
the chain is learned ``--learnings`` times from fresh simulated runs, and the script
prints: how often every state's error is within its reported bound ε̂ (coverage, target
≥ 1 − δ), how often every state is within ε, and the 50th/95th percentile and maximum of
the largest error as a share of ε. A bound that asks for more runs than needed shows as
a 95th percentile far below 100 % of ε.

Part 2 (models). For each model file given with ``--models`` (e.g. the ones ``forewarn
demo`` writes to forewarn-demo/models/): runs, chain states, and the runs and visits each
bound asks for.

    python bench/pac_coverage.py [--quick] [--learnings N] [--models FILE ...] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from anywhere
    sys.path.insert(0, str(ROOT))

from _pac_sim import CHAINS, learned_reach, simulate, true_reach  # noqa: E402
from _toy import TOY_SPEC  # noqa: E402
from forewarn.guard.model import GuardModel  # noqa: E402
from forewarn.guard.pac import pac_report  # noqa: E402
from forewarn.guard.predicates import PredicateSet  # noqa: E402
from forewarn.guard.spec import parse_spec  # noqa: E402

EPSILON, DELTA, ALPHA, PILOT = 0.1, 0.05, 0.1, 200


def simulation(learnings: int, seed: int) -> list[dict[str, object]]:
    predicates = PredicateSet(parse_spec(TOY_SPEC))
    rng = np.random.default_rng(seed)
    rows: list[dict[str, object]] = []
    for name, (initial, chain) in CHAINS.items():
        truth = true_reach(chain)
        pilot = pac_report(simulate(chain, initial, PILOT, rng, predicates, ALPHA), epsilon=EPSILON, delta=DELTA)
        assert pilot.tight is not None and pilot.tight.runs_factor is not None and pilot.runs_factor is not None
        tight_runs = math.ceil(PILOT * pilot.tight.runs_factor)
        paper_runs = math.ceil(PILOT * pilot.runs_factor)
        for label, runs in (("tight asks", tight_runs), ("paper asks", paper_runs), ("tight / 10", tight_runs // 10)):
            started = time.perf_counter()
            covered = within = 0
            worst_errors, worst_bounds = [], []
            for _ in range(learnings):
                dtmc = simulate(chain, initial, runs, rng, predicates, ALPHA)
                report = pac_report(dtmc, epsilon=EPSILON, delta=DELTA)
                assert report.tight is not None
                learned = learned_reach(dtmc)
                errors = [abs(learned[dtmc.states[s.state]] - truth[dtmc.states[s.state]]) for s in report.tight.states]
                covered += all(e <= s.bound for e, s in zip(errors, report.tight.states))
                within += max(errors) <= EPSILON
                worst_errors.append(max(errors))
                worst_bounds.append(report.tight.worst_bound)
            share = np.array(worst_errors) / EPSILON
            rows.append({"chain": name, "runs": label, "n_runs": runs, "learnings": learnings,
                         "paper_factor": pilot.runs_factor, "tight_factor": pilot.tight.runs_factor,
                         "coverage": covered / learnings, "within_eps": within / learnings,
                         "p50_err_pct_eps": 100 * float(np.percentile(share, 50)),
                         "p95_err_pct_eps": 100 * float(np.percentile(share, 95)),
                         "max_err_pct_eps": 100 * float(share.max()),
                         "mean_worst_bound": float(np.mean(worst_bounds)),
                         "seconds": round(time.perf_counter() - started, 2)})
    return rows


def models(paths: list[Path]) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    for path in paths:
        model = GuardModel.load(path)
        pac, runs = model.pac, int(model.provenance["runs"])
        tight = pac.tight
        if tight is None or pac.runs_factor is None or tight.runs_factor is None:
            print(f"{path}: skipped (no tight PAC section, or a bound no number of runs meets); re-learn it")
            continue
        visits = {s.state: s.visits for s in pac.states}
        worst = pac.worst
        out.append({
            "model": str(path), "runs": runs, "chain_states": len(pac.states), "epsilon": pac.epsilon,
            "delta": pac.delta, "B": pac.amplification,
            "paper_factor": pac.runs_factor, "tight_factor": tight.runs_factor,
            "paper_runs": math.ceil(pac.runs_factor * runs), "tight_runs": math.ceil(tight.runs_factor * runs),
            "paper_worst_state": None if worst is None else f"{worst.visits} of {worst.required}",
            "tight_worst_bound": tight.worst_bound,
            "tight_limiting": [f"{i}: {visits.get(i, 0)} of {next(s.required for s in tight.states if s.state == i)}"
                               for i in tight.limiting[:3]],
        })
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 learnings per point")
    parser.add_argument("--learnings", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--models", type=Path, nargs="*", default=[])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    learnings = 200 if args.quick else args.learnings
    print(f"PAC coverage: ε = {EPSILON}, δ = {DELTA}, α = {ALPHA}; {learnings} learnings per point; target: "
          f"coverage ≥ {1 - DELTA:.0%} (MET / NOT MET)")
    sim = simulation(learnings, args.seed)
    header = (f"{'chain':7} {'runs':>11} {'n':>7} {'paper×':>7} {'tight×':>7} {'ε̂ holds':>8} {'≤ ε':>6} "
              f"{'p50 %ε':>7} {'p95 %ε':>7} {'max %ε':>7} {'mean ε̂':>7}  target")
    print(header)
    for r in sim:
        met = "MET" if r["coverage"] >= 1 - DELTA else "NOT MET"  # type: ignore[operator]
        print(f"{r['chain']:7} {r['runs']:>11} {r['n_runs']:>7} {r['paper_factor']:>7.1f} {r['tight_factor']:>7.1f} "
              f"{r['coverage']:>8.1%} {r['within_eps']:>6.1%} {r['p50_err_pct_eps']:>7.1f} "
              f"{r['p95_err_pct_eps']:>7.1f} {r['max_err_pct_eps']:>7.1f} {r['mean_worst_bound']:>7.3f}  {met}")
    table = models(args.models)
    if table:
        print("\nModels: runs each bound asks for (paper = baseline)")
        for m in table:
            print(f"{m['model']}: {m['runs']} runs, {m['chain_states']} chain states, B = {m['B']:.3g}; "
                  f"paper ×{m['paper_factor']:.3g} ({m['paper_runs']:,} runs; worst state {m['paper_worst_state']}); "
                  f"tight ×{m['tight_factor']:.3g} ({m['tight_runs']:,} runs; now ±{m['tight_worst_bound']:.3g}; "
                  f"limiting {', '.join(m['tight_limiting'])})")  # type: ignore[arg-type]
    if args.json:
        args.json.write_text(json.dumps({"simulation": sim, "models": table}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
