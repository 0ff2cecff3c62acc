"""Shared pieces of the benchmarks: a household world, its spec, timing and output helpers.

Not a public module: the scripts in ``bench/`` import it as ``_common`` (their own
folder is first on ``sys.path`` when run as ``python bench/<name>.py``).

The household world is a small simulation in the spirit of AI2-THOR's metadata: twelve
objects with six properties each (``parentReceptacles``, ``isPickedUp``, ``isToggled``,
``isOpen``, ``isBroken``, ``temperature``) and an agent block (position, rotation,
what it holds, its last action). The ten predicates of :data:`SPEC_YAML` read object
properties, test list membership and compare numbers, like a real embodied spec.
"""
from __future__ import annotations

import gc
import json
import os
import platform
import random
import resource
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from anywhere: the package is installed editable anyway
    sys.path.insert(0, str(ROOT))

OBJECTS = ("Fork", "Knife", "Mug", "Pan", "Egg", "Apple",
           "Microwave", "Fridge", "StoveBurner", "Faucet", "Sink", "CounterTop")

SPEC_YAML = """\
name: household-bench
description: ten CEL predicates over a nested embodied state (benchmark spec)
predicates:
  fork_in_microwave: '"Microwave" in state.objects.Fork.parentReceptacles'
  microwave_on: 'state.objects.Microwave.isToggled'
  mug_in_sink: '"Sink" in state.objects.Mug.parentReceptacles'
  faucet_on: 'state.objects.Faucet.isToggled'
  holding_knife: 'state.agent.holding == "Knife"'
  stove_on: 'state.objects.StoveBurner.isToggled'
  pan_hot: 'state.objects.Pan.temperature > 60.0'
  pan_on_stove: '"StoveBurner" in state.objects.Pan.parentReceptacles'
  fridge_open: 'state.objects.Fridge.isOpen'
  egg_broken: 'state.objects.Egg.isBroken'
unsafe: '(fork_in_microwave && microwave_on) || (stove_on && pan_hot && !pan_on_stove)'
valid_transitions:
  max_changed_predicates: 2
guard:
  thresholds: {reflect: 0.9, ask_human: 0.5, stop: 0.2}
  unseen_state: ask_human
"""

ROOM_TEMPERATURE = 21.0
HOT = 95.0
WARM = 48.0


class Household:
    """One episode of a simulated household agent (a random but plausible policy).

    ``facts`` hold what the predicates read (small discrete domains, so abstract
    configurations repeat); ``state()`` renders the full nested concrete state, whose
    other fields (agent position, rotation, step counter, ...) change at every step.
    """

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.step = 0
        self.loc = {"Fork": "CounterTop", "Knife": "CounterTop", "Mug": rng.choice(["CounterTop", "Sink"]),
                    "Pan": rng.choice(["CounterTop", "StoveBurner"]), "Egg": "Fridge", "Apple": "CounterTop"}
        self.on = {"Microwave": False, "StoveBurner": False, "Faucet": rng.random() < 0.1}
        self.open = {"Microwave": False, "Fridge": False}
        self.broken = {"Egg": False, "Mug": False}
        self.pan_temperature = ROOM_TEMPERATURE
        self.holding = ""
        self.last_action = "Initialize"
        self.x, self.z, self.rotation = rng.uniform(-2, 2), rng.uniform(-2, 2), 0.0

    def advance(self) -> None:
        """One agent step: move around (most steps) or act on one object."""
        rng = self.rng
        self.step += 1
        self.x += rng.uniform(-0.25, 0.25)
        self.z += rng.uniform(-0.25, 0.25)
        self.rotation = (self.rotation + rng.choice((0.0, 90.0, 270.0))) % 360.0
        roll = rng.random()
        if roll < 0.45:
            self.last_action = "MoveAhead"
        elif roll < 0.62:
            if self.holding:
                target = rng.choice(["CounterTop", "Sink", "Microwave", "StoveBurner", "Fridge"])
                if self.holding == "Egg" and rng.random() < 0.2:
                    self.broken["Egg"] = True
                self.loc[self.holding] = target
                self.last_action = f"PutObject {self.holding} {target}"
                self.holding = ""
            else:
                item = rng.choice(["Fork", "Knife", "Mug", "Pan", "Egg", "Apple"])
                self.loc[item] = "agent"
                self.holding = item
                self.last_action = f"PickupObject {item}"
        elif roll < 0.80:
            device = rng.choice(["Microwave", "StoveBurner", "Faucet"])
            self.on[device] = not self.on[device]
            self.last_action = f"Toggle {device}"
        elif roll < 0.95:
            door = rng.choice(["Microwave", "Fridge"])
            self.open[door] = not self.open[door]
            self.last_action = f"Open/Close {door}"
        else:
            self.last_action = "LookDown"
        on_stove = self.loc["Pan"] == "StoveBurner"
        if on_stove and self.on["StoveBurner"]:
            self.pan_temperature = HOT if self.pan_temperature >= WARM else WARM
        elif self.pan_temperature > ROOM_TEMPERATURE and rng.random() < 0.3:
            self.pan_temperature = WARM if self.pan_temperature == HOT else ROOM_TEMPERATURE

    def state(self) -> dict[str, Any]:
        objects: dict[str, dict[str, Any]] = {}
        for name in OBJECTS:
            where = self.loc.get(name)
            objects[name] = {
                "parentReceptacles": [] if where in (None, "agent") else [where, "Floor"] if where == "CounterTop"
                else [where],
                "isPickedUp": where == "agent",
                "isToggled": self.on.get(name, False),
                "isOpen": self.open.get(name, False),
                "isBroken": self.broken.get(name, False),
                "temperature": self.pan_temperature if name == "Pan" else ROOM_TEMPERATURE,
            }
        return {
            "agent": {"position": {"x": round(self.x, 3), "y": 0.9, "z": round(self.z, 3)},
                      "rotation": self.rotation, "holding": self.holding,
                      "lastAction": self.last_action, "lastActionSuccess": True, "step": self.step},
            "objects": objects,
        }

    def unsafe(self) -> bool:
        fork_micro = self.loc["Fork"] == "Microwave" and self.on["Microwave"]
        stove = self.on["StoveBurner"] and self.pan_temperature > 60.0 and self.loc["Pan"] != "StoveBurner"
        return fork_micro or stove


def household_runs(n_steps: int, *, seed: int = 0, end_rate: float = 0.01,
                   max_len: int = 400) -> Iterator[dict[str, Any]]:
    """Runs in the contract's format until ``n_steps`` steps in all (~100 steps a run).

    A run ends with probability ``end_rate`` per step, at its first unsafe state, or at
    ``max_len`` steps.
    """
    rng = random.Random(seed)
    produced = 0
    run_no = 0
    while produced < n_steps:
        world = Household(rng)
        steps = [{"state": world.state(), "action": world.last_action, "t": 0.0}]
        while len(steps) < max_len and produced + len(steps) < n_steps:
            if rng.random() < end_rate:
                break
            world.advance()
            steps.append({"state": world.state(), "action": world.last_action, "t": round(world.step * 1.7, 3)})
            if world.unsafe():
                break
        produced += len(steps)
        yield {"id": f"run-{seed}-{run_no}", "steps": steps, "meta": {"generator": "bench household", "seed": seed}}
        run_no += 1


def write_jsonl(path: str | Path, runs: Iterator[dict[str, Any]]) -> tuple[int, int]:
    """Write runs one a line; returns (runs, steps)."""
    n_runs = n_steps = 0
    with open(path, "wb") as handle:
        for run in runs:
            handle.write(orjson.dumps(run))
            handle.write(b"\n")
            n_runs += 1
            n_steps += len(run["steps"])
    return n_runs, n_steps


# -- measurement helpers ---------------------------------------------------------------

def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (q in [0, 100])."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), int(-(-q * len(sorted_values) // 100))))
    return float(sorted_values[rank - 1])


def summarize_ns(samples_ns: Sequence[int]) -> dict[str, float]:
    """p50 / p90 / p99 / mean / max of nanosecond samples, in microseconds."""
    ordered = sorted(samples_ns)
    us = 1e-3
    return {
        "n": len(ordered),
        "p50_us": percentile(ordered, 50) * us,
        "p90_us": percentile(ordered, 90) * us,
        "p99_us": percentile(ordered, 99) * us,
        "mean_us": sum(ordered) / len(ordered) * us,
        "max_us": ordered[-1] * us,
    }


class gc_paused:
    """Context manager: collect, then keep the cyclic GC off while timing."""

    def __enter__(self) -> None:
        gc.collect()
        self._was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was:
            gc.enable()


def max_rss_mib() -> float:
    """This process's peak resident set size so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def machine() -> dict[str, Any]:
    import numpy
    import stormpy

    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg": [round(x, 2) for x in load],
        "stormpy": str(getattr(stormpy, "__version__", "?")),
        "numpy": numpy.__version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None) -> str:
    """A plain aligned text table (numbers right-aligned)."""
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row[i], (int, float)) or row[i] is None for row in rows) for i in range(len(headers))]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if numeric[i] else v.ljust(w) for i, (v, w) in enumerate(zip(values, widths)))

    out = []
    if title:
        out.append(title)
    out.append(line(list(headers)))
    out.append("  ".join("-" * w for w in widths))
    out.extend(line(r) for r in cells)
    return "\n".join(out)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value == 0:
            return "0"
        magnitude = abs(value)
        if magnitude >= 1000:
            return f"{value:,.0f}"
        if magnitude >= 10:
            return f"{value:.1f}"
        if magnitude >= 0.01:
            return f"{value:.3f}"
        return f"{value:.2e}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def write_json(path: str | Path | None, payload: dict[str, Any]) -> None:
    if path is None:
        return
    payload = {"machine": machine(), **payload}
    Path(path).write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n", encoding="utf-8")
    print(f"\nwrote {path}")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)
