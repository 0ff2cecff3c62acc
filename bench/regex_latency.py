"""Decision latency of a spec holding discovery's instruction shape: CEL's built-in ``matches`` against RE2.

The injection domain's hand-written spec plus the ``instruction_shaped`` predicate discovery proposes
(``guard/discovery/shapes.py``) on the tool's output, the text an agent reads: learned from generated runs,
then ``Session.observe`` (with the step's action) timed one call each on runs of another seed, after
untimed ones. A tool's output is new at nearly every step, so the predicate memo does not help and
each decision evaluates the pattern.

Rows, in one process on the same steps:

* *hand-written spec*: without the shape (the baseline a text predicate adds to);
* *shape, built-in (before)*: each ``matches`` answered by the CEL package's own function, which compiles
  the pattern at every call (what ran before ``guard/_cel_regex.py``; here bound in place of the RE2 search,
  one Python call more per evaluation);
* *shape, RE2 (after)*: the pattern compiled once, searched with RE2;
* *shape, RE2, accented*: the same, on the same steps with every ``e`` of the tool's output written ``é``.
  RE2's ``\\b`` is ASCII and CEL's Unicode, so a text with a non-ASCII letter that the pattern without its
  ``\\b`` matches is answered by CEL's function (the attacked texts, mostly): what that costs.

Target: p99 <= 100 us a decision. Timings include the timer's cost. Nothing is asserted.

Run: ``python bench/regex_latency.py [--quick] [--samples N] [--json FILE]``
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import cel
from decision_latency import time_observe

import _common as C
from forewarn.domains.injection import SPEC_PATH, generate_runs
from forewarn.guard import Guard, learn_model, parse_spec
from forewarn.guard import predicates as predicates_module
from forewarn.guard._cel_regex import search
from forewarn.guard.discovery.shapes import SHAPES

TARGET_P99_US = 100.0
_BUILTIN = cel.compile("t.matches(p)")


def builtin_search(text: Any, pattern: Any) -> bool:
    """The CEL package's own ``matches``: it compiles the pattern at each call."""
    return bool(_BUILTIN.execute({"t": text, "p": pattern}))


def shaped_spec_text() -> str:
    name, says, pattern = SHAPES[0]
    literal = pattern.replace("\\", "\\\\").replace('"', '\\"')
    predicate = (f"  {name}:\n    cel: 'state.tool_output.matches(\"{literal}\")'\n"
                 f"    description: {says!r}\n")
    text = Path(SPEC_PATH).read_text()
    return text.replace("predicates:\n", "predicates:\n" + predicate, 1)


def steps_of(n_runs: int, seed: int) -> list[list[tuple[dict[str, Any], Any]]]:
    return [[(step["state"], step.get("action")) for step in run["steps"]] for run in generate_runs(n_runs, seed)]


def observed_ns(guard: Guard, runs: list[list[tuple[dict[str, Any], Any]]], warmup: int, samples: int) -> list[int]:
    """Nanoseconds per ``Session.observe`` with the step's action (decision_latency.py's timing loop)."""
    return time_observe(guard, runs, warmup, samples, actions=True)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes")
    parser.add_argument("--samples", type=int, help="timed observe() calls per row (default 10000; quick 2000)")
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    samples = args.samples or (2000 if args.quick else 10000)
    hand = parse_spec(Path(SPEC_PATH).read_text())
    shaped = parse_spec(shaped_spec_text())
    with tempfile.TemporaryDirectory(prefix="forewarn-bench-") as tmp:
        traces = Path(tmp) / "train.jsonl"
        C.write_jsonl(traces, generate_runs(200 if args.quick else 400, args.seed))
        hand_model = learn_model([traces], hand)
        shaped_model = learn_model([traces], shaped)
    need = (args.warmup + samples) // 3 + 50  # runs of about four steps each
    stream = steps_of(need, args.seed + 1000)
    rows: dict[str, dict[str, float]] = {}
    rows["hand-written spec"] = C.summarize_ns(observed_ns(Guard(hand_model), stream, args.warmup, samples))
    before = Guard(shaped_model)
    vars(predicates_module)["search"] = builtin_search  # the bench's "before" only
    try:
        rows["shape, built-in (before)"] = C.summarize_ns(observed_ns(before, stream, args.warmup, samples))
    finally:
        vars(predicates_module)["search"] = search
    rows["shape, RE2 (after)"] = C.summarize_ns(observed_ns(Guard(shaped_model), stream, args.warmup, samples))
    accented = [[({**state, "tool_output": state["tool_output"].replace("e", "é")}, action) for state, action in run]
                for run in stream]
    rows["shape, RE2, accented"] = C.summarize_ns(observed_ns(Guard(shaped_model), accented, args.warmup, samples))
    print(C.table(["spec", "n", "p50 µs", "p99 µs", "max µs"],
                  [[name, r["n"], r["p50_us"], r["p99_us"], r["max_us"]] for name, r in rows.items()],
                  title=f"decision latency, injection domain (target p99 <= {TARGET_P99_US:g} µs)"))
    after = rows["shape, RE2 (after)"]
    print(f"p99 before {rows['shape, built-in (before)']['p99_us']:.1f} µs, after {after['p99_us']:.1f} µs: "
          f"{C.verdict(after['p99_us'] <= TARGET_P99_US)}")
    C.write_json(args.json, {"rows": rows, "machine": C.machine()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
