"""The shield (guard/shield.py through guard/judge.py's judge_call): it never lets through a move whose
risk from the run's state is at least θ, lets the others through, stops only where no move is under θ,
and names exactly the moves under θ, safest first; in thresholds mode the same advice is in words."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _shield_files import SHIELD_SPEC, files_state, learn_shield_model

from forewarn.guard import Guard, GuardModel
from forewarn.guard.judge import Why, judge_call
from forewarn.guard.mdp import ANY, END_CHOICE
from forewarn.guard.spec import Action

TOOLS = ("read_file", "delete_file", "write_file")  # write_file: a move no run made


@pytest.fixture(scope="module")
def shield_model(tmp_path_factory: pytest.TempPathFactory) -> GuardModel:
    model: GuardModel = learn_shield_model(tmp_path_factory.mktemp("shield"))
    return model


def _moves(model: GuardModel, state: int) -> list[tuple[str, float]]:
    mdp = model.mdp
    assert mdp is not None and mdp.risk is not None
    return [(mdp.classes[int(mdp.choice_class[c])], float(mdp.risk[c]))
            for c in range(int(mdp.choices[state]), int(mdp.choices[state + 1]))]


@pytest.mark.parametrize("theta", [0.002, 0.05, 0.5, 0.995, 1.0])
def test_the_shield_lets_through_exactly_the_moves_under_theta(shield_model: GuardModel, theta: float) -> None:
    spec = SHIELD_SPEC.replace("shield_theta: 0.5", f"shield_theta: {theta}")
    from forewarn.guard.model import GuardModel as Model
    from forewarn.guard.spec import parse_spec

    model = Model(parse_spec(spec), shield_model.dtmc, shield_model.properties, shield_model.pac,
                  shield_model.provenance, intervals=shield_model.intervals)
    model.mdp = shield_model.mdp
    guard = Guard(model)
    mdp = model.mdp
    assert mdp is not None and mdp.pmin is not None
    index = model.dtmc.index()
    judged = 0
    for deleted in (0, 1, 2):
        here = index[sum(1 << b for b in range(min(deleted, 3)))]
        moves = dict(_moves(model, here))
        for tool in TOOLS:
            session = guard.session()
            for n in range(deleted + 1):  # walk there: the shield judges from the last committed state
                session.observe(files_state(n), action=None if n == 0 else {"tool": "delete_file", "args": {}})
            verdict = judge_call(session, files_state(deleted), tool, {"path": "x"})
            decision, risk = verdict.decision, moves.get(tool)
            judged += 1
            assert decision.p_min == pytest.approx(mdp.pmin[here])
            under = sorted(((c, r) for c, r in moves.items() if c != ANY and r < theta), key=lambda m: (m[1], m[0]))
            assert [(a.action_class, a.risk) for a in decision.alternatives] == under  # exactly, safest first
            if mdp.pmin[here] >= theta:
                assert verdict.action is Action.STOP and verdict.why is Why.SHIELD
            elif risk is None:  # a move no run made from here: the guard's thresholds judge it
                assert verdict.why is not Why.SHIELD and decision.action_risk is None
            elif risk >= theta:
                assert verdict.action is Action.REFLECT and verdict.why is Why.SHIELD
                assert decision.action_risk == pytest.approx(risk)
            else:
                assert verdict.action is Action.ALLOW and verdict.why is Why.SHIELD
            if verdict.why is Why.SHIELD and verdict.action is Action.ALLOW:
                assert risk is not None and risk < theta  # never a move at or over θ
    assert judged == 9


def test_the_shields_words_name_the_move_and_the_safer_ones(shield_model: GuardModel) -> None:
    session = Guard(shield_model).session()
    session.observe(files_state(0))
    session.observe(files_state(1), action={"tool": "delete_file", "args": {"path": "a"}})
    blocked = judge_call(session, files_state(2), "delete_file", {"path": "b"})
    assert blocked.action is Action.REFLECT
    message = blocked.decision.message
    assert message.startswith("Shield (files): this call is blocked because its risk is at least 50%")
    assert "`delete_file` from here leads to a violation in 99% of runs [" in message
    assert "`read_file` keeps it at" in message and "ending the run here keeps it at 0%" in message
    document = blocked.decision.to_dict()
    assert document["proposed"]["action_class"] == "delete_file" and document["action_risk"] > 0.9
    assert [a["action_class"] for a in document["alternatives"]] == [END_CHOICE, "read_file"]


def test_thresholds_mode_says_the_advice_in_words(tmp_path: Path) -> None:
    spec = SHIELD_SPEC.replace("enforcement: shield", "enforcement: thresholds")
    model = learn_shield_model(tmp_path, spec)
    session = Guard(model).session()
    session.observe(files_state(0))
    session.observe(files_state(1), action={"tool": "delete_file", "args": {"path": "a"}})
    verdict = judge_call(session, files_state(2), "delete_file", {"path": "b"})
    assert verdict.action is Action.REFLECT and verdict.why is Why.GUARD  # the thresholds acted
    assert verdict.decision.message.startswith("Risk alert (files)")
    assert "`delete_file` from here leads to a violation in 99% of runs" in verdict.decision.message
    assert [a.action_class for a in verdict.decision.alternatives] == [END_CHOICE, "read_file", "delete_file"]
    read = judge_call(session, files_state(1), "read_file", {"path": "b"})
    assert read.action is Action.ALLOW and read.decision.action_risk is not None and read.decision.action_risk < 0.05


def test_a_model_without_an_mdp_decides_as_before(tmp_path: Path) -> None:
    model: Any = learn_shield_model(tmp_path, SHIELD_SPEC.replace("  mdp: true\n", ""))
    assert model.mdp is None
    session = Guard(model).session()
    session.observe(files_state(0))
    verdict = judge_call(session, files_state(1), "delete_file", {"path": "a"})
    assert verdict.why is not Why.SHIELD and verdict.decision.p_min is None and verdict.decision.alternatives == ()


def test_the_counterfactual_on_logged_runs(shield_model: GuardModel) -> None:
    from _shield_files import shield_runs

    from forewarn.guard.shield import shield_counterfactual
    from forewarn.guard.traces import Run

    runs = [Run(id=r["id"], steps=r["steps"], meta={}) for r in shield_runs()]
    seen = shield_counterfactual(Guard(shield_model), runs, 0.5)
    # the 40 runs that deleted three times are blocked at their second delete, before the violation; the
    # 160 others (reads, one delete) are never blocked
    assert (seen.runs, seen.unsafe_runs, seen.caught, seen.blocked_safe, seen.steps_left) == (200, 40, 40, 0, 0)
    assert seen.safe_steps == 80 * 3 + 60 * 3 + 20 * 3
    strict = shield_counterfactual(Guard(shield_model), runs, 0.001)  # θ below every risk of a delete or read
    assert strict.caught == 40 and strict.blocked_safe == 160 and strict.steps_left > 0


def test_replay_says_what_the_shield_would_have_blocked(tmp_path: Path) -> None:
    import subprocess
    import sys

    import orjson
    from _shield_files import shield_runs

    runs, spec = tmp_path / "runs.jsonl", tmp_path / "spec.yaml"
    runs.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in shield_runs()))
    spec.write_text(SHIELD_SPEC)

    def forewarn(*args: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "forewarn", *map(str, args)], cwd=tmp_path, text=True,
                              capture_output=True, timeout=180)

    assert forewarn("learn", runs, "--spec", spec, "-o", "m.json").returncode == 0
    answer = forewarn("replay", runs, "--model", "m.json", "--theta", "0.5", "--shield", "0.5", "--format", "json")
    assert answer.returncode == 0, answer.stderr
    shield = orjson.loads(answer.stdout)["shield"]
    assert (shield["runs"], shield["unsafe_runs"], shield["caught"], shield["blocked_safe"]) == (200, 40, 40, 0)
    table = forewarn("replay", runs, "--model", "m.json", "--shield", "0.5")
    assert table.returncode == 0 and "40 of the 40 runs that reached a violation would have been blocked" in \
        " ".join(table.stdout.split())
    plain = tmp_path / "plain.yaml"
    plain.write_text(SHIELD_SPEC.replace("  mdp: true\n", ""))
    assert forewarn("learn", runs, "--spec", plain, "-o", "plain.json").returncode == 0
    refused = forewarn("replay", runs, "--model", "plain.json", "--shield", "0.5")
    assert refused.returncode == 2 and "--shield needs a single model learned with --mdp" in refused.stderr
