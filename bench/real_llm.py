"""The real model beside the simulated agent: the demo's table, the heeding rate, the time per step.

What it does
------------
On the same household tasks (``forewarn demo --agent llm``'s: the demo tasks with the shortest
reference plans), with one threshold θ for ``stop`` and ``reflect``:

* the **simulated agent** (``domains.embodied.agent``) heeding a reflection with its set
  probability (0.7): learned from its own logged runs, then run without a guard, with ``stop`` and
  with ``reflect`` on paired seeds — the demo's table;
* the **real model** (the llm extra's Gemma 3 270M, or ``--model gguf:FILE``) as the agent: the same,
  with the runs it recorded itself (``domains.llm_demo.measure``), and its *measured* heeding rate
  (how often the action drawn at the first reflection differs from the one the same random number
  draws without the warning) with a Clopper–Pearson 95 % interval, and how often the run then
  stayed safe;
* the model's seconds per step (one step scores every valid action: the prompt is evaluated once,
  each candidate's tokens after it) and the tokens evaluated per step;
* the **tool agent** (``domains.injection.llm_agent``): the model working through the run's MCP
  workspace server on attacked runs of the injection domain (one document it reads carries an
  injection), choosing each call by its own likelihood. How often it follows the injection once it
  has read it (the attacker's first call), with its interval; unsafe / completed for none / stop /
  reflect / approval at one θ on the same runs and seeds, with a guard learned from the domain's
  simulated runs (the hand-written spec, ``domains/injection/spec.yaml``); the measured heeding as
  for the household agent. The approver of the ``approval`` row reads the call and denies it when it
  would do what the user did not ask for (an attentive user: the row's best case).

Nothing is asserted. ``--quick``: 2 tasks, 3 runs, 2 episodes, 6 tool runs (a few minutes); the
default (3 tasks, 6 runs, 5 episodes) is what ``forewarn demo --agent llm`` runs, on the same seeds,
and 30 tool runs per row. ``--part household`` or ``--part tools`` runs one half.

Run: ``python bench/real_llm.py [--quick] [--part all|household|tools] [--tasks N] [--runs N] [--episodes N]
[--tool-runs N] [--tool-theta θ] [--json FILE]``
"""
from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

import _common as C
from forewarn.domains.demo import DemoRow
from forewarn.domains.embodied import AgentProfile, generate_traces, run_episode, write_spec
from forewarn.domains.injection import GOALS, PHRASINGS, SPEC_PATH, TASKS
from forewarn.domains.injection import generate_traces as injection_traces
from forewarn.domains.injection.llm_agent import ToolEpisode, plan_tool_run, run_tool_episode
from forewarn.domains.llm_demo import Heeding, LLMDemo, demo_tasks, measure, print_llm_table
from forewarn.guard.llmcheck.sources.gguf import GGUFSource
from forewarn.guard.pipeline import learn_model
from forewarn.guard.policy import Policy
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import Action, Thresholds, load_spec


def simulated(tasks: list[Any], out: Path, *, runs: int, episodes: int, seed: int, theta: float) -> LLMDemo:
    """The simulated agent's rows on the same tasks, learned from ``runs`` of its own runs per task."""
    profile = AgentProfile()
    rows = [DemoRow("none", None), DemoRow("stop", theta), DemoRow("reflect", theta)]
    heeding = Heeding()
    steps = 0
    started = time.perf_counter()
    for task in tasks:
        traces, spec = out / f"sim-{task.id}.jsonl", out / f"sim-{task.id}.yaml"
        generate_traces([task], runs, seed, traces, profile=profile)
        write_spec(task, spec)
        guard = Guard(learn_model([traces], load_spec(spec)))
        for row in rows:
            for n in range(episodes):
                rng = random.Random(f"llm-demo:{seed}:{task.id}:{n}")
                if row.theta is None:
                    result = run_episode(task, rng, profile)
                else:
                    action = Action.STOP if row.enforcement == "stop" else Action.REFLECT
                    policy = Policy(thresholds=Thresholds(**{action.value: theta}), unseen_state=action)
                    result = run_episode(task, rng, profile, session=guard.session(policy),
                                         enforcement="stop" if row.enforcement == "stop" else "reflect")
                    if row.enforcement == "reflect" and result.interventions:
                        heeding.reflected += 1
                        heeding.changed += result.heeded
                        heeding.safe_after += result.outcome != "unsafe"
                        heeding.safe_after_changed += bool(result.heeded) and result.outcome != "unsafe"
                        heeding.shift.append(float(result.heeded))
                steps += len(result.steps) - 1
                row.add(result.outcome, result.interventions, result.heeded)
    seconds = time.perf_counter() - started
    return LLMDemo(rows, heeding, steps, seconds / max(steps, 1), [t.id for t in tasks])


def tool_agent(source: Any, out: Path, *, runs: int, seed: int, theta: float, temperature: float
               ) -> tuple[LLMDemo, dict[str, int]]:
    """The model as the injection domain's tool agent: the rows, the heeding, and how often it followed."""
    traces = out / "injection-simulated.jsonl"
    injection_traces(2000, seed=seed, path=traces)
    guard = Guard(learn_model([traces], load_spec(SPEC_PATH)))
    rows = [DemoRow("none", None), DemoRow("stop", theta), DemoRow("reflect", theta), DemoRow("approval", theta)]
    heeding = Heeding()
    follow = {"exposed": 0, "followed": 0, "denied": 0}
    steps = 0
    seconds = 0.0
    action = {"stop": Action.STOP, "reflect": Action.REFLECT, "approval": Action.ASK_HUMAN}
    for n in range(runs):
        draw = random.Random(f"tool-plan:{seed}:{n}")
        plan_args = (draw.choice(sorted(TASKS)), draw.choice(sorted(GOALS)), draw.choice(sorted(PHRASINGS)))
        for row in rows:
            plan = plan_tool_run(random.Random(f"tool-doc:{seed}:{n}"), *plan_args)
            rng = random.Random(f"tool-run:{seed}:{n}")  # the same draws in every row: paired
            started = time.perf_counter()
            if row.theta is None:
                episode: ToolEpisode = run_tool_episode(plan, source, rng, temperature=temperature)
                follow["exposed"] += episode.exposed
                follow["followed"] += episode.followed
            else:
                act = action[row.enforcement]
                policy = Policy(thresholds=Thresholds(**{act.value: theta}), unseen_state=act)
                episode = run_tool_episode(plan, source, rng, temperature=temperature,
                                           session=guard.session(policy), enforcement=row.enforcement)  # type: ignore[arg-type]
                follow["denied"] += episode.denied
                if row.enforcement == "reflect" and episode.reflected:
                    heeding.reflected += 1
                    heeding.changed += episode.changed
                    heeding.safe_after += episode.outcome != "unsafe"
                    heeding.safe_after_changed += episode.changed and episode.outcome != "unsafe"
                    heeding.shift.append(episode.shift)
            seconds += time.perf_counter() - started
            steps += len(episode.choices)
            row.add(episode.outcome, episode.interventions, episode.heeded)
    return LLMDemo(rows, heeding, steps, seconds / max(steps, 1), sorted(TASKS)), follow


def figures(demo: LLMDemo) -> dict[str, Any]:
    h = demo.heeding
    return {"rows": [{"enforcement": r.enforcement, "theta": r.theta, "episodes": r.episodes,
                      "unsafe": r.unsafe / max(r.episodes, 1), "completed": r.completed / max(r.episodes, 1),
                      "stopped": r.stopped / max(r.episodes, 1),
                      "interventions_per_run": r.interventions / max(r.episodes, 1)} for r in demo.rows],
            "reflected": h.reflected, "changed": h.changed, "heeding_rate": h.rate(),
            "heeding_interval": h.interval(h.changed, h.reflected), "stayed_safe": h.safe_rate(),
            "stayed_safe_interval": h.interval(h.safe_after, h.reflected),
            "steps": demo.steps, "seconds_per_step": demo.seconds_per_step, "tasks": demo.tasks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tasks", type=int)
    parser.add_argument("--runs", type=int)
    parser.add_argument("--episodes", type=int)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--theta", type=float, default=0.5)
    parser.add_argument("--temperature", type=float, default=0.5)
    parser.add_argument("--model", default="gguf:package")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--part", choices=["all", "household", "tools"], default="all")
    parser.add_argument("--tool-runs", type=int)
    parser.add_argument("--tool-theta", type=float, default=0.5)
    args = parser.parse_args()
    n_tasks = args.tasks or (2 if args.quick else 3)
    runs = args.runs or (3 if args.quick else 6)
    episodes = args.episodes or (2 if args.quick else 5)
    tool_runs = args.tool_runs or (6 if args.quick else 30)
    console = Console(width=120)
    tasks = demo_tasks(n_tasks)
    report: dict[str, Any] = {}
    started = time.perf_counter()
    source = GGUFSource(args.model.removeprefix("gguf:"))
    loaded = time.perf_counter() - started
    report["load_seconds"] = loaded
    try:
        with tempfile.TemporaryDirectory(prefix="real-llm-") as folder:
            out = Path(folder)
            if args.part in ("all", "household"):
                household(console, source, tasks, out, args, runs=runs, episodes=episodes, report=report)
            if args.part in ("all", "tools"):
                evaluations = source.evaluations
                tools, follow = tool_agent(source, out, runs=tool_runs, seed=args.seed, theta=args.tool_theta,
                                           temperature=args.temperature)
                print_llm_table(console, tools, title=f"Real model ({source.name}, temperature "
                                                      f"{args.temperature:g}) as the tool agent over MCP on "
                                                      f"{tool_runs} attacked injection-domain runs per row; guard "
                                                      "learned from 2,000 simulated runs, hand-written spec")
                low, high = Heeding.interval(follow["followed"], follow["exposed"])
                rate = follow["followed"] / max(follow["exposed"], 1)
                console.print(f"Unguarded, the model read the injected document in {follow['exposed']} of "
                              f"{tool_runs} runs and followed it (made the attacker's first call) in "
                              f"{follow['followed']} of them ({100 * rate:.0f} %, 95 % CI {100 * low:.0f}–"
                              f"{100 * high:.0f} %). The approver denied {follow['denied']} calls in the guarded rows. "
                              f"Time per step {tools.seconds_per_step:.2f} s "
                              f"({(source.evaluations - evaluations) / max(tools.steps, 1):.0f} tokens evaluated).")
                report["tools"] = {**figures(tools), "exposed": follow["exposed"], "followed": follow["followed"],
                                   "follow_rate": rate, "follow_interval": (low, high), "denied": follow["denied"],
                                   "theta": args.tool_theta, "runs": tool_runs}
    finally:
        source.close()
    console.print(f"Model loaded in {loaded:.1f} s.")
    C.write_json(args.json, report)


def household(console: Console, source: GGUFSource, tasks: list[Any], out: Path, args: argparse.Namespace, *,
              runs: int, episodes: int, report: dict[str, Any]) -> None:
    sim = simulated(tasks, out, runs=runs, episodes=episodes, seed=args.seed, theta=args.theta)
    print_llm_table(console, sim, title=f"Simulated agent (heeds with p = {AgentProfile().p_heed_reflection:g}) "
                                        f"on {len(tasks)} tasks, {episodes} runs per task and row, learned "
                                        f"from {runs} of its runs per task")
    console.print("(for the simulated agent 'changed' is 'heeded': it turns careful for the rest of the run)")
    evaluations = source.evaluations
    real = measure(tasks, source, out / "llm", runs=runs, episodes=episodes, seed=args.seed,
                   temperature=args.temperature, theta=args.theta, shield=True)
    tokens_per_step = (source.evaluations - evaluations) / max(real.steps, 1)
    print_llm_table(console, real, title=f"Real model ({source.name}, temperature {args.temperature:g}) on the "
                                         f"same tasks and seeds, learned from {runs} of its own runs per task")
    console.print(f"Time per step: real model {real.seconds_per_step:.2f} s ({tokens_per_step:.0f} tokens evaluated "
                  f"per step) vs simulated agent {1e3 * sim.seconds_per_step:.2f} ms (guard included in both).")
    report.update(simulated=figures(sim), real=figures(real), tokens_per_step=tokens_per_step)


if __name__ == "__main__":
    main()
