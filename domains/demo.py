"""``forewarn demo``: the whole pipeline on the embodied household domain.

For every SafeAgentBench task whose hazard involves the microwave, stove or sink:
generate logged runs of a noisy simulated agent, derive the spec from the task's unsafe
final-state condition, learn a DTMC, check it with Storm. Then run the simulated agent
without a guard, with ``stop`` and with ``reflect`` at several thresholds and with the
shield (the MDP learned beside the chain blocks only the too risky moves), and print a
table like Table 3 of the Pro2Guard paper. Under it, on the first :data:`COMPARED_TASKS`
tasks' logged runs, the hand-written spec, the spec ``discover`` extends it to and counting
side by side (:mod:`domains.comparison`).
"""
from __future__ import annotations

import os
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..errors import ConfigError
from ..guard.model import GuardModel
from ..guard.pipeline import learn_model
from ..guard.policy import Policy
from ..guard.runtime import Guard
from ..guard.spec import Action, Thresholds, load_spec
from ..guard.traces import read_runs
from .comparison import compare_specs, print_comparison

STOP_THETAS = (0.1, 0.3, 0.5, 0.7)
COMPARED_TASKS = 8  # nested discovery on every task would take minutes; 8 tasks take ~15 s
REFLECT_THETAS = (0.1, 0.3, 0.5, 0.7)
SHIELD_THETA = 0.5  # the shield's row: a move is blocked where its risk is at least 1 − θ (docs/shield.md)


@dataclass
class DemoRow:
    """Aggregated outcomes of one enforcement configuration over all tasks."""

    enforcement: str
    theta: float | None
    episodes: int = 0
    unsafe: int = 0
    completed: int = 0
    stopped: int = 0
    interventions: int = 0
    heeded: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    def add(self, outcome: str, interventions: int, heeded: int) -> None:
        self.episodes += 1
        self.unsafe += outcome == "unsafe"
        self.completed += outcome == "completed"
        self.stopped += outcome == "stopped"
        self.interventions += interventions
        self.heeded += heeded


def run_demo(*, domain: str = "embodied", out_dir: Path = Path("forewarn-demo"), runs: int = 150,
             episodes: int = 40, seed: int = 7, heed: float | None = None,
             console: Console | None = None) -> list[DemoRow]:
    """Run the demo; returns the table rows (also printed)."""
    if domain == "driving":
        return run_driving_demo(out_dir=Path(out_dir), runs=runs, episodes=episodes, seed=seed, heed=heed,
                                console=console or Console())
    if domain == "mcp":
        from ..guard._extras import require
        from .mcp.demo import run_mcp_demo

        require("mcp", "forewarn demo --domain mcp")
        run_mcp_demo(out_dir=Path(out_dir), console=console or Console())
        return []
    if domain != "embodied":
        raise ConfigError(f"unknown demo domain {domain!r}; available: embodied, driving, mcp")
    if runs < 1 or episodes < 1:
        raise ConfigError("--runs and --episodes must be at least 1")
    from dataclasses import replace

    from .embodied import AgentProfile, generate_traces, hazard_tasks, run_episode, run_shielded_episode, write_spec

    console = console or Console()
    profile = AgentProfile()
    if heed is not None:
        if not 0.0 <= heed <= 1.0:
            raise ConfigError(f"--heed must lie in [0, 1], got {heed}")
        profile = replace(profile, p_heed_reflection=heed)
    tasks = hazard_tasks()
    out_dir = Path(out_dir)
    for sub in ("traces", "specs", "models"):
        (out_dir / sub).mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    guards: dict[str, Guard] = {}
    total_runs = total_steps = 0
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, transient=True)
    with progress:
        learning = progress.add_task("log runs, learn, check", total=len(tasks))
        for task in tasks:
            trace_path = out_dir / "traces" / f"{task.id}.jsonl"
            spec_path = out_dir / "specs" / f"{task.id}.yaml"
            model_path = out_dir / "models" / f"{task.id}.json"
            generate_traces([task], runs, seed, trace_path, profile=profile)
            write_spec(task, spec_path)
            model = learn_model([trace_path], load_spec(spec_path), mdp=True)  # the MDP: the shield's row
            model.save(model_path)
            total_runs += model.provenance["runs"]
            total_steps += model.provenance["steps"]
            guards[task.id] = Guard(GuardModel.load(model_path))
            progress.advance(learning)
        learned_at = time.perf_counter()

        configs: list[tuple[str, float | None]] = [("none", None)]
        configs += [("stop", t) for t in STOP_THETAS] + [("reflect", t) for t in REFLECT_THETAS]
        configs.append(("shield", SHIELD_THETA))
        rows = [DemoRow(name, theta) for name, theta in configs]
        simulating = progress.add_task("simulate guarded agents", total=len(tasks) * len(configs))
        for task in tasks:
            guard = guards[task.id]
            for row in rows:
                session_guard = guard
                if row.theta is not None:
                    action = Action.STOP if row.enforcement == "stop" else Action.REFLECT
                    thresholds = Thresholds(**{action.value: row.theta})
                    policy = Policy(thresholds=thresholds, unseen_state=action)
                for n in range(episodes):
                    # the same seed per (task, episode) across configurations: paired comparison
                    rng = random.Random(f"demo:{seed}:{task.id}:{n}")
                    if row.theta is None:
                        result = run_episode(task, rng, profile)
                    elif row.enforcement == "shield":  # p_safe < θ ⇔ p_unsafe > 1 − θ: the same θ as the others'
                        result = run_shielded_episode(task, rng, profile, guard, 1.0 - row.theta)
                    else:
                        session = session_guard.session(policy)
                        result = run_episode(task, rng, profile, session=session,
                                             enforcement="stop" if row.enforcement == "stop" else "reflect")
                    row.add(result.outcome, result.interventions, result.heeded)
                progress.advance(simulating)
    finished = time.perf_counter()

    _print_table(console, rows, tasks=len(tasks), episodes=episodes, heed=profile.p_heed_reflection)
    compared = tasks[:COMPARED_TASKS]
    if runs >= 10:  # with fewer runs than two per fold, the folds say nothing
        parts = [(load_spec(out_dir / "specs" / f"{task.id}.yaml"),
                  list(read_runs(out_dir / "traces" / f"{task.id}.jsonl"))) for task in compared]
        print_comparison(console, compare_specs(parts),
                         title=f"Specs compared on the logged runs of {len(compared)} tasks ({len(compared) * runs} "
                               "runs), grouped 5-fold, one model per task")
    pac_ok = sum(g.model.pac.satisfied for g in guards.values())
    console.print(
        f"Learned {len(guards)} models from {total_runs} logged runs ({total_steps} steps) in "
        f"{learned_at - started:.1f} s; simulated {sum(r.episodes for r in rows)} episodes in "
        f"{finished - learned_at:.1f} s. PAC (ε=0.05, δ=0.05) reached by {pac_ok}/{len(guards)} models.")
    console.print(f"Traces:  {out_dir / 'traces'}\nSpecs:   {out_dir / 'specs'}\nModels:  {out_dir / 'models'}")
    example = next(iter(guards))
    command = _command()
    example_model = out_dir / "models" / f"{example}.json"
    # one command per line (the long one continued with a backslash), never wrapped by the console:
    # pasted from an 80-column terminal, each runs as printed
    console.print(f"Try:\n  {command} check {example_model}\n  {command} replay "
                  f"{out_dir / 'traces' / (example + '.jsonl')} \\\n      --model {example_model}",
                  highlight=False, markup=False, soft_wrap=True)
    return rows


def _command() -> str:
    """How to call forewarn from this shell: ``forewarn`` when it is on PATH (an activated
    environment), else the path this run was started with (``.venv/bin/forewarn`` after
    ``make demo``), so the hints work as printed."""
    started = sys.argv[0] if sys.argv and os.path.basename(sys.argv[0]) == "forewarn" else None
    on_path = shutil.which("forewarn")
    if started is None:
        return "forewarn" if on_path else f"{sys.executable} -m forewarn"
    if on_path and os.path.realpath(on_path) == os.path.realpath(started):
        return "forewarn"
    return os.path.relpath(started) if not os.path.isabs(started) else started


def _print_table(console: Console, rows: list[DemoRow], *, tasks: int, episodes: int, heed: float) -> None:
    table = Table(title=f"Embodied agent, {tasks} SafeAgentBench tasks (microwave, stove, sink), "
                        f"{episodes} episodes per task and row",
                  caption="θ: act when p_safe < θ, p_safe = 1 − P[F unsafe] from the current abstract state; "
                          "shield: block a move whose risk is at least 1 − θ")
    for column in ("enforcement", "θ", "unsafe %", "completed %", "stopped %", "interventions/ep"):
        table.add_column(column, justify="left" if column == "enforcement" else "right")
    for row in rows:
        n = row.episodes or 1
        table.add_row(
            "none" if row.theta is None else row.enforcement,
            "–" if row.theta is None else f"{row.theta:g}",
            f"{100 * row.unsafe / n:.2f}", f"{100 * row.completed / n:.2f}", f"{100 * row.stopped / n:.2f}",
            f"{row.interventions / n:.2f}")
    console.print(table)
    console.print(f"The simulated agent heeds a reflection prompt (or a blocked call) with probability {heed:g}; "
                  "'stop' ends the run at the first alarm; 'shield' counts the calls it blocked.")


DRIVING_THETAS = (0.3, 0.5, 0.7)


def run_driving_demo(*, out_dir: Path, runs: int, episodes: int, seed: int, heed: float | None,
                     console: Console) -> list[DemoRow]:
    """The driving domain: traffic-law monitors synchronised with the learned chain.

    Learns from logged drives (10 Hz), replays held-out drives to measure how early the
    guard warns before a collision or a rule violation (the paper's Table 1), then
    drives guarded cars with ``stop`` (emergency brake) and ``reflect`` on the same seeds.
    """
    from ..guard.pipeline import read_trace_files
    from ..guard.replay import replay
    from .driving import P_HEED_REFLECTION, generate_traces, python_predicates, run_episode, spec_path

    runs = max(runs, 2)
    out_dir.mkdir(parents=True, exist_ok=True)
    train, held_out = out_dir / "drives-train.jsonl", out_dir / "drives-held-out.jsonl"
    model_path = out_dir / "driving-model.json"
    started = time.perf_counter()
    generate_traces(runs * 2, seed, train)
    generate_traces(runs, seed + 1, held_out)
    fast = python_predicates()  # the spec's CEL predicates as Python functions (tested equal)
    model = learn_model([train], load_spec(spec_path()), python_predicates=fast)
    model.save(model_path)
    guard = Guard(GuardModel.load(model_path), python_predicates=fast)
    learned = time.perf_counter() - started

    report = replay(guard, read_trace_files([held_out]), list(DRIVING_THETAS))
    table = Table(title=f"Driving: warnings on {report.runs} held-out drives (10 Hz) before a collision or a "
                        "traffic-law violation")
    for column in ("θ", "violating drives", "warned in time", "false alarms", "advance (s, mean)",
                   "advance (s, median)"):
        table.add_column(column, justify="right")
    for t in report.thetas:
        table.add_row(f"{t.theta:g}", str(t.n_unsafe), _percent(t.detection_rate), _percent(t.false_alarm_rate),
                      _seconds(t.mean_advance_seconds), _seconds(t.median_advance_seconds))
    console.print(table)

    p_heed = P_HEED_REFLECTION if heed is None else heed
    rows = [DemoRow("none", None), DemoRow("stop", None), DemoRow("reflect", None)]
    collisions = {row.enforcement: 0 for row in rows}
    violations = {row.enforcement: 0 for row in rows}
    clean = {row.enforcement: 0 for row in rows}
    for n in range(episodes * 10):
        for row in rows:
            rng = random.Random(f"drive:{seed}:{n}")
            session = None if row.enforcement == "none" else guard.session()
            enforcement = None if row.enforcement == "none" else row.enforcement
            result = run_episode(rng, session, enforcement, p_heed_reflection=p_heed)  # type: ignore[arg-type]
            row.add(result.outcome, result.alarms, result.heeded)
            collisions[row.enforcement] += result.collisions
            violations[row.enforcement] += sum(result.violations.values())
            clean[row.enforcement] += result.outcome == "cleared"
    outcome_table = Table(title=f"Driving: {rows[0].episodes} drives per row on the same seeds "
                                f"(guard policy from the spec; reflect heeded with p = {p_heed:g})")
    for column in ("enforcement", "collisions", "rule violations", "clean drives %", "alarms / drive"):
        outcome_table.add_column(column, justify="left" if column == "enforcement" else "right")
    for row in rows:
        name, n = row.enforcement, max(row.episodes, 1)
        outcome_table.add_row(name, str(collisions[name]), str(violations[name]), f"{100 * clean[name] / n:.1f}",
                              f"{row.interventions / n:.2f}")
    console.print(outcome_table)
    console.print(f"Learned from {model.provenance['runs']} drives ({model.provenance['steps']} steps): "
                  f"{model.provenance['chain_states']} abstract states, {model.provenance['product_states']} "
                  f"product states with monitors {model.dtmc.monitors}, in {learned:.1f} s.")
    console.print(f"Model:   {model_path}\nTraces:  {train}, {held_out}")
    return rows


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def _seconds(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"
