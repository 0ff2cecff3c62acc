"""Tests of the driving domain: spec, simulator, traces, learned guard, guarded episodes."""
from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

import forewarn.guard as guard
from forewarn.domains.driving import (
    DEFAULT_MIX,
    PREDICATES,
    PROFILES,
    RULES,
    EpisodeResult,
    generate_traces,
    load_driving_spec,
    rule_violations,
    run_episode,
    spec_path,
    valid_transition,
)
from forewarn.domains.driving.predicates import python_predicates
from forewarn.guard.monitoring import build_monitors
from forewarn.guard.predicates import PredicateSet
from forewarn.guard.replay import replay
from forewarn.guard.traces import abstract_run, read_runs

THETAS = (0.3, 0.5, 0.7)
RISKY = {"reckless": 1.0, "aggressive": 1.0}
Predicates = Mapping[str, Callable[[Mapping[str, Any]], bool]]


# ---------------------------------------------------------------- fixtures (built once)


@pytest.fixture(scope="module")
def spec() -> guard.Spec:
    return load_driving_spec()


@pytest.fixture(scope="module")
def fast() -> Predicates:
    return python_predicates()


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("driving") / "drives.jsonl"
    assert generate_traces(300, 0, path) == 300
    return path


@pytest.fixture(scope="module")
def parsed(traces: Path) -> list[dict[str, Any]]:
    return _runs(traces)


@pytest.fixture(scope="module")
def heldout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("driving") / "heldout.jsonl"
    generate_traces(150, 1, path)
    return path


@pytest.fixture(scope="module")
def model(traces: Path, spec: guard.Spec, fast: Predicates) -> guard.GuardModel:
    return guard.learn_model([traces], spec, python_predicates=fast)


@pytest.fixture(scope="module")
def driving_guard(model: guard.GuardModel, fast: Predicates) -> guard.Guard:
    return guard.Guard(model, python_predicates=fast)


def _runs(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


# ---------------------------------------------------------------- spec


def test_spec_loads_with_rules_as_monitors(spec: guard.Spec) -> None:
    import forewarn.domains.driving as package  # the source folder, or the installed copy (make core-test)

    assert spec_path().is_file() and spec_path().parent.resolve() == Path(package.__file__).resolve().parent
    assert tuple(spec.predicate_names) == PREDICATES
    assert spec.unsafe == "collision"
    kinds = {m.name: m.kind for m in spec.monitors}
    assert kinds == {"start_on_green": "bounded_response", "red_light": "absence"}
    start = next(m for m in spec.monitors if m.name == "start_on_green")
    assert start.within == 30 and "!moving" in (start.trigger or "")
    assert [m.name for m in build_monitors(spec)] == ["start_on_green", "red_light"]
    properties = {p.name: p for p in spec.guard.effective_properties()}
    assert properties["unsafe"].formula == 'F "unsafe"' and properties["unsafe"].thresholds is None
    assert properties["collision"].formula == 'F "collision"'
    for rule in RULES:
        assert properties[rule].formula == f'F "viol_{rule}"' and properties[rule].thresholds is not None
    assert spec.valid_transitions.function == "forewarn.driving.valid_transition"


def _valuation(*on: str) -> tuple[bool, ...]:
    return tuple(name in on for name in PREDICATES)


def test_valid_transition_rule() -> None:
    far = _valuation("green_light", "moving")
    near = _valuation("green_light", "moving", "near_line")
    assert valid_transition(far, near) and valid_transition(near, far)
    assert valid_transition(far, _valuation("yellow_light", "moving"))
    assert not valid_transition(far, _valuation("red_light", "moving"))  # green does not skip yellow
    assert valid_transition(_valuation("red_light"), _valuation("green_light"))
    assert not valid_transition(far, _valuation("green_light", "moving", "past_line"))  # 30 m in one step
    over = _valuation("green_light", "moving", "past_line")
    assert valid_transition(near, over) and not valid_transition(over, near)  # no reversing over the line
    crash = _valuation("green_light", "pedestrian_ahead", "past_line", "in_crossing", "collision")
    assert valid_transition(_valuation("green_light", "pedestrian_ahead", "moving", "past_line", "in_crossing"), crash)
    assert not valid_transition(far, crash)
    assert not valid_transition(_valuation(), far)  # no colour lit: not a state of the world


# ---------------------------------------------------------------- traces


def test_every_predicate_is_a_bool_on_every_generated_state(tmp_path: Path, spec: guard.Spec,
                                                            fast: Predicates) -> None:
    regular, irregular = tmp_path / "regular.jsonl", tmp_path / "irregular.jsonl"
    generate_traces(25, 7, regular)
    generate_traces(10, 8, irregular, irregular=True, profile_mix=RISKY)
    cel, python = PredicateSet(spec), PredicateSet(spec, fast)
    seen: Counter[int] = Counter()
    for path in (regular, irregular):
        for run in read_runs(path):
            for state in run.states():
                bits = cel.evaluate(state)  # raises PredicateError unless every predicate is a bool
                assert python.evaluate(state) == bits
                seen[bits] += 1
    assert sum(seen.values()) > 3_000
    for i, name in enumerate(PREDICATES):  # every predicate is both true and false somewhere
        assert any(bits >> i & 1 for bits in seen) and any(not bits >> i & 1 for bits in seen), name


def test_traces_are_valid_jsonl_with_increasing_time(traces: Path, parsed: list[dict[str, Any]],
                                                     tmp_path: Path) -> None:
    runs = parsed
    assert len(runs) == 300 and len({r["id"] for r in runs}) == 300
    assert sum(1 for _ in read_runs(traces)) == 300  # the contract's reader accepts every line
    for run in runs:
        steps = run["steps"]
        times = [s["t"] for s in steps]
        assert times[0] == 0.0
        assert all(abs(b - a - 0.1) < 1e-6 for a, b in itertools.pairwise(times)), run["id"]
        assert "action" not in steps[0] and all(isinstance(s["action"], str) for s in steps[1:])
        meta = run["meta"]
        assert meta["driver"] in PROFILES and meta["outcome"] in ("collision", "violation", "cleared", "timeout")
        assert meta["violations"] == rule_violations(steps)
        last = steps[-1]["state"]
        if meta["outcome"] == "collision":
            assert last["collision"] and meta["violations"][-1]["rule"] == "collision"
        elif meta["outcome"] == "cleared":
            assert not meta["violations"] and last["dist_to_line"] <= -22.5 + 1e-3  # rear bumper out of the box
        elif meta["outcome"] == "violation":
            assert meta["violations"] and not last["collision"]
    irregular = tmp_path / "irregular.jsonl"
    generate_traces(10, 3, irregular, irregular=True)
    for run in _runs(irregular):
        times = [s["t"] for s in run["steps"]]
        assert all(0.05 - 1e-3 <= b - a <= 0.2 + 1e-3 for a, b in itertools.pairwise(times)), run["id"]


def test_generation_is_deterministic_per_run(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    generate_traces(6, 11, a)
    generate_traces(6, 11, b)
    generate_traces(3, 11, c)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes().splitlines()[:3] == c.read_bytes().splitlines()


def test_meta_violations_are_what_the_monitors_see(traces: Path, spec: guard.Spec, fast: Predicates) -> None:
    predicates = PredicateSet(spec, fast)
    monitors = build_monitors(spec)
    for run in read_runs(traces):
        bits = abstract_run(run, predicates)
        truth: dict[str, int] = {}
        for event in run.meta["violations"]:
            truth.setdefault(event["rule"], event["step"])
        for monitor in monitors:
            assert monitor.first_violation(bits) == truth.get(monitor.name), (run.id, monitor.name)
        first_unsafe = next((i for i, b in enumerate(bits) if predicates.is_unsafe(b)), None)
        assert first_unsafe == truth.get("collision"), run.id


def test_driver_mix_gives_some_collisions_some_violations_mostly_clean(parsed: list[dict[str, Any]]) -> None:
    runs = parsed
    outcomes = Counter(r["meta"]["outcome"] for r in runs)
    rules = Counter(e["rule"] for r in runs for e in r["meta"]["violations"])
    n = len(runs)
    # measured with seed 0: 2.0% collision, 7.3% violation, 90.7% cleared (1000 runs: 2.7, 8.3, 89.0)
    assert 0.01 <= outcomes["collision"] / n <= 0.08
    assert 0.03 <= outcomes["violation"] / n <= 0.2
    assert outcomes["cleared"] / n >= 0.75
    assert rules["start_on_green"] > 0 and rules["red_light"] > 0
    drivers = Counter(r["meta"]["driver"] for r in runs)
    assert set(drivers) == set(DEFAULT_MIX)
    unsafe = Counter(r["meta"]["driver"] for r in runs if r["meta"]["outcome"] in ("collision", "violation"))
    assert unsafe["cautious"] == 0 and unsafe["reckless"] / drivers["reckless"] > 0.2


# ---------------------------------------------------------------- learning and replay


def test_learned_model_with_monitors_warns_before_violations(model: guard.GuardModel, heldout: Path,
                                                             driving_guard: guard.Guard) -> None:
    provenance = model.provenance
    assert provenance["runs"] == 300 and provenance["product_states"] > provenance["chain_states"]
    assert model.dtmc.invalid_observed == 0  # the transition rule never contradicts the data
    assert [p.definition.name for p in model.properties] == ["unsafe", "collision", "red_light", "start_on_green"]
    report = replay(driving_guard, read_runs(heldout), THETAS)
    assert report.unseen_steps < 0.01 * report.steps
    by_theta = {t.theta: t for t in report.thetas}
    assert by_theta[0.3].n_unsafe >= 8
    rates = [by_theta[t].detection_rate or 0.0 for t in THETAS]
    assert rates == sorted(rates) and rates[-1] >= 0.8 and rates[0] > 0.0
    for t in report.thetas:
        if t.detected:
            assert t.mean_advance_seconds is not None and t.mean_advance_seconds > 0.0
    assert (by_theta[0.3].false_alarm_rate or 0.0) < 0.2


def test_cel_spec_learns_the_same_model_as_the_fast_predicates(traces: Path, tmp_path: Path, spec: guard.Spec,
                                                               fast: Predicates) -> None:
    subset = tmp_path / "subset.jsonl"
    subset.write_bytes(b"\n".join(traces.read_bytes().splitlines()[:25]) + b"\n")
    by_cel = guard.learn_model([subset], spec)
    by_python = guard.learn_model([subset], spec, python_predicates=fast)
    assert by_cel.dtmc.states == by_python.dtmc.states
    assert (by_cel.dtmc.counts != by_python.dtmc.counts).nnz == 0
    for a, b in zip(by_cel.properties, by_python.properties):
        assert a.outcome.values.tolist() == pytest.approx(b.outcome.values.tolist(), abs=1e-9)


# ---------------------------------------------------------------- episodes


def _paired(driving_guard: guard.Guard, enforcement: str | None, n: int) -> list[EpisodeResult]:
    return [run_episode(random.Random(f"pair:{i}"), driving_guard.session(), enforcement,  # type: ignore[arg-type]
                        profile_mix=RISKY) for i in range(n)]


def test_guarded_episodes_have_fewer_collisions_on_the_same_seeds(driving_guard: guard.Guard) -> None:
    # risky drivers (reckless and aggressive), so that 200 paired runs hold enough collisions;
    # measured: collisions 23 / 11 (stop) / 19 (reflect), rule violations 46 / 21 / 29
    runs = {e: _paired(driving_guard, e, 200) for e in (None, "stop", "reflect")}
    collisions = {e: sum(r.collisions for r in rs) for e, rs in runs.items()}
    violations = {e: sum(sum(r.violations.values()) for r in rs) for e, rs in runs.items()}
    assert collisions[None] >= 10
    assert collisions["stop"] < collisions[None] and collisions["reflect"] < collisions[None]
    assert violations["stop"] < violations[None] and violations["reflect"] < violations[None]
    for e, rs in runs.items():
        for r in rs:
            assert r.first_alarm_t is not None or r.alarms == 0
            if r.advance_warning is not None:
                assert r.advance_warning > 0.0 and r.first_alarm_step is not None
            assert (r.outcome == "collision") == (r.collisions == 1)
            assert r.violations.keys() == set(RULES)
            if e == "reflect":
                assert r.p_heed_reflection == 0.7 and r.prompts >= r.heeded
            if e != "stop":
                assert r.braking_steps == 0
    assert sum(r.braking_steps for r in runs["stop"]) > 0
    assert any(r.advance_warning for r in runs[None])


@dataclass
class _Value:
    name: str
    formula: str
    p_unsafe: float


@dataclass
class _Decision:
    action: str
    p_unsafe: float | None
    properties: tuple[_Value, ...] = ()
    unsafe_now: bool = False


@dataclass
class _FixedSession:
    """Says the same thing at every step."""

    decision: _Decision
    observed: list[dict[str, Any]] = field(default_factory=list)

    def observe(self, state: dict[str, Any]) -> _Decision:
        self.observed.append(state)
        return self.decision


def _risk(action: str, **p: float) -> _Decision:
    values = [_Value("unsafe", 'F "unsafe"', max(p.values()))]
    values += [_Value(name, f'F "viol_{name}"', value) for name, value in p.items()]
    return _Decision(action, max(p.values()), tuple(values))


def _states(result: EpisodeResult) -> list[dict[str, Any]]:
    return [step["state"] for step in result.steps]


def test_stop_brakes_and_holds_but_not_for_a_rule_that_demands_moving() -> None:
    seed = "hold:3"
    free = run_episode(random.Random(seed))
    session = _FixedSession(_risk("stop", collision=0.6, red_light=0.1, start_on_green=0.2))
    held = run_episode(random.Random(seed), session, "stop", time_limit=20.0)
    assert len(session.observed) == len(held.steps)  # Algorithm 2: every step observed
    assert held.braking_steps > 0 and held.outcome in ("timeout", "violation")
    assert not any(s["crossed_line"] for s in _states(held)) and held.steps[-1]["state"]["speed"] == 0.0
    assert {e["rule"] for e in held.events} <= {"start_on_green"}  # held at a clear green, if anything
    start_risk = _FixedSession(_risk("stop", collision=0.01, red_light=0.02, start_on_green=0.9))
    left_alone = run_episode(random.Random(seed), start_risk, "stop")
    assert left_alone.braking_steps == 0 and _states(left_alone) == _states(free)


def test_reflect_prompts_once_per_alarm_and_heeds_with_its_probability() -> None:
    seed = "reflect:5"
    free = run_episode(random.Random(seed), profile=PROFILES["reckless"])
    ignored = run_episode(random.Random(seed), _FixedSession(_risk("reflect", collision=0.5)), "reflect",
                          profile=PROFILES["reckless"], p_heed_reflection=0.0)
    assert ignored.prompts == 1 and not ignored.heeded and _states(ignored) == _states(free)
    heeded = run_episode(random.Random(seed), _FixedSession(_risk("reflect", collision=0.5)), "reflect",
                         profile=PROFILES["reckless"], p_heed_reflection=1.0)
    assert heeded.heeded and heeded.p_heed_reflection == 1.0
    assert max(s["speed"] for s in _states(heeded)[20:]) < 10.5 < max(s["speed"] for s in _states(free))
    allow = run_episode(random.Random(seed), _FixedSession(_Decision("allow", 0.0)), "stop",
                        profile=PROFILES["reckless"])
    assert allow.alarms == 0 and allow.first_alarm_t is None and _states(allow) == _states(free)


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="enforcement"):
        run_episode(random.Random(0), enforcement="brake")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="p_heed_reflection"):
        run_episode(random.Random(0), p_heed_reflection=1.5)
    with pytest.raises(ValueError, match="unknown driver profile 'racer'"):
        generate_traces(1, 0, tmp_path / "x.jsonl", profile_mix={"racer": 1.0})
    with pytest.raises(ValueError, match="n_runs"):
        generate_traces(0, 0, tmp_path / "x.jsonl")
