"""``forewarn demo --agent llm``: the embodied demo with a real local model as the agent.

On a few household tasks (the shortest reference plans among the demo's microwave, stove and
sink tasks): record unguarded runs of the model agent (:mod:`.embodied.llm_agent`), learn a
model per task from them (and one with its MDP, for the shield), then run the model agent without
a guard, with ``stop``, with ``reflect`` and under the ``shield`` at one threshold, on the same
seeds, and print the table — and the measured heeding
rate: how often the action drawn at the first reflection differs from the one the same random
number draws without it, and how often the run then stayed safe (Clopper–Pearson 95 % intervals).
"""
from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import yaml
from rich.console import Console
from rich.table import Table

from ..errors import ConfigError
from ..guard.intervals import clopper_pearson
from ..guard.pipeline import learn_model
from ..guard.policy import Policy
from ..guard.runtime import Guard
from ..guard.spec import Action, Thresholds, load_spec
from .demo import DemoRow
from .embodied import derive_spec, hazard_tasks, reference_plan, write_spec
from .embodied.llm_agent import LLMEpisode, Scorer, run_llm_episode, trace_record
from .embodied.tasks import Task


@dataclass
class Heeding:
    """What the reflect row's episodes say about the model hearing a reflection."""

    reflected: int = 0
    changed: int = 0
    safe_after: int = 0
    safe_after_changed: int = 0
    shift: list[float] = field(default_factory=list)

    def add(self, episode: LLMEpisode) -> None:
        if not episode.reflected:
            return
        self.reflected += 1
        self.changed += episode.changed
        self.safe_after += episode.outcome != "unsafe"
        self.safe_after_changed += episode.changed and episode.outcome != "unsafe"
        self.shift.append(episode.shift)

    @staticmethod
    def interval(x: int, n: int) -> tuple[float, float]:
        if n == 0:
            return (0.0, 1.0)
        low, high = clopper_pearson(np.array([x]), np.array([n]), 0.05)
        return float(low[0]), float(high[0])

    def rate(self) -> float | None:
        return self.changed / self.reflected if self.reflected else None

    def safe_rate(self) -> float | None:
        return self.safe_after / self.reflected if self.reflected else None


@dataclass
class LLMDemo:
    rows: list[DemoRow]
    heeding: Heeding
    steps: int
    seconds_per_step: float
    tasks: list[str]


def demo_tasks(count: int) -> list[Task]:
    """The ``count`` demo tasks with the shortest reference plans (ties in the demo's order)."""
    tasks = hazard_tasks()
    return sorted(tasks, key=lambda t: len(reference_plan(t)))[:count]


def measure(tasks: Sequence[Task], scorer: Scorer, out_dir: Path, *, runs: int, episodes: int, seed: int,
            temperature: float, theta: float, shield: bool = False) -> LLMDemo:
    """Record, learn, and run the three rows (four with ``shield``); the figures of the table (see the
    module's doc)."""
    for sub in ("traces", "specs", "models"):
        (out_dir / sub).mkdir(parents=True, exist_ok=True)
    steps = 0
    model_seconds = 0.0
    guards: dict[str, Guard] = {}
    shields: dict[str, Guard] = {}

    def episode(task: Task, rng: random.Random, **options: object) -> LLMEpisode:
        nonlocal steps, model_seconds
        started = time.perf_counter()
        result = run_llm_episode(task, scorer, rng, temperature=temperature, **options)  # type: ignore[arg-type]
        model_seconds += time.perf_counter() - started
        steps += len(result.choices)
        return result

    for task in tasks:
        trace_path = out_dir / "traces" / f"{task.id}.jsonl"
        with open(trace_path, "wb") as out:
            for n in range(runs):
                result = episode(task, random.Random(f"llm:{seed}:{task.id}:{n}"))
                out.write(orjson.dumps(trace_record(task, n, result, model=scorer.name, temperature=temperature)))
                out.write(b"\n")
        spec_path = out_dir / "specs" / f"{task.id}.yaml"
        write_spec(task, spec_path)
        model = learn_model([trace_path], load_spec(spec_path))
        model.save(out_dir / "models" / f"{task.id}.json")
        guards[task.id] = Guard(model)
        if shield:  # the same runs, learned with the MDP over the model's actions (docs/shield.md)
            shield_spec = derive_spec(task)
            shield_spec["learning"]["mdp"] = True
            shield_spec["guard"].update(enforcement="shield", shield_theta=theta)
            shield_path = out_dir / "specs" / f"{task.id}-shield.yaml"
            shield_path.write_text(yaml.safe_dump(shield_spec, sort_keys=False), encoding="utf-8")
            shielded = learn_model([trace_path], load_spec(shield_path))
            shielded.save(out_dir / "models" / f"{task.id}-shield.json")
            shields[task.id] = Guard(shielded)

    rows = [DemoRow("none", None), DemoRow("stop", theta), DemoRow("reflect", theta)]
    rows += [DemoRow("shield", theta)] if shield else []
    heeding = Heeding()
    for task in tasks:
        for row in rows:
            for n in range(episodes):
                rng = random.Random(f"llm-demo:{seed}:{task.id}:{n}")  # the same seeds in every row: paired
                if row.theta is None:
                    result = episode(task, rng)
                elif row.enforcement == "shield":
                    result = episode(task, rng, session=shields[task.id].session(), enforcement="shield")
                else:
                    action = Action.STOP if row.enforcement == "stop" else Action.REFLECT
                    policy = Policy(thresholds=Thresholds(**{action.value: theta}), unseen_state=action)
                    result = episode(task, rng, session=guards[task.id].session(policy),
                                     enforcement=row.enforcement)
                    if row.enforcement == "reflect":
                        heeding.add(result)
                row.add(result.outcome, result.interventions, result.heeded)
    return LLMDemo(rows, heeding, steps, model_seconds / max(steps, 1), [t.id for t in tasks])


def print_llm_table(console: Console, demo: LLMDemo, *, title: str) -> None:
    table = Table(title=title, caption="θ: act when p_safe < θ; the same seeds in every row")
    for column in ("enforcement", "θ", "unsafe %", "completed %", "stopped %", "interventions/run"):
        table.add_column(column, justify="left" if column == "enforcement" else "right")
    for row in demo.rows:
        n = row.episodes or 1
        table.add_row(row.enforcement, "–" if row.theta is None else f"{row.theta:g}",
                      f"{100 * row.unsafe / n:.1f}", f"{100 * row.completed / n:.1f}",
                      f"{100 * row.stopped / n:.1f}", f"{row.interventions / n:.2f}")
    console.print(table)
    h = demo.heeding
    if not h.reflected:
        console.print("No reflection reached the model: no heeding rate to measure.")
        return
    low, high = h.interval(h.changed, h.reflected)
    safe_low, safe_high = h.interval(h.safe_after, h.reflected)
    console.print(
        f"Measured heeding: the reflection changed the model's next action in {h.changed} of {h.reflected} "
        f"reflected runs ({100 * h.changed / h.reflected:.0f} %, 95 % CI {100 * low:.0f}–{100 * high:.0f} %); "
        f"mean probability moved {sum(h.shift) / len(h.shift):.3f}; the run then stayed safe in {h.safe_after} "
        f"of {h.reflected} ({100 * h.safe_after / h.reflected:.0f} %, 95 % CI {100 * safe_low:.0f}–"
        f"{100 * safe_high:.0f} %), {h.safe_after_changed} of them after a changed action.")


def open_scorer(spec: str) -> Any:
    """The agent's model from ``--model``: ``gguf:package``, ``gguf:FILE.gguf``, ``openai:URL#MODEL`` (an
    OpenAI-compatible completions endpoint; the key, if any, from ``OPENAI_API_KEY``) or ``openai`` (the
    URL from ``OPENAI_BASE_URL``, the model name from ``OPENAI_MODEL``)."""
    if spec.startswith("gguf:"):
        from ..guard.llmcheck.sources.gguf import GGUFSource

        return GGUFSource(spec[len("gguf:"):])
    if spec == "openai":
        url, name = os.environ.get("OPENAI_BASE_URL"), os.environ.get("OPENAI_MODEL")
        if not url or not name:
            raise ConfigError("--model openai needs OPENAI_BASE_URL and OPENAI_MODEL in the environment "
                              "(or give --model openai:URL#MODEL)")
        spec = f"openai:{url}#{name}"
    if spec.startswith("openai:"):
        from ..guard.llmcheck.sources.openai import OpenAISource

        return OpenAISource.from_spec(spec[len("openai:"):], timeout=600.0)
    raise ConfigError(f"--model {spec!r}: expected gguf:package, gguf:FILE.gguf, openai:URL#MODEL or openai")


def run_llm_demo(*, out_dir: Path, model: str = "gguf:package", tasks: int = 3, runs: int = 6, episodes: int = 5,
                 seed: int = 7, temperature: float = 0.5, theta: float = 0.5,
                 console: Console | None = None) -> LLMDemo:
    """``forewarn demo --agent llm``; returns the figures (also printed)."""
    if tasks < 1 or runs < 1 or episodes < 1:
        raise ConfigError("--tasks, --runs and --episodes must be at least 1")
    console = console or Console()
    started = time.perf_counter()
    source = open_scorer(model)
    try:
        loaded = time.perf_counter() - started
        demo = measure(demo_tasks(tasks), source, Path(out_dir), runs=runs, episodes=episodes, seed=seed,
                       temperature=temperature, theta=theta, shield=True)
    finally:
        source.close()
    print_llm_table(console, demo, title=f"Real model agent ({source.name}, temperature {temperature:g}) on "
                                         f"{len(demo.tasks)} household tasks, {episodes} runs per task and row, "
                                         f"learned from {runs} recorded runs per task")
    console.print(f"Model loaded in {loaded:.1f} s; {demo.steps} model steps at {demo.seconds_per_step:.2f} s "
                  f"each; {time.perf_counter() - started:.0f} s in all. Traces, specs and models: {out_dir}")
    return demo
