"""``forewarn tune``: exact threshold choices, targets met on the held-out runs, the spec written back."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from _eval_support import assert_user_error
from _support import AB, CLI, NONE, TOY_SPEC, A, B, toy_run
from forewarn.errors import ForewarnError
from forewarn.guard.evaluation.evaluate import evaluate
from forewarn.guard.evaluation.tune import (
    Target,
    TargetUnreachable,
    choose_min_increase,
    choose_theta,
    parse_target,
    write_min_increase,
    write_thresholds,
)
from forewarn.guard.pipeline import learn_model
from forewarn.guard.replay import RunReplay, replay, summarize
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import Action, Thresholds, load_spec, parse_spec
from forewarn.guard.traces import read_runs

# A toy chain: from NONE a run drifts to A (risky) or B (mostly harmless); from A it often violates.
MOVES = {NONE: [(NONE, 0.6), (A, 0.1), (B, 0.3)], A: [(AB, 0.6), (NONE, 0.2), (A, 0.2)],
         B: [(B, 0.5), (NONE, 0.45), (AB, 0.05)]}


def generated_runs(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    runs = []
    for k in range(n):
        bits = [AB if k % 25 == 0 else NONE]  # a few violate at once: no θ can warn of those
        while len(bits) < 8 and bits[-1] != AB:
            targets, weights = zip(*MOVES[bits[-1]])
            bits.append(rng.choices(targets, weights)[0])
        line = toy_run(f"g{k}", bits, times=[float(i) for i in range(len(bits))])
        line["meta"] = {"task": f"t{k % 12}"}
        runs.append(line)
    return runs


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("tune")
    traces = root / "runs.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps(r) for r in generated_runs(150, seed=5)) + b"\n")
    spec = root / "toy.yaml"
    spec.write_text("# the toy spec, tuned\n" + TOY_SPEC.replace("  unseen_state: ask_human\n",
                                                                 "  unseen_state: ask_human  # keep\n"))
    return traces, spec


def replays(*runs: tuple[list[float | None], int | None]) -> list[RunReplay]:
    return [RunReplay(f"r{i}", p, v, [None] * len(p)) for i, (p, v) in enumerate(runs)]


def test_parse_target() -> None:
    assert parse_target("false-alarms=0.05") == Target("false-alarms", 0.05)
    assert parse_target(" stop:detection = 0.9 ") == Target("detection", 0.9, Action.STOP)
    assert parse_target("warned-ahead=0.5") == Target("warned-ahead", 0.5)
    assert "warnings ahead" in parse_target("false-alarms=0.05").aim
    for bad, message in [("false-alarms", "expected [ACTION:]false-alarms=X"),
                         ("recall=0.9", "expected [ACTION:]false-alarms=X"),
                         ("detection=high", "'high' is not a number"),
                         ("detection=1", "1 is not in (0, 1)"), ("false-alarms=0", "0 is not in (0, 1)"),
                         ("detection=nan", "nan is not in (0, 1)"), ("detection=-0.5", "-0.5 is not in (0, 1)"),
                         ("panic:detection=0.5", "unknown action 'panic'")]:
        with pytest.raises(ForewarnError) as error:
            parse_target(bad)
        assert str(error.value).startswith(f"--target {bad!r}: ") and message in str(error.value)


def test_theta_is_read_off_the_runs_exactly() -> None:
    # safe runs' lowest p_safe: 0.9, 0.8, 0.6, 0.3; violating runs' (before the violation): 0.7, 0.5, 0.2
    runs = replays(([0.1], None), ([0.2], None), ([0.1, 0.4], None), ([0.7], None),
                   ([0.3, 1.0], 1), ([0.5, 1.0], 1), ([0.8, 1.0], 1))
    def theta(target: str) -> float:
        return choose_theta(runs, parse_target(target), unseen_alarms=True, lookahead=False)
    assert theta("false-alarms=0.25") == 0.6  # flags 0.3 only: 1 of 4
    assert theta("false-alarms=0.1") == 0.3  # flags none
    assert theta("false-alarms=0.99") == 0.9  # 3 of 4: anything up to the highest minimum
    assert theta("detection=0.6") == 0.500001  # 2 of 3 need θ above 0.5
    assert theta("detection=0.3") == 0.2  # above 1 − 0.8 = 0.19999999999999996, as replay computes it
    report = summarize(runs, [0.6, 0.500001], unseen_alarms=True, enforcement="observe")
    assert [(t.false_alarm_rate, t.detection_rate) for t in report.thetas] == [(0.25, 2 / 3), (0.25, 2 / 3)]
    # under look-ahead the violating step (p_safe 0) acts too: every violation is caught at any θ > 0
    assert choose_theta(runs, parse_target("detection=0.99"), unseen_alarms=True, lookahead=True) == 0.000001
    # ... but a warning ahead of the violating step still needs θ above the lowest p_safe before it
    def ahead(target: str) -> float:
        return choose_theta(runs, parse_target(target), unseen_alarms=True, lookahead=True)
    assert ahead("warned-ahead=0.6") == theta("detection=0.6") == 0.500001
    assert ahead("warned-ahead=0.99") == 0.700001  # above the highest minimum, 0.7
    # a replay under look-ahead scores what the middleware does: the run's first state (before any
    # call) never alarms, so these runs, which violate at their second step, can only be blocked there
    # (tune applies the same rule before choose_theta: RunReplay.under_trigger(acts_on_start=False))
    at = summarize(runs, [0.000001, 0.500001], unseen_alarms=True, enforcement="lookahead").thetas
    assert [(t.warned_ahead, t.blocked_at_step) for t in at] == [(0, 3), (0, 3)]


def test_unreachable_targets_name_the_closest() -> None:
    never = replays(([0.0, 0.0], 1), ([0.3, 1.0], 1), ([0.0], None), ([None], None))
    with pytest.raises(TargetUnreachable, match=r"target detection=0.9: no θ reaches it; the most is detection "
                                                r"50.0% \(1 of 2 violating runs\) at θ = 1, with 50.0% false alarms"):
        choose_theta(never, parse_target("detection=0.9"), unseen_alarms=True, lookahead=False)
    with pytest.raises(TargetUnreachable, match=r"target false-alarms=0.4: no θ reaches it; the fewest false "
                                                r"alarms are 50.0% \(1 of 2 safe runs\) at θ = 0"):
        choose_theta(never, parse_target("false-alarms=0.4"), unseen_alarms=True, lookahead=False)


def test_tune_meets_the_target_on_the_held_out_runs(generated: tuple[Path, Path], forewarn_here: CLI,
                                                    tmp_path: Path) -> None:
    traces, spec_path = generated
    out = tmp_path / "tuned.yaml"
    result = forewarn_here("tune", traces, "--spec", spec_path, "--target", "false-alarms=0.1",
                           "--target", "stop:false-alarms=0.02", "--folds", "3", "--group-by", "meta.task",
                           "--enforcement", "observe", "-o", out, "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = result.json()
    assert isinstance(summary, dict)
    chosen = summary["thresholds"]
    assert chosen["reflect"] >= chosen["ask_human"] >= chosen["stop"]
    assert [a["target"] for a in summary["actions"]] == ["false-alarms=0.1", None, "stop:false-alarms=0.02"]
    # the same cross-validation, scored at the chosen θs, meets the targets and gives the printed figures
    spec = load_spec(spec_path)
    runs = list(read_runs(traces))
    cv = evaluate(runs, spec, [chosen["reflect"], chosen["stop"]], folds=3, group_by="meta.task",
                  enforcement="observe")
    reflect, stop = cv.pooled.thetas
    assert reflect.false_alarm_rate is not None and stop.false_alarm_rate is not None
    assert reflect.detection_rate is not None
    assert reflect.false_alarm_rate <= 0.1 and stop.false_alarm_rate <= 0.02
    assert summary["actions"][0]["figures"]["false_alarm_rate"] == reflect.false_alarm_rate
    assert summary["actions"][0]["figures"]["detection_rate"] == reflect.detection_rate > 0
    assert summary["actions"][0]["figures"]["warned_ahead_rate"] == reflect.warned_ahead_rate
    assert summary["actions"][0]["figures"]["blocked_at_step_rate"] == 0  # observe: nothing is blocked at the step
    assert summary["actions"][0]["aim"].startswith("the most warnings ahead")
    # the largest such θ: a little more flags another safe run
    more = evaluate(runs, spec, [chosen["reflect"] + 0.02], folds=3, group_by="meta.task", enforcement="observe")
    assert more.pooled.thetas[0].false_alarms > reflect.false_alarms
    # the copy keeps the rest of the YAML, comments included, loads and learns
    written = out.read_text()
    assert written.startswith("# the toy spec, tuned\n") and "  unseen_state: ask_human  # keep\n" in written
    assert written.replace(f"{{reflect: {chosen['reflect']!r}, ask_human: {chosen['ask_human']!r}, "
                           f"stop: {chosen['stop']!r}}}", "{reflect: 0.9, ask_human: 0.5, stop: 0.2}") \
        == spec_path.read_text()
    tuned = load_spec(out)
    assert tuned.guard.thresholds == Thresholds(**chosen)
    assert learn_model([traces], tuned).spec.guard.thresholds.reflect == chosen["reflect"]


def test_tune_table_and_unreachable_target(generated: tuple[Path, Path], forewarn_here: CLI) -> None:
    traces, spec_path = generated
    table = forewarn_here("tune", traces, "--spec", spec_path, "--target", "detection=0.8", "--folds", "3")
    assert table.returncode == 0, table.stderr
    assert "lookahead enforcement" in " ".join(table.stdout.split()) and "kept" in table.stdout
    assert "pass -o SPEC_OUT" in table.stderr
    flat = " ".join(table.stdout.split())
    assert "blocked" in flat and "over folds warned ahead" in flat
    assert "reflect: detection=0.8 targets the fewest false alarms detecting at least 80.0%" in flat
    unreachable = forewarn_here("tune", traces, "--spec", spec_path, "--target", "detection=0.99", "--folds", "3",
                                "--enforcement", "observe")
    assert_user_error(unreachable, "target detection=0.99: no θ reaches it; the most is detection")


@pytest.mark.parametrize(("args", "fragments"), [
    (["--target", "false-alarms=1.5"], ["--target 'false-alarms=1.5': 1.5 is not in (0, 1)"]),
    (["--target", "fa=0.1"], ["--target 'fa=0.1': expected [ACTION:]false-alarms=X"]),
    (["--target", "detection=0.5", "--enforcement", "sometimes"],
     ["--enforcement: expected 'lookahead' or 'observe', got 'sometimes'"]),
    (["--target", "false-alarms=0.1", "--target", "reflect:detection=0.5"], ["two targets for reflect"]),
    (["--target", "false-alarms=0.1", "--trigger", "rising"],
     ["--trigger: expected 'level' or 'increase', got 'rising'"]),
])
def test_tune_bad_input(generated: tuple[Path, Path], forewarn_here: CLI, args: list[str],
                        fragments: list[str]) -> None:
    traces, spec_path = generated
    assert_user_error(forewarn_here("tune", traces, "--spec", spec_path, *args), *fragments)


@pytest.mark.parametrize("command", ["replay", "evaluate"])
def test_unknown_enforcement_is_one_line(generated: tuple[Path, Path], forewarn_here: CLI, tmp_path: Path,
                                         command: str) -> None:
    traces, spec_path = generated
    source = ["--model", learn_model([traces], load_spec(spec_path)).save(tmp_path / "m.json")] \
        if command == "replay" else ["--spec", spec_path]
    assert_user_error(forewarn_here(command, traces, *source, "--enforcement", "preview"),
                      "--enforcement: expected 'lookahead' or 'observe', got 'preview'")


@pytest.mark.parametrize("mode", ["lookahead", "observe"])
def test_evaluate_and_replay_agree_for_the_same_mode(generated: tuple[Path, Path], mode: str) -> None:
    traces, spec_path = generated
    spec, runs = load_spec(spec_path), list(read_runs(traces))
    cv = evaluate(runs, spec, [0.5, 0.8], folds=3, group_by="meta.task", enforcement=mode)
    for fold in cv.folds:
        test_ids = {r.id for r in fold.report.replays}
        train = [r for r in runs if r.id not in test_ids]
        from forewarn.guard.pipeline import learn_model_from_runs

        guard = Guard(learn_model_from_runs(train, spec))
        again = replay(guard, [r for r in runs if r.id in test_ids], [0.5, 0.8], enforcement=mode)
        assert again.thetas == fold.report.thetas


@pytest.mark.parametrize(("text", "expected"), [
    ("predicates: {a: state.a}\nunsafe: a\nguard:\n  thresholds: {reflect: 0.9}  # old\n",
     "predicates: {a: state.a}\nunsafe: a\nguard:\n  thresholds: {reflect: 0.7, stop: 0.1}  # old\n"),
    ("predicates: {a: state.a}\nunsafe: a\nguard:\n  # the policy\n  thresholds:\n    reflect: 0.9  # r\n"
     "    ask_human:\n  unseen_state: stop\n",
     "predicates: {a: state.a}\nunsafe: a\nguard:\n  # the policy\n  thresholds:\n    reflect: 0.7  # r\n"
     "    ask_human: null\n    stop: 0.1\n  unseen_state: stop\n"),
    ("predicates: {a: state.a}\nunsafe: a\nguard:\n  unseen_state: stop\n",
     "predicates: {a: state.a}\nunsafe: a\nguard:\n  thresholds: {reflect: 0.7, stop: 0.1}\n  unseen_state: stop\n"),
    ("predicates: {a: state.a}\nunsafe: a  # no guard\n",
     "predicates: {a: state.a}\nunsafe: a  # no guard\nguard:\n  thresholds: {reflect: 0.7, stop: 0.1}\n"),
    ("predicates: {a: state.a}\nunsafe: a\nguard:\n  thresholds:\n  unseen_state: stop\n",
     "predicates: {a: state.a}\nunsafe: a\nguard:\n  thresholds: {reflect: 0.7, stop: 0.1}\n  unseen_state: stop\n"),
    ("predicates: {a: state.a}\nguard:\nunsafe: a\n",
     "predicates: {a: state.a}\nguard:\n  thresholds: {reflect: 0.7, stop: 0.1}\nunsafe: a\n"),
    ("predicates: {a: state.a}\nunsafe: a\nguard: {unseen_state: stop}\n",
     "predicates: {a: state.a}\nunsafe: a\nguard: {unseen_state: stop, thresholds: {reflect: 0.7, stop: 0.1}}\n"),
])
def test_write_thresholds_keeps_the_rest(text: str, expected: str) -> None:
    written = write_thresholds(text, Thresholds(reflect=0.7, stop=0.1))
    assert written == expected
    assert parse_spec(written).guard.thresholds == Thresholds(reflect=0.7, stop=0.1)


def test_tune_under_the_increase_trigger(generated: tuple[Path, Path], forewarn_here: CLI, tmp_path: Path) -> None:
    traces, spec_path = generated
    out = tmp_path / "tuned.yaml"
    result = forewarn_here("tune", traces, "--spec", spec_path, "--target", "false-alarms=0.1", "--folds", "3",
                           "--trigger", "increase", "--format", "json", "-o", out)
    assert result.returncode == 0, result.stderr
    summary = result.json()
    assert isinstance(summary, dict) and summary["trigger"] == "increase"
    theta, min_increase = summary["thresholds"]["reflect"], summary["min_increase"]
    assert min_increase is not None  # tuned with θ, and written with the thresholds
    written = load_spec(out).guard
    assert written.trigger is not None
    assert (written.trigger.value, written.min_increase, written.thresholds.reflect) == ("increase", min_increase,
                                                                                         theta)
    spec = load_spec(spec_path)
    spec = spec.model_copy(update={"guard": spec.guard.model_copy(update={"min_increase": min_increase})})
    cv = evaluate(list(read_runs(traces)), spec, [theta], folds=3, trigger="increase")
    false_alarm_rate = cv.pooled.thetas[0].false_alarm_rate
    assert cv.pooled.trigger == "increase" and false_alarm_rate is not None and false_alarm_rate <= 0.1
    assert summary["actions"][0]["figures"]["detection_rate"] == cv.pooled.thetas[0].detection_rate


def test_tune_per_member_with_bundle_by(generated: tuple[Path, Path], forewarn_here: CLI, tmp_path: Path) -> None:
    traces, spec_path = generated
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(traces.read_bytes() + b"{not json\n")
    result = forewarn_here("tune", bad, "--spec", spec_path, "--target", "false-alarms=0.2", "--folds", "3",
                           "--bundle-by", "meta.task", "--min-group-runs", "5", "--on-error", "skip",
                           "--trigger", "level", "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = result.json()
    assert isinstance(summary, dict)
    assert summary["bundle_by"] == "meta.task" and summary["runs"] == 150
    assert "skipped 1" in result.stderr  # the malformed line, counted and named
    # the same cross-validation of bundles, scored at the chosen θ, meets the target
    cv = evaluate(list(read_runs(traces)), load_spec(spec_path), [summary["thresholds"]["reflect"]], folds=3,
                  bundle_by="meta.task", min_group_runs=5)
    false_alarm_rate = cv.pooled.thetas[0].false_alarm_rate
    assert false_alarm_rate is not None and false_alarm_rate <= 0.2
    assert summary["actions"][0]["figures"]["warned_ahead_rate"] == cv.pooled.thetas[0].warned_ahead_rate
    assert any("counted per member" in note for note in cv.notes)
    stopped = forewarn_here("tune", bad, "--spec", spec_path, "--target", "false-alarms=0.2", "--folds", "3")
    assert stopped.returncode == 2 and "bad.jsonl:151" in stopped.stderr


def test_min_increase_is_tuned_with_theta() -> None:
    # a safe run whose risk creeps up by 0.04 to p_safe 0.36; a violating run that jumps by 0.4 to p_safe 0.5
    safe = RunReplay("s", [0.6, 0.64], None, [None] * 2, start_risk=0.6)
    unsafe = RunReplay("u", [0.1, 0.5, 1.0], 2, [None] * 3, start_risk=0.1)
    target = Target("false-alarms", 0.01)
    # min_increase 0 must keep θ at 0.36 (the creep would alarm) and so misses the jump; 0.05 quiets the creep
    assert choose_theta([r.under_trigger(0.0) for r in (safe, unsafe)], target, unseen_alarms=True,
                        lookahead=False) == 0.36
    assert choose_min_increase([safe, unsafe], target, unseen_alarms=True, lookahead=False) == (0.05, 1.0)


def test_write_min_increase_keeps_the_rest() -> None:
    text = "name: x  # keep\nguard:\n  thresholds: {reflect: 0.9}\n  trigger: level\npredicates: {a: 'true'}\n"
    assert write_min_increase(text, 0.05) == ("name: x  # keep\nguard:\n  min_increase: 0.05\n"
                                              "  thresholds: {reflect: 0.9}\n  trigger: increase\n"
                                              "predicates: {a: 'true'}\n")
    flow = "guard: {thresholds: {reflect: 0.9}}\n"
    assert write_min_increase(flow, 0.1) == ("guard: {thresholds: {reflect: 0.9}, trigger: increase, "
                                             "min_increase: 0.1}\n")
