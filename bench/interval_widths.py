"""How wide the confidence intervals are on the shipped domains: the interval chain alone against
its intersection with the runs' direct first-visit outcome interval (guard/outcomes.py).

For each domain (embodied household tasks, driving at a signalled junction, the tool-using
agent, and the household benchmark model of ``decision_latency.py``) the script generates
runs with the domain's simulator, learns a model exactly as ``forewarn learn`` does (which
now intersects), and recomputes, on the same learned chain and the same point values, the
interval chain's bound alone at the full δ (the construction before). Widths are over the
transient states (not absorbing) of the first property; every state counts once.

    python bench/interval_widths.py [--quick] [--domains embodied,driving,tools,household] [--json FILE]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import _common as C
from forewarn.guard.model import CheckedProperty, GuardModel
from forewarn.guard.pipeline import learn_model_from_runs, with_intervals
from forewarn.guard.storm import labels_of
from forewarn.guard.traces import Run, read_runs


def widths(model: GuardModel) -> dict[str, Any]:
    """The learned model's intervals (after) and the chain's alone at the same δ (before)."""
    assert model.intervals is not None
    prop = model.properties[0]
    bare = CheckedProperty(prop.definition, prop.outcome)
    (chain,), _ = with_intervals(model.dtmc, labels_of(model.dtmc), [bare], method=model.intervals.method,
                                 delta=model.intervals.delta, entries=model.intervals.entries)
    live = ~model.dtmc.absorbing
    assert chain.ci_low is not None and chain.ci_high is not None and prop.ci_low is not None \
        and prop.ci_high is not None  # intervals were asked for
    before = chain.ci_high[live] - chain.ci_low[live]
    after = prop.ci_high[live] - prop.ci_low[live]
    starts = sorted(model.dtmc.initial, key=lambda s: -model.dtmc.initial[s])
    s = starts[0]
    return {"states": int(live.sum()), "construction": model.intervals.construction,
            "before": before, "after": after,
            "start": {"runs": int(model.dtmc.initial[s]), "visits": int(model.visits[s]),
                      "value": float(prop.outcome.values[s]),
                      "before": (float(chain.ci_low[s]), float(chain.ci_high[s])),
                      "after": (float(prop.ci_low[s]), float(prop.ci_high[s]))}}


def parts(domain: str, quick: bool, work: Path) -> list[tuple[str, Any, list[Run]]]:
    import estimation_levers as E

    if domain == "household":
        from forewarn.guard.spec import parse_spec

        traces = work / "household.jsonl"
        C.write_jsonl(traces, C.household_runs(10_000 if quick else 30_000, seed=0))
        return [("household (bench)", parse_spec(C.SPEC_YAML), list(read_runs(traces)))]
    found = E.DOMAINS[domain](quick, work)
    if domain == "embodied":
        return [(f"embodied/{spec.name}", spec, runs) for spec, runs, _ in found]
    return [(domain, spec, runs) for spec, runs, _ in found]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer runs and 10 embodied tasks")
    parser.add_argument("--domains", default="embodied,driving,tools,household")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    summary: list[list[Any]] = []
    starts: list[list[Any]] = []
    payload: dict[str, Any] = {"benchmark": "interval_widths", "machine": C.machine(), "domains": {}}
    with tempfile.TemporaryDirectory(prefix="forewarn-bench-") as tmp:
        for domain in args.domains.split(","):
            before, after, started = [], [], time.perf_counter()
            for label, spec, runs in parts(domain, args.quick, Path(tmp)):
                model = learn_model_from_runs(runs, spec)
                w = widths(model)
                before.append(w["before"])
                after.append(w["after"])
                st = w["start"]
                starts.append([label, len(runs), st["visits"], f"{st['value']:.3f}",
                               f"[{st['before'][0]:.3f}, {st['before'][1]:.3f}]",
                               f"[{st['after'][0]:.3f}, {st['after'][1]:.3f}]"])
            b, a = np.concatenate(before), np.concatenate(after)
            row = {"models": len(before), "states": len(b), "before_mean": float(b.mean()),
                   "before_median": float(np.median(b)), "after_mean": float(a.mean()),
                   "after_median": float(np.median(a)), "after_below_0.5": float(np.mean(a < 0.5)),
                   "before_below_0.5": float(np.mean(b < 0.5)), "seconds": time.perf_counter() - started}
            payload["domains"][domain] = row
            summary.append([domain, row["models"], row["states"], f"{row['before_mean']:.3f}",
                            f"{row['before_median']:.3f}", f"{row['after_mean']:.3f}", f"{row['after_median']:.3f}",
                            f"{row['before_below_0.5']:.2f} → {row['after_below_0.5']:.2f}"])
    print(C.table(["domain", "models", "states", "mean width before", "median before", "mean width after",
                   "median after", "share < 0.5 wide"], summary,
                  title="Interval width, chain alone (before) vs intersected with outcomes (after), δ = 0.05"))
    print()
    print(C.table(["model", "runs", "start visits", "p_unsafe", "interval before", "interval after"], starts,
                  title="The start state's interval (the most frequent start)"))
    payload["starts"] = starts
    C.write_json(args.json, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
