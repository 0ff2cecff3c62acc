"""Per-member thresholds of a bundle: ``guard.member_thresholds``, chosen by ``tune --bundle-by``."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from _support import CLI, TOY_SPEC, WriteRuns, toy_run
from forewarn.errors import ModelFileError, SpecError
from forewarn.guard.bundle import GuardBundle, learn_bundle
from forewarn.guard.bundle_guard import BundleGuard
from forewarn.guard.evaluation.member_tune import write_member_thresholds
from forewarn.guard.policy import Policy
from forewarn.guard.spec import Action, Thresholds, Trigger, parse_spec
from forewarn.guard.thresholds import with_default_trigger

A = {"a": True, "b": 0}  # the toy's state 'a': risky in t1, harmless in t2

# t1: 'a' is risky (16 of 24 runs through it violate); t2: 'a' is harmless, 'b' is the risk
PATHS = {"t1": [[0, 1, 3]] * 16 + [[0, 1, 0]] * 8 + [[0, 2, 0]] * 6,
         "t2": [[0, 1, 0]] * 24 + [[0, 2, 3]] * 6,
         "t3": [[0, 1, 3]] * 2}  # too few runs for a model of its own

# the chain's own risks (their ranges below were read off it), not counting's, which shrink: auto may take
CHAIN = TOY_SPEC.replace("learning:\n", "learning:\n  shrink: 'off'\n")
OWN = CHAIN + """\
  member_thresholds:
    by: meta.task
    groups:
      t1: {thresholds: {reflect: 0.1, ask_human: 0.05, stop: 0.01}}
      t2: {thresholds: {reflect: 0.99, ask_human: 0.85}}
      t3: {thresholds: {reflect: 0.01, ask_human: 0.01, stop: 0.01}}
"""


def lines() -> list[dict[str, Any]]:
    return [{**toy_run(f"{task}-{i}", bits), "meta": {"task": task}}
            for task, paths in PATHS.items() for i, bits in enumerate(paths)]


@pytest.fixture
def runs_path(write_runs: WriteRuns) -> Path:
    return write_runs(lines(), name="tasks.jsonl")


def bundle_of(runs_path: Path, spec_text: str) -> GuardBundle:
    return learn_bundle([runs_path], parse_spec(spec_text), group_by="meta.task", min_group_runs=5)


def test_the_spec_reads_member_thresholds_over_the_guards() -> None:
    spec = parse_spec(OWN)
    guard = spec.guard
    assert guard.member_thresholds is not None and guard.member_thresholds.by == "meta.task"
    assert Policy.from_settings(guard, "t1").thresholds == Thresholds(reflect=0.1, ask_human=0.05, stop=0.01)
    # the actions a member leaves out are the guard's
    assert Policy.from_settings(guard, "t2").thresholds == Thresholds(reflect=0.99, ask_human=0.85, stop=0.2)
    assert Policy.from_settings(guard, "t9").thresholds == guard.thresholds == Policy.from_settings(guard).thresholds
    increase = parse_spec(TOY_SPEC.replace("  unseen_state", "  trigger: increase\n  min_increase: 0.1\n  unseen_state")
                          + "  member_thresholds: {by: meta.task, groups: {3: {thresholds: {}, min_increase: 0.02}}}\n")
    assert Policy.from_settings(increase.guard, "3").min_increase == 0.02  # a number key is the group "3"
    assert Policy.from_settings(increase.guard, "4").min_increase == 0.1


@pytest.mark.parametrize(("extra", "message"), [
    ("  member_thresholds: {by: task, groups: {}}\n", "expected the bundle's grouping key such as 'meta.task'"),
    ("  member_thresholds:\n    by: meta.task\n    groups:\n      t1: {thresholds: {reflect: 0.3}}\n",
     "toy.yaml:18: guard.member_thresholds.groups.t1.thresholds: reflect 0.3 is below ask_human 0.5"),
    ("  trigger: level\n  member_thresholds:\n    by: meta.task\n    groups:\n"
     "      t1: {thresholds: {}, min_increase: 0.1}\n", "'min_increase' applies to 'trigger: increase'"),
])
def test_bad_member_thresholds_are_one_line_naming_the_entry(extra: str, message: str) -> None:
    with pytest.raises(SpecError, match=r"^toy\.yaml") as caught:
        parse_spec(TOY_SPEC + extra, source="toy.yaml")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_each_member_decides_under_its_own_thresholds(runs_path: Path) -> None:
    plain = BundleGuard(bundle_of(runs_path, CHAIN))
    guard = BundleGuard(bundle_of(runs_path, OWN))
    t1, t2, t3 = ({"task": t} for t in ("t1", "t2", "t3"))
    # the same models: only the thresholds differ
    assert guard.session(metadata=t1).observe(A).p_unsafe == plain.session(metadata=t1).observe(A).p_unsafe
    risky = guard.session(metadata=t1).observe(A)
    assert risky.p_unsafe is not None and 0.8 < risky.p_unsafe < 0.9  # p_safe in (0.1, 0.2): stop when pooled
    assert plain.session(metadata=t1).observe(A).action is Action.STOP
    assert risky.action is Action.ALLOW  # t1's own reflect θ is 0.1
    harmless = guard.session(metadata=t2).observe(A)
    assert harmless.p_unsafe is not None and 0.15 < harmless.p_unsafe < 0.25  # p_safe in (0.75, 0.85)
    assert plain.session(metadata=t2).observe(A).action is Action.REFLECT
    assert (harmless.action, harmless.threshold) == (Action.ASK_HUMAN, 0.85)  # t2's own ask_human θ
    # t3 has no model of its own: the pooled model decides, under the guard's thresholds (not t3's entry)
    pooled = guard.session(metadata=t3).observe(A)
    assert pooled.fallback and pooled.action is plain.session(metadata=t3).observe(A).action
    assert guard.member_policy("t3") == guard.member_policy(None) == Policy.from_settings(guard.bundle.spec.guard)
    # a policy given to the bundle overrides every member's; a session's policy its member's
    calm = Policy(Thresholds(reflect=0.0), Action.ALLOW)
    assert guard.with_policy(calm).session(metadata=t2).observe(A).action is Action.ALLOW
    assert guard.session(calm, metadata=t2).observe(A).action is Action.ALLOW
    # the integrations' default trigger keeps each member's thresholds
    adjusted = guard.with_member_policies(lambda p: with_default_trigger(p, None))
    assert adjusted.member_policy("t2").thresholds.reflect == 0.99
    assert adjusted.member_policy("t2").trigger is Trigger.INCREASE


def test_a_bundle_without_member_thresholds_loads_as_before(runs_path: Path, tmp_path: Path) -> None:
    bundle = bundle_of(runs_path, TOY_SPEC)
    document = bundle.to_document()
    assert sorted(document) == ["checksum", "format", "group_by", "groups", "members", "min_group_runs", "pooled",
                                "provenance", "runs_without_group", "schema_version", "spec"]
    assert document["schema_version"] == 1 and "member_thresholds" not in document["spec"]
    loaded = BundleGuard.load(bundle.save(tmp_path / "old.json"))
    spec_policy = Policy.from_settings(loaded.bundle.spec.guard)
    assert all(loaded.member_policy(g) == spec_policy for g in [None, "t1", "t2", "t3"])
    assert all(loaded.member(g).policy == spec_policy for g in ["t1", "t2"])


def test_learn_refuses_member_thresholds_of_another_key(runs_path: Path, tmp_path: Path, forewarn_here: CLI) -> None:
    spec = tmp_path / "own.yaml"
    spec.write_text(OWN.replace("by: meta.task", "by: meta.team"), encoding="utf-8")
    result = forewarn_here("learn", runs_path, "--spec", spec, "-o", tmp_path / "b.json", "--group-by", "meta.task")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "own.yaml:" in result.stderr and "members by meta.team, but the bundle is grouped by meta.task" \
        in result.stderr
    single = forewarn_here("learn", runs_path, "--spec", spec, "-o", tmp_path / "m.json")
    assert single.returncode == 0 and "guard.member_thresholds apply to a bundle" in single.stderr
    # a bundle file whose spec's key disagrees with its grouping is refused on load
    document = bundle_of(runs_path, TOY_SPEC).to_document()
    document["spec"] = OWN.replace("by: meta.task", "by: meta.team")
    from forewarn.guard.bundle import _checksum

    document["checksum"] = _checksum(document)
    with pytest.raises(ModelFileError, match=r"members by meta\.team"):
        GuardBundle.from_document(document, source="b.json", trusted_keys=())


def test_write_member_thresholds_replaces_the_entry_and_keeps_the_rest() -> None:
    members = {"t1": (Thresholds(reflect=0.3, ask_human=0.2, stop=0.1), None), "a b": (Thresholds(reflect=0.7), 0.05)}
    text = TOY_SPEC.replace("guard:\n", "guard:  # keep me\n")
    once = write_member_thresholds(text, "meta.task", members)
    assert "guard:  # keep me\n  member_thresholds:" in once and once.endswith("  unseen_state: ask_human\n")
    spec = parse_spec(once.replace("  thresholds: {reflect: 0.9, ask_human: 0.5, stop: 0.2}\n",
                                   "  trigger: increase\n  thresholds: {reflect: 0.9, ask_human: 0.5, stop: 0.2}\n"))
    assert Policy.from_settings(spec.guard, "a b").thresholds == Thresholds(reflect=0.7, ask_human=0.5, stop=0.2)
    assert Policy.from_settings(spec.guard, "a b").min_increase == 0.05
    twice = write_member_thresholds(once, "meta.task", {"t2": (Thresholds(reflect=0.95), None)})
    assert '"t1"' not in twice and '"t2": {thresholds: {reflect: 0.95}}' in twice
    assert write_member_thresholds(twice, "meta.task", {}) == text  # none left: the entry goes
    flow = "name: x\npredicates: {a: 'state.a'}\nunsafe: a\nguard: {thresholds: {reflect: 0.9}}\n"
    written = parse_spec(write_member_thresholds(flow, "meta.k", {"g": (Thresholds(reflect=0.8), None)}))
    assert written.guard.member_thresholds is not None and "g" in written.guard.member_thresholds.groups


def test_tune_bundle_by_chooses_each_members_threshold_and_the_bundle_acts_on_it(
        runs_path: Path, toy_spec_path: Path, tmp_path: Path, forewarn_here: CLI) -> None:
    tuned = tmp_path / "tuned.yaml"
    result = forewarn_here("tune", runs_path, "--spec", toy_spec_path, "--target", "false-alarms=0.1", "--folds", "3",
                           "--bundle-by", "meta.task", "--min-group-runs", "5", "--trigger", "level",
                           "--enforcement", "observe", "-o", tuned, "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = result.json()
    assert isinstance(summary, dict)
    members = {m["group"]: m for m in summary["members"]}
    assert sorted(members) == ["t1", "t2"]  # t3's two runs never made a member in any fold
    own = {g: m["thresholds"]["reflect"] for g, m in members.items()}
    assert not members["t1"]["pooled"] and not members["t2"]["pooled"]
    assert own["t1"] < 0.5 < own["t2"]  # 'a' is risky in t1 (so θ must stay below it), harmless in t2
    assert members["t1"]["figures"]["false_alarm_rate"] <= 0.1 and members["t2"]["figures"]["false_alarm_rate"] <= 0.1
    assert summary["with_member_thresholds"]["reflect"]["false_alarms"] <= 0.1 * 38
    spec = parse_spec(tuned.read_text(encoding="utf-8"))
    assert spec.guard.member_thresholds is not None and spec.guard.member_thresholds.by == "meta.task"
    assert {g: m.thresholds.reflect for g, m in spec.guard.member_thresholds.groups.items()} == own
    learned = forewarn_here("learn", runs_path, "--spec", tuned, "-o", tmp_path / "b.json", "--group-by", "meta.task",
                            "--min-group-runs", "5", "--format", "json")
    assert learned.returncode == 0, learned.stderr
    described = learned.json()
    assert isinstance(described, dict)
    assert {m["group"]: m["own_thresholds"] for m in described["group_models"]} == {"t1": True, "t2": True}
    guard = BundleGuard.load(tmp_path / "b.json")
    for group in ("t1", "t2"):
        assert guard.member_policy(group).thresholds.reflect == own[group]
        # the member acts exactly where its own θ says: p_safe below it, and at no other θ
        decision = guard.session(metadata={"task": group}).observe(A)
        assert decision.p_unsafe is not None
        acts = 1 - decision.p_unsafe < own[group]
        assert (decision.action is not Action.ALLOW) is acts
    # the table says the same
    table = forewarn_here("tune", runs_path, "--spec", toy_spec_path, "--target", "false-alarms=0.1", "--folds", "3",
                          "--bundle-by", "meta.task", "--min-group-runs", "5", "--trigger", "level",
                          "--enforcement", "observe")
    assert table.returncode == 0, table.stderr
    text = " ".join(table.stdout.split())
    assert "2 of 2 members get thresholds of their own" in text and "keeps the pooled thresholds" not in text
    assert "reflect, every held-out run at its member's thresholds: warned ahead" in text
    few = forewarn_here("tune", runs_path, "--spec", toy_spec_path, "--target", "false-alarms=0.1", "--folds", "3",
                        "--bundle-by", "meta.task", "--min-group-runs", "5", "--group-by", "meta.task",
                        "--trigger", "level", "--format", "json")
    assert few.returncode == 0, few.stderr
    grouped = few.json()
    assert isinstance(grouped, dict) and grouped["members"] == []
    assert any("--group-by on the bundling key" in note for note in grouped["notes"])


def test_tune_falls_back_to_the_pooled_choice_and_says_why(write_runs: WriteRuns, toy_spec_path: Path,
                                                           forewarn_here: CLI) -> None:
    # t4: 7 runs, so some fold's training has too few for a member and fewer than 5 are replayed by one;
    # t5: every run violates, so no false-alarm rate can be measured on its runs
    runs = lines() + [{**toy_run(f"t4-{i}", [0, 1, 0] if i % 2 else [0, 2, 3]), "meta": {"task": "t4"}}
                      for i in range(7)] + [{**toy_run(f"t5-{i}", [0, 1, 3]), "meta": {"task": "t5"}} for i in range(12)]
    path = write_runs(runs, name="more.jsonl")
    args = ("tune", path, "--spec", toy_spec_path, "--target", "false-alarms=0.1", "--folds", "3", "--bundle-by",
            "meta.task", "--min-group-runs", "5", "--trigger", "level", "--enforcement", "observe")
    result = forewarn_here(*args, "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = result.json()
    assert isinstance(summary, dict)
    members = {m["group"]: m for m in summary["members"]}
    assert not members["t1"]["pooled"] and not members["t2"]["pooled"]
    t4, t5 = members["t4"], members["t5"]
    assert t4["pooled"] and t4["thresholds"] is None and t4["runs"] < 5
    assert t4["reason"] == f"{t4['runs']} held-out runs replayed by its own model, fewer than 5"
    assert t5["pooled"] and t5["runs"] == 12 and "no held-out run stays safe" in t5["reason"]
    table = forewarn_here(*args)
    text = " ".join(table.stdout.split())
    assert f"t4: keeps the pooled thresholds: {t4['runs']} held-out runs replayed by its own model, fewer than 5" \
        in text
    assert "t5: keeps the pooled thresholds: target false-alarms=0.1: no held-out run stays safe" in text
    assert "2 of 4 members get thresholds of their own" in text


def test_bundle_by_errors_name_the_option_and_every_run(runs_path: Path, toy_spec_path: Path,
                                                         forewarn_here: CLI) -> None:
    for command in ("tune", "evaluate"):
        extra = ("--target", "false-alarms=0.1") if command == "tune" else ()
        bad = forewarn_here(command, runs_path, "--spec", toy_spec_path, *extra, "--bundle-by", "task")
        assert bad.returncode == 2 and bad.stderr.startswith("error: --bundle-by 'task': expected a path")
        absent = forewarn_here(command, runs_path, "--spec", toy_spec_path, *extra, "--bundle-by", "meta.team",
                               "--folds", "3")
        assert absent.returncode == 2, absent.stderr
        assert "--bundle-by meta.team: none of the 62 runs has it in its metadata (keys the runs have: meta.task)" \
            in absent.stderr


def test_states_shows_each_members_own_thresholds_and_actions(runs_path: Path, tmp_path: Path,
                                                               forewarn_here: CLI) -> None:
    path = bundle_of(runs_path, OWN).save(tmp_path / "own.json")
    shown = forewarn_here("states", path, "--format", "json")
    assert shown.returncode == 0, shown.stderr
    document = shown.json()
    assert isinstance(document, dict)
    members = document["members"]
    assert members["t2"]["thresholds"] == {"reflect": 0.99, "ask_human": 0.85, "stop": 0.2}
    assert members["pooled"]["thresholds"] == {"reflect": 0.9, "ask_human": 0.5, "stop": 0.2}
    guard = BundleGuard.load(path)
    for name in ("t1", "t2"):
        row = next(r for r in members[name]["states"] if r["predicates"] == {"a": True, "b": False})
        assert row["action"] == guard.session(metadata={"task": name}).observe(A).action.value
    assert "t2: " in forewarn_here("states", path, "--group", "t2").stdout


def test_tune_says_when_no_member_got_thresholds_of_its_own(runs_path: Path, toy_spec_path: Path, tmp_path: Path,
                                                              forewarn_here: CLI) -> None:
    """Issue 38: with too few runs per member, tune said "each member decides under its own thresholds"
    though none had any; it now says what the written spec does."""
    common = ("--spec", toy_spec_path, "--target", "false-alarms=0.1", "--folds", "3", "--bundle-by", "meta.task",
              "--trigger", "level", "--enforcement", "observe")
    none = forewarn_here("tune", runs_path, *common, "--min-group-runs", "1000", "-o", tmp_path / "none.yaml")
    assert none.returncode == 0, none.stderr
    said = " ".join(none.stderr.split())
    assert "no member of meta.task got thresholds of its own" in said and "its own thresholds" not in said
    some = forewarn_here("tune", runs_path, *common, "--min-group-runs", "5", "-o", tmp_path / "some.yaml")
    assert some.returncode == 0, some.stderr
    assert "2 of 2 members decide under thresholds of their own" in " ".join(some.stderr.split())
