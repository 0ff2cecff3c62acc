"""Model bundles: one model per group of runs with enough of them, a pooled model for the rest."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson
import pytest

from _support import CLI, TOY_SPEC, WriteRuns, toy_run
from forewarn.errors import ForewarnError, ModelFileError, ThresholdWarning
from forewarn.guard.bundle import POOLED, GuardBundle, group_value, learn_bundle, learn_bundle_from_runs
from forewarn.guard.bundle_guard import BundleGuard, load_guard
from forewarn.guard.pipeline import learn_model_from_runs
from forewarn.guard.replay import replay, replay_run
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import parse_spec
from forewarn.guard.traces import parse_run

# Toy abstract states: 0 none, 1 a, 2 b, 3 a&b (unsafe).
RISKY_T1 = [[0, 1, 3]] * 7 + [[0, 1, 0]] * 5  # task t1: 'a' usually leads to the violation
SAFE_T2 = [[0, 1, 0]] * 9 + [[0, 2, 3]]  # task t2: 'a' is harmless
FEW_T3 = [[0, 1, 3]] * 2  # task t3: too few runs for a model of its own
NO_KEY = [[0, 2, 0]] * 3  # runs without meta.task


def lines() -> list[dict[str, Any]]:
    out = []
    for task, runs in (("t1", RISKY_T1), ("t2", SAFE_T2), ("t3", FEW_T3), (None, NO_KEY)):
        for i, bits in enumerate(runs):
            run = toy_run(f"{task}-{i}", bits)
            run["meta"] = {"task": task, "team": "x"} if task else {"team": "x"}
            out.append(run)
    return out


@pytest.fixture
def grouped(write_runs: WriteRuns, toy_spec_path: Path) -> tuple[Path, Path]:
    return write_runs(lines(), name="grouped.jsonl"), toy_spec_path


@pytest.fixture
def bundle(grouped: tuple[Path, Path]) -> GuardBundle:
    return learn_bundle([grouped[0]], parse_spec(TOY_SPEC), group_by="meta.task", min_group_runs=5)


def runs_of(task: str | None) -> list[Any]:
    return [parse_run(orjson.dumps(r)) for r in lines() if r["meta"].get("task") == task]


def test_one_model_per_group_with_enough_runs_and_a_pooled_one(bundle: GuardBundle) -> None:
    assert sorted(bundle.members) == ["t1", "t2"]  # t3 has 2 runs < 5
    assert bundle.group_runs == {"t1": 12, "t2": 10, "t3": 2}
    assert bundle.runs_without_group == 3
    assert bundle.pooled.provenance["runs"] == 27  # every run, with or without the key
    assert bundle.members["t1"].provenance["runs"] == 12
    assert bundle.members["t1"].provenance["unsafe_runs"] == 7
    # a member is exactly the model learned from its group's runs alone
    alone = learn_model_from_runs(runs_of("t1"), parse_spec(TOY_SPEC))
    member = bundle.members["t1"]
    assert member.dtmc.states == alone.dtmc.states
    assert (member.dtmc.counts != alone.dtmc.counts).nnz == 0
    assert member.outcome.values.tolist() == alone.outcome.values.tolist()
    pooled_alone = learn_model_from_runs([parse_run(orjson.dumps(r)) for r in lines()], parse_spec(TOY_SPEC))
    assert bundle.pooled.outcome.values.tolist() == pooled_alone.outcome.values.tolist()


def test_a_session_takes_its_groups_model_and_falls_back_saying_so(bundle: GuardBundle) -> None:
    guard = BundleGuard(bundle)
    a = {"a": True, "b": 0}
    t1 = guard.session(metadata={"task": "t1"}).observe(a)
    alone = Guard(bundle.members["t1"]).decide(a)
    assert (t1.member, t1.group, t1.fallback) == ("t1", "t1", False)
    assert t1.p_unsafe == alone.p_unsafe and t1.action is alone.action
    t2 = guard.session(metadata={"task": "t2"}).observe(a)
    assert t2.member == "t2" and t2.p_unsafe is not None and t1.p_unsafe is not None and t2.p_unsafe < t1.p_unsafe
    pooled = Guard(bundle.pooled).decide(a)
    # a group with too few runs: the pooled model, and the decision says why
    t3 = guard.session(metadata={"task": "t3"}).observe(a)
    assert (t3.member, t3.group, t3.fallback) == (POOLED, "t3", True)
    assert t3.p_unsafe == pooled.p_unsafe
    assert t3.message.endswith("(meta.task = 't3' had 2 runs in learning, fewer than 5: the pooled model decided.)")
    # a session without the grouping key
    bare = guard.session(metadata={"team": "x"}).observe(a)
    assert (bare.member, bare.group, bare.fallback) == (POOLED, None, True)
    assert bare.message.endswith("(The run's metadata has no meta.task: the pooled model decided.)")
    assert guard.session().observe(a).fallback  # no metadata at all
    never = guard.session(metadata={"task": "t9"}).observe(a)
    assert never.fallback and "was never seen in learning" in never.message
    # a policy for one session applies to its member
    from forewarn.guard.policy import Policy
    from forewarn.guard.spec import Action, Thresholds

    calm = Policy(Thresholds(reflect=0.0), Action.ALLOW)
    assert guard.session(calm, metadata={"task": "t1"}).observe(a).action is Action.ALLOW
    assert guard.with_policy(calm).decide(a, {"task": "t1"}).member == "t1"
    # the override every member decides under (what the Spark replay ships to its workers); none by default
    assert guard.with_policy(calm).policy_override == calm and guard.policy_override is None


def test_group_values_are_text() -> None:
    assert group_value({"task": "t1"}, ("task",)) == "t1"
    assert group_value({"task": 3}, ("task",)) == "3"
    assert group_value({"task": True}, ("task",)) == "true"
    assert group_value({"task": {"b": 1, "a": 2}}, ("task",)) == '{"a":2,"b":1}'
    assert group_value({"task": None}, ("task",)) is None
    assert group_value({"t": {"k": "v"}}, ("t", "k")) == "v"
    assert group_value(None, ("task",)) is None


def test_the_bundle_file_round_trips_as_one_file(bundle: GuardBundle, tmp_path: Path) -> None:
    path = bundle.save(tmp_path / "bundle.json")
    document = orjson.loads(path.read_bytes())
    assert document["format"] == "forewarn-bundle"
    assert "spec" not in document["pooled"] and all("spec" not in m for m in document["members"].values())
    loaded = GuardBundle.load(path)
    assert sorted(loaded.members) == ["t1", "t2"] and loaded.group_runs == bundle.group_runs
    assert loaded.members["t1"].spec is loaded.pooled.spec  # one spec shared by every member
    guard = load_guard(path)
    assert isinstance(guard, BundleGuard)
    assert guard.member("t1").predicates is guard.member("t2").predicates is guard.pooled.predicates
    a = {"a": True, "b": 0}
    assert guard.decide(a, {"task": "t1"}).p_unsafe == BundleGuard(bundle).decide(a, {"task": "t1"}).p_unsafe
    # p_safe at the start as the default learning stores it (shrink: auto may take counting's per-visit share)
    single = load_guard(bundle.pooled.save(tmp_path / "single.json"))
    assert isinstance(single, Guard)
    start = 1.0 - bundle.pooled.outcome.values[bundle.pooled.dtmc.states.index(0)]
    with pytest.warns(ThresholdWarning, match=rf"^reflect θ 0.9 > p_safe {start:.2f} at the start"):  # as Guard.load's
        single.session()
    with pytest.raises(ModelFileError, match="a single model, not a bundle"):
        GuardBundle.load(tmp_path / "single.json")


def test_replay_takes_each_runs_member(bundle: GuardBundle) -> None:
    guard = BundleGuard(bundle)
    for task, member in (("t1", Guard(bundle.members["t1"])), ("t3", Guard(bundle.pooled)),
                         (None, Guard(bundle.pooled))):
        for run in runs_of(task):
            assert replay_run(guard, run).p_unsafe == replay_run(member, run).p_unsafe
    report = replay(guard, [parse_run(orjson.dumps(r)) for r in lines()], [0.5])
    assert report.runs == 27


# -- the command line ---------------------------------------------------------------------


def test_learn_group_by_writes_a_bundle_that_the_commands_accept(grouped: tuple[Path, Path], forewarn_here: CLI,
                                                                  tmp_path: Path) -> None:
    traces, spec = grouped
    out = tmp_path / "bundle.json"
    result = forewarn_here("learn", traces, "--spec", spec, "-o", out, "--group-by", "meta.task",
                           "--min-group-runs", "5", "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = result.json()
    assert isinstance(summary, dict)
    assert (summary["members"], summary["groups"], summary["small_groups"], summary["runs_without_group"]) == \
        (2, 3, 1, 3)
    assert summary["groups_without_model"] == {"t3": 2}
    checked = forewarn_here("check", out, "--format", "json")
    assert checked.returncode == 0, checked.stderr
    members = checked.json()["members"]
    assert list(members) == [POOLED, "t1", "t2"]
    bundle = GuardBundle.load(out)
    assert [s["value"] for s in members["t1"]["states"]] == bundle.members["t1"].outcome.values.tolist()
    one = forewarn_here("check", out, "--group", "t2", "--format", "json").json()
    assert isinstance(one, dict) and list(one["members"]) == ["t2"]
    replayed = forewarn_here("replay", traces, "--model", out, "--theta", "0.5", "--format", "json")
    assert replayed.returncode == 0, replayed.stderr
    expected = replay(BundleGuard(bundle), [parse_run(orjson.dumps(r)) for r in lines()], [0.5])
    entry = replayed.json()[0]
    assert entry["detection_rate"] == expected.thetas[0].detection_rate
    assert math.isclose(entry["brier"], expected.brier or 0.0)
    # the baseline beside a bundle is counted per member, as the bundle's models were learned
    from forewarn.guard.evaluation.baselines import EMPIRICAL, score_baselines

    guard = BundleGuard(bundle)
    matched = score_baselines(expected.replays, [0.5], predicates=guard.predicates, monitors=guard.monitors,
                              member_of=lambda r: guard.member_name(r.meta))[EMPIRICAL]
    assert entry["baselines"][EMPIRICAL]["brier"] == matched.brier
    table = forewarn_here("replay", traces, "--model", out, "--theta", "0.5")
    assert "counted per member" in " ".join(table.stdout.split())


@pytest.mark.parametrize(("args", "message"), [
    (["--group-by", "task"], "--group-by 'task': expected a path into the runs' metadata such as 'meta.task'"),
    (["--group-by", "meta."], "it must start with 'meta.'"),
    (["--group-by", "meta.colour"], "--group-by meta.colour: none of the 27 runs has it in its metadata "
                                    "(keys the runs have: meta.task, meta.team)"),
    (["--group-by", "meta.task", "--min-group-runs", "0"], "--min-group-runs 0: expected a whole number"),
])
def test_bad_grouping_is_one_line_and_exit_2(grouped: tuple[Path, Path], forewarn_here: CLI, tmp_path: Path,
                                             args: list[str], message: str) -> None:
    traces, spec = grouped
    result = forewarn_here("learn", traces, "--spec", spec, "-o", tmp_path / "b.json", *args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert message in result.stderr
    assert not (tmp_path / "b.json").exists()


def _tamper_value(document: dict[str, Any]) -> None:
    document["members"]["t1"]["properties"][0]["values"][0] = 0.0


def _tamper_and_reseal(document: dict[str, Any]) -> None:
    from forewarn.guard.bundle import _checksum

    _tamper_value(document)
    document["checksum"] = _checksum(document)  # the bundle's seal redone: the member's own still fails


def _drop_member(document: dict[str, Any]) -> None:
    from forewarn.guard.bundle import _checksum

    del document["members"]["t2"]
    document["checksum"] = _checksum(document)


@pytest.mark.parametrize(("edit", "message"), [
    (_tamper_value, "checksum mismatch: the bundle was modified after Forewarn wrote it"),
    (_tamper_and_reseal, "member 't1': checksum mismatch"),
    (_drop_member, "'groups' and 'members' disagree"),
])
def test_a_tampered_bundle_is_refused_in_one_line(bundle: GuardBundle, tmp_path: Path, forewarn_here: CLI,
                                                  edit: Any, message: str) -> None:
    path = bundle.save(tmp_path / "bundle.json")
    document = orjson.loads(path.read_bytes())
    edit(document)
    path.write_bytes(orjson.dumps(document))
    with pytest.raises(ModelFileError, match=message):
        load_guard(path)
    for command in (["check", path], ["states", path]):
        result = forewarn_here(*command)
        assert result.returncode == 2
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert message in result.stderr


def test_truncated_bundle_and_unknown_member(bundle: GuardBundle, tmp_path: Path, forewarn_here: CLI) -> None:
    path = bundle.save(tmp_path / "bundle.json")
    result = forewarn_here("check", path, "--group", "t3")
    assert result.returncode == 2
    assert "group 't3' had 2 runs, fewer than 5" in result.stderr
    path.write_bytes(path.read_bytes()[:200])
    result = forewarn_here("states", path)
    assert result.returncode == 2 and "not a Forewarn model file (invalid JSON" in result.stderr
    with pytest.raises(ForewarnError, match="--group applies to bundles only"):
        from forewarn.guard.cli import _members

        _members(bundle.pooled, "t1")


def test_evaluate_learns_a_bundle_per_fold(grouped: tuple[Path, Path], forewarn_here: CLI) -> None:
    from forewarn.guard.evaluation.evaluate import evaluate

    runs = [parse_run(orjson.dumps(r)) for r in lines()]
    report = evaluate(runs, parse_spec(TOY_SPEC), [0.5], folds=3, bundle_by="meta.task", min_group_runs=3)
    assert report.bundle_by == "meta.task" and report.pooled.runs == 27
    by_id = {r.id: r for r in runs}
    for fold in report.folds:  # each held-out run replayed on its group's member of the fold's own bundle
        held_out = set(fold.test_groups)
        train = [r for r in runs if r.id not in held_out]
        guard = BundleGuard(learn_bundle_from_runs(train, parse_spec(TOY_SPEC), group_by="meta.task",
                                                   min_group_runs=3))
        for replayed in fold.report.replays:
            assert replayed.p_unsafe == replay_run(guard, by_id[replayed.id]).p_unsafe
    traces, spec = grouped
    result = forewarn_here("evaluate", traces, "--spec", spec, "--folds", "3", "--bundle-by", "meta.task",
                           "--min-group-runs", "3", "--theta", "0.5", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert result.json()["bundle_by"] == "meta.task"
    bad = forewarn_here("evaluate", traces, "--spec", spec, "--bundle-by", "task")
    assert bad.returncode == 2 and "must start with 'meta.'" in bad.stderr


def test_export_and_guard_load_say_what_to_do_with_a_bundle(bundle: GuardBundle, tmp_path: Path,
                                                            forewarn_here: CLI) -> None:
    path = bundle.save(tmp_path / "bundle.json")
    with pytest.raises(ModelFileError, match=r"a model bundle, not a single model: load it with guard.load_guard"):
        Guard.load(path)
    result = forewarn_here("export", path)
    assert result.returncode == 2 and "is a bundle: choose the member to export with --group (pooled, t1, t2)" \
        in result.stderr
    exported = forewarn_here("export", path, "--group", "t1")
    assert exported.returncode == 0 and "module chain" in exported.stdout


def test_a_signed_bundle_round_trips_and_a_resealed_one_is_refused(bundle: GuardBundle, tmp_path: Path) -> None:
    from forewarn.guard.bundle import load_model_or_bundle
    from forewarn.guard.signing import SignatureError, generate_keypair, load_private_key, load_trusted_keys

    generate_keypair(tmp_path / "k.pem", tmp_path / "k.pub")
    trusted = load_trusted_keys([tmp_path / "k.pub"])
    path = bundle.save(tmp_path / "signed.json", sign_with=load_private_key(tmp_path / "k.pem"))
    loaded = load_model_or_bundle(path, trusted_keys=trusted)
    assert isinstance(loaded, GuardBundle) and sorted(loaded.members) == sorted(bundle.members)
    document = orjson.loads(path.read_bytes())
    from forewarn.guard.bundle import _checksum
    from forewarn.guard.model import _checksum as model_checksum

    member = document["members"]["t1"]
    member["properties"][0]["values"] = [0.0] * len(member["properties"][0]["values"])  # every risk 0
    for key in ("lower", "upper", "ci_low", "ci_high"):  # whatever would betray the edit goes too
        member["properties"][0][key] = None
    member["properties"][0].pop("markov_mismatch", None)  # flags need the intervals just removed
    member["checksum"] = model_checksum({**member, "spec": document["spec"]})  # every seal redone
    document["checksum"] = _checksum(document)
    path.write_bytes(orjson.dumps(document))
    load_model_or_bundle(path, trusted_keys=())  # the checksums alone accept it
    with pytest.raises(SignatureError, match="modified after it was signed"):
        load_model_or_bundle(path, trusted_keys=trusted)
    with pytest.raises(SignatureError, match="not signed"):
        load_model_or_bundle(bundle.save(tmp_path / "unsigned.json"), trusted_keys=trusted)


def test_no_field_rides_on_a_bundles_valid_signature(bundle: GuardBundle, tmp_path: Path) -> None:
    """Issue 36: a field added to a signed bundle's ``signature`` object loaded with the signature valid."""
    from forewarn.guard.bundle import load_model_or_bundle
    from forewarn.guard.signing import SignatureError, generate_keypair, load_private_key, load_trusted_keys

    generate_keypair(tmp_path / "k.pem", tmp_path / "k.pub")
    trusted = load_trusted_keys([tmp_path / "k.pub"])
    document = orjson.loads(bundle.save(tmp_path / "signed.json", sign_with=load_private_key(tmp_path / "k.pem"))
                            .read_bytes())
    document["signature"]["scope"] = "members t1 only"
    path = tmp_path / "riding.json"
    path.write_bytes(orjson.dumps(document))
    with pytest.raises(SignatureError, match=r"signature\.scope: not a field of a signature"):
        load_model_or_bundle(path, trusted_keys=trusted)
    with pytest.raises(ModelFileError, match=r"signature\.scope: Extra inputs are not permitted"):
        load_model_or_bundle(path, trusted_keys=())
