"""``forewarn discover``: what it finds on a synthetic domain, what it leaves alone, and bad input."""
from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from _support import CLI
from forewarn.guard.discovery.discover import discover
from forewarn.guard.evaluation.tune import parse_target
from forewarn.guard.pipeline import learn_model
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import load_spec, parse_spec
from forewarn.guard.traces import Run

SPEC = """\
# the user's own spec: one predicate, the violation itself
name: synthetic
predicates:
  broken:
    cel: 'state.broken'
    description: something broke
unsafe: 'broken'
guard:
  thresholds: {reflect: 0.6}
  unseen_state: allow
"""


def synthetic_runs(n: int, seed: int, *, signal: bool = True) -> list[dict[str, Any]]:
    """Runs whose outcome depends on a hidden field set at the start (``state.hidden.mode == "c"``) and
    on a sequence of actions (``find child`` at step 2, then ``pick knife`` at step 3: the next step
    often breaks something), beside noise fields and actions that change at random. With ``signal``
    False the outcome is a coin toss and no field tells anything (not even the step count, which tells
    how much of a run is left)."""
    rng = random.Random(seed)
    runs = []
    for k in range(n):
        mode = rng.choice("abc")
        risky = mode == "c" if signal else rng.random() < 1 / 3
        child, knife = rng.random() < 0.4, rng.random() < 0.4
        steps = []
        for i in range(10):
            action = rng.choice(["look around", "walk north", "wait here"])
            if signal and i == 2 and child:
                action = "find child"
            if signal and i == 3 and knife:
                action = "pick knife"
            broken = (risky and i >= 5 and rng.random() < 0.5) or (signal and i == 4 and child and knife
                                                                  and rng.random() < 0.8)
            state = {"broken": broken, "hidden": {"mode": mode}, "step": i,
                     "noise_flag": rng.random() < 0.5, "noise_level": round(rng.random(), 2),
                     "noise_color": rng.choice(["red", "green", "blue", "grey"]),
                     "noise_tags": rng.sample(["x", "y", "z"], rng.randrange(3))}
            if not signal:
                del state["step"]
            steps.append({"state": state, "action": action})
            if broken:
                break
        runs.append({"id": f"r{k}", "steps": steps, "meta": {"task": f"t{k % 40}", "noise_id": rng.randrange(7)}})
    return runs


def as_runs(lines: list[dict[str, Any]]) -> list[Run]:
    return [Run(id=line["id"], steps=line["steps"], meta=line["meta"]) for line in lines]


def write_jsonl(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC)
    return path


def test_finds_the_hidden_field_the_actions_and_no_noise(tmp_path: Path, spec_file: Path) -> None:
    report = discover(as_runs(synthetic_runs(400, 1)), load_spec(spec_file), target=parse_target("false-alarms=0.1"),
                      group_by="meta.task", confirm=True)
    assert report.changed, report.notes
    read = " ".join(s.cel for s in report.added)
    assert "state.hidden.mode" in read
    assert "action." in read and "knife" in read, read
    assert "noise" not in read and "look around" not in read and "walk" not in read
    first = report.added[0]
    assert first.after.brier < first.before.brier and first.after.detection > first.before.detection
    assert report.learner_before is not None and report.learner_after is not None
    assert report.learner_after.brier is not None and report.learner_before.brier is not None
    assert report.learner_after.brier < report.learner_before.brier
    assert report.learner_after.detection > report.learner_before.detection
    # the user's spec is kept as written, comments included; each addition says what it added
    text = report.text
    assert "# the user's own spec" in text and "description: something broke" in text
    assert text.index("broken:") < text.index(report.names[0] + ":")
    assert "discovered: held-out Brier" in text and "real learner, held out" in text
    discovered = parse_spec(text)
    assert next(iter(discovered.predicates)) == "broken" and discovered.unsafe == "broken"


def test_output_works_with_learn_tune_and_the_guard(tmp_path: Path, spec_file: Path, forewarn_here: CLI) -> None:
    traces = write_jsonl(tmp_path / "runs.jsonl", synthetic_runs(300, 2))
    out = tmp_path / "discovered.yaml"
    result = forewarn_here("discover", traces, "--spec", spec_file, "-o", out, "--group-by", "meta.task",
                           "--format", "json")
    assert result.returncode == 0, result.stderr
    figures = result.json()
    assert isinstance(figures, dict) and figures["changed"] and figures["added"]
    assert all("noise" not in a["cel"] for a in figures["added"])
    model = learn_model([traces], load_spec(out))
    session = Guard(model).session()
    calm = {"broken": False, "hidden": {"mode": "a"}, "step": 0, "noise_flag": False, "noise_level": 0.5,
            "noise_color": "red", "noise_tags": []}
    risky = dict(calm, hidden={"mode": "c"})
    risky_p, calm_p = session.preview(risky).p_unsafe, session.preview(calm).p_unsafe
    assert risky_p is not None and calm_p is not None and risky_p > calm_p
    tuned = forewarn_here("tune", traces, "--spec", out, "--target", "false-alarms=0.2", "--group-by", "meta.task",
                          "-o", tmp_path / "tuned.yaml")
    assert tuned.returncode == 0, tuned.stderr
    assert load_spec(tmp_path / "tuned.yaml").predicates.keys() == load_spec(out).predicates.keys()


def test_nothing_helps_returns_the_spec_unchanged(tmp_path: Path, spec_file: Path, forewarn_here: CLI) -> None:
    traces = write_jsonl(tmp_path / "runs.jsonl", synthetic_runs(300, 3, signal=False))
    out = tmp_path / "out.yaml"
    result = forewarn_here("discover", traces, "--spec", spec_file, "-o", out, "--group-by", "meta.task",
                           "--no-confirm")
    assert result.returncode == 0, result.stderr
    assert out.read_text() == spec_file.read_text()
    assert "the spec is unchanged" in result.stdout
    assert "(the spec unchanged)" in result.stderr


@pytest.mark.parametrize("outcome", ["safe", "unsafe"])
def test_runs_all_one_way_give_the_spec_back_with_a_note(tmp_path: Path, spec_file: Path, forewarn_here: CLI,
                                                         outcome: str) -> None:
    """Issue 39: "all 8 runs are safe … needs both" was exit 2; now the spec unchanged, the reason in one line."""
    lines = synthetic_runs(30, 4)
    for line in lines:
        for step in line["steps"]:
            step["state"]["broken"] = outcome == "unsafe"
    traces = write_jsonl(tmp_path / "runs.jsonl", lines)
    result = forewarn_here("discover", traces, "--spec", spec_file, "-o", tmp_path / "out.yaml")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    how = "safe" if outcome == "safe" else "violating"
    notes = [line for line in result.stdout.splitlines() if line.startswith("note:")]
    assert len(notes) == 1, result.stdout
    assert f"all 30 runs are {how}" in notes[0] and "needs both" in notes[0] and "the spec is unchanged" in notes[0]
    assert (tmp_path / "out.yaml").read_text() == spec_file.read_text()
    assert "(the spec unchanged)" in result.stderr


def test_bad_fields_are_skipped_and_counted(spec_file: Path) -> None:
    lines = synthetic_runs(300, 5)
    rng = random.Random(0)
    for k, line in enumerate(lines):
        for i, step in enumerate(line["steps"]):
            state = step["state"]
            state["mixed"] = "high" if (k + i) % 2 else 3  # a string at some steps, a number at others
            state["huge"] = list(range(500))
            state["deep"] = {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": True}}}}}}}}
            state["bytes_like"] = "ok" if rng.random() < 0.5 else "\udc80broken"  # a lone surrogate
            state["shape"] = {"x": 1} if k % 2 else 1  # an object in some runs, a number in others
            state["objects_in_list"] = [{"x": 1}]
    report = discover(as_runs(lines), load_spec(spec_file), target=parse_target("false-alarms=0.1"),
                      group_by="meta.task", confirm=False)
    reasons = report.skipped.reasons
    assert reasons["values of mixed types (number, string)"] == 1
    assert reasons["lists longer than 64 elements"] == 1
    assert reasons["nested deeper than 6 levels"] == 1
    assert reasons["strings that are not valid Unicode (not UTF-8)"] == 1
    assert reasons["an object at some steps, a value at others (mixed types)"] == 1
    assert reasons["lists holding objects, lists or null"] == 1
    assert report.skipped.total == 6
    assert any("state.hidden.mode" in s.cel for s in report.added)  # the good fields still count


def test_bad_fields_on_the_command_line(tmp_path: Path, spec_file: Path, forewarn_here: CLI) -> None:
    lines = synthetic_runs(200, 6)
    for k, line in enumerate(lines):
        for step in line["steps"]:
            step["state"]["mixed"] = [1] if k % 3 else "text"
    traces = write_jsonl(tmp_path / "runs.jsonl", lines)
    result = forewarn_here("discover", traces, "--spec", spec_file, "-o", tmp_path / "out.yaml", "--no-confirm")
    assert result.returncode == 0, result.stderr
    assert "1 field(s) skipped: values of mixed types (list, string) (e.g. state.mixed)" in result.stdout


def test_bounds_and_bad_options(tmp_path: Path, spec_file: Path, forewarn_here: CLI) -> None:
    traces = write_jsonl(tmp_path / "runs.jsonl", synthetic_runs(200, 7))
    one = forewarn_here("discover", traces, "--spec", spec_file, "-o", tmp_path / "one.yaml", "--max-predicates", "1",
                        "--no-confirm", "--format", "json")
    assert one.returncode == 0, one.stderr
    figures = one.json()
    assert isinstance(figures, dict) and len(figures["added"]) == 1
    assert figures["stopped"] == "--max-predicates 1 reached"
    for option, value, fragment in [("--target", "reflect:false-alarms=0.1", "without an action"),
                                    ("--target", "false-alarms=2", "not in (0, 1)"),
                                    ("--max-predicates", "0", "--max-predicates"),
                                    ("--time-limit", "0", "--time-limit")]:
        bad = forewarn_here("discover", traces, "--spec", spec_file, "-o", tmp_path / "x.yaml", option, value)
        assert bad.returncode == 2 and fragment in bad.stderr, (option, bad.stderr)


def test_flow_style_predicates_are_extended(tmp_path: Path) -> None:
    spec = tmp_path / "flow.yaml"
    spec.write_text("name: flow\npredicates: {broken: 'state.broken'}\nunsafe: broken\n")
    report = discover(as_runs(synthetic_runs(300, 8)), load_spec(spec), target=parse_target("detection=0.8"),
                      group_by="meta.task", confirm=False)
    assert report.changed
    parsed = parse_spec(report.text)
    assert next(iter(parsed.predicates)) == "broken" and len(parsed.predicates) == 1 + len(report.added)


def test_fewer_groups_than_folds_scores_leave_one_group_out(spec_file: Path) -> None:
    """Issue 39: "--folds 5 needs at least 5 groups, but there are only 4" was an error; now one fold per group."""
    report = discover(as_runs(synthetic_runs(40, 9)), load_spec(spec_file), target=parse_target("false-alarms=0.1"),
                      group_by="meta.noise_id", folds=8, confirm=False)
    groups = len({line["meta"]["noise_id"] for line in synthetic_runs(40, 9)})
    assert groups < 8 and report.folds == groups
    assert f"{groups} distinct values of meta.noise_id for 8 folds: discovery scored leave-one-group-out " \
           f"({groups} folds)" in report.notes


def test_excluded_fields_and_meta_labels(spec_file: Path) -> None:
    lines = synthetic_runs(300, 10)
    for line in lines:  # a label written after the run, under a name that does not say so: found, and noted
        line["meta"]["tag"] = "unsafe" if any(s["state"]["broken"] for s in line["steps"]) else "safe"
    runs = as_runs(lines)
    found = discover(runs, load_spec(spec_file), target=parse_target("false-alarms=0.1"), group_by="meta.task",
                     confirm=False)
    assert any("meta.tag" in s.cel for s in found.added)
    assert any("reads the run's meta" in note and "--exclude" in note for note in found.notes)
    kept_out = discover(runs, load_spec(spec_file), target=parse_target("false-alarms=0.1"), group_by="meta.task",
                        confirm=False, exclude=("meta.tag", "state.hidden"))
    read = " ".join(s.cel for s in kept_out.added)
    assert "meta.tag" not in read and "state.hidden" not in read
    # what is left still counts: the action sequence, as a predicate or as remembering the last two actions
    assert "knife" in read or (kept_out.memory is not None and kept_out.memory.actions == 2), (read, kept_out.memory)


def test_fields_written_after_the_run_are_no_candidates(spec_file: Path) -> None:
    """The agent's final answer and a grader's verdict tell the outcome by construction (AgentSpec's logs:
    discovery picked meta.output.contains("broken")); they are left out unless named with ``include``."""
    lines = synthetic_runs(300, 10)
    for line in lines:
        broke = any(s["state"]["broken"] for s in line["steps"])
        line["meta"]["output"] = "The vase is broken, sorry." if broke else "All done as asked."
        line["meta"]["record"] = {"eval": {"Score": 0 if broke else 1}}
        line["meta"]["instruction"] = "Tidy the room."  # known at the start: still read
    runs = as_runs(lines)
    target = parse_target("false-alarms=0.1")
    found = discover(runs, load_spec(spec_file), target=target, group_by="meta.task", confirm=False)
    read = " ".join(s.cel for s in found.added)
    assert found.added and "meta.output" not in read and "meta.record" not in read, read
    note = next(n for n in found.notes if n.startswith("left out"))
    assert "meta.output" in note and "meta.record.eval" in note and "instruction" not in note
    named = discover(runs, load_spec(spec_file), target=target, group_by="meta.task", confirm=False,
                     include=("meta.output",))
    assert any("meta.output" in s.cel for s in named.added), [s.cel for s in named.added]
    assert any(n.startswith("left out meta.record.eval:") for n in named.notes)


def test_include_on_the_command_line(tmp_path: Path, spec_file: Path, forewarn_here: CLI) -> None:
    lines = synthetic_runs(200, 12)
    for line in lines:
        line["meta"]["output"] = "It broke." if any(s["state"]["broken"] for s in line["steps"]) else "Done."
    traces = write_jsonl(tmp_path / "runs.jsonl", lines)
    plain = forewarn_here("discover", traces, "--spec", spec_file, "-o", tmp_path / "plain.yaml",
                          "--group-by", "meta.task", "--no-confirm")
    assert plain.returncode == 0, plain.stderr
    assert "note: left out meta.output: written after a run ends" in plain.stdout
    assert "meta.output" not in (tmp_path / "plain.yaml").read_text()
    named = forewarn_here("discover", traces, "--spec", spec_file, "-o", tmp_path / "named.yaml",
                          "--group-by", "meta.task", "--no-confirm", "--include", "meta.output")
    assert named.returncode == 0, named.stderr
    assert "left out" not in named.stdout and "meta.output" in (tmp_path / "named.yaml").read_text()


def with_junk(lines: list[dict[str, Any]], fields: int, seed: int) -> list[dict[str, Any]]:
    """``lines`` with ``fields`` more noise fields in every state: Booleans, numbers, strings of five values
    and lists of up to two of four letters (about five candidates each)."""
    rng = random.Random(seed)
    for line in lines:
        for step in line["steps"]:
            junk: dict[str, Any] = {}
            for f in range(fields):
                kind = f % 4
                junk[f"f{f}"] = (rng.random() < 0.5 if kind == 0 else round(rng.random(), 2) if kind == 1
                                 else rng.choice("pqrst") if kind == 2 else rng.sample("uvwz", rng.randrange(3)))
            step["state"]["junk"] = junk
    return lines


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_small_data_and_many_noise_fields_pick_no_noise(seed: int) -> None:
    """150 runs, over 1,200 candidates of which all but a few dozen are noise: the significance a gain
    needs grows with the candidates tried, so no noise field is added; the hidden field still is."""
    runs = as_runs(with_junk(synthetic_runs(150, seed), 250, seed))
    report = discover(runs, parse_spec(SPEC), target=parse_target("false-alarms=0.1"), group_by="meta.task",
                      confirm=True)
    assert report.candidates >= 1200
    read = " ".join(s.cel for s in report.added)
    assert "junk" not in read and "noise" not in read, read
    assert "state.hidden.mode" in read


@pytest.mark.parametrize("text", ["plain", 'a "quoted" \\ path', "line\r\nend", "tab\there", "nul\x00byte",
                                  "bell\x07", "del\x7f", "next line\x85", "separator\u2028", "é ☃ 😀"])
def test_a_value_quoted_for_cel_reads_back_as_itself(text: str) -> None:
    import cel

    from forewarn.guard.discovery.columns import _quote

    assert cel.evaluate(f"{_quote(text)} == x", {"x": text}) is True
    assert cel.evaluate(f"x[{_quote(text)}]", {"x": {text: True}}) is True


def test_values_and_keys_with_line_breaks_are_found(tmp_path: Path, spec_file: Path, forewarn_here: CLI) -> None:
    """Logged text often ends in a Windows line break: the telling value ``"c\\r\\n"`` (and a key holding
    one) is proposed as CEL that parses and means it, not dropped with every other predicate."""
    lines = synthetic_runs(300, 11)
    for line in lines:
        for step in line["steps"]:
            state = step["state"]
            state["hidden"]["mode"] += "\r\n"
            state["flag\r"] = state["hidden"]["mode"] == "c\r\n"
    traces = write_jsonl(tmp_path / "runs.jsonl", lines)
    out = tmp_path / "out.yaml"
    result = forewarn_here("discover", traces, "--spec", spec_file, "-o", out, "--group-by", "meta.task",
                           "--no-confirm", "--format", "json")
    assert result.returncode == 0, result.stderr
    figures = result.json()
    assert isinstance(figures, dict) and figures["changed"], figures
    first = figures["added"][0]["cel"]
    assert first in ('state.hidden.mode == "c\\r\\n"', 'state["flag\\r"]'), first
    spec = load_spec(out)
    from forewarn.guard.predicates import PredicateSet

    predicates = PredicateSet(spec)
    bit = list(spec.predicates).index(figures["added"][0]["name"])
    risky = {"broken": False, "hidden": {"mode": "c\r\n"}, "flag\r": True, "step": 0}
    calm = {"broken": False, "hidden": {"mode": "a\r\n"}, "flag\r": False, "step": 0}
    assert predicates.evaluate(risky, {}, "look around") >> bit & 1 == 1
    assert predicates.evaluate(calm, {}, "look around") >> bit & 1 == 0


def test_a_spec_saved_with_a_byte_order_mark(tmp_path: Path, spec_file: Path, forewarn_here: CLI) -> None:
    """Editors on Windows save UTF-8 with a BOM, which YAML reads past: the header discovery writes goes
    before the spec's text, so the mark must not end up at the start of the spec's second line."""
    marked = tmp_path / "marked.yaml"
    marked.write_bytes(b"\xef\xbb\xbf" + spec_file.read_bytes())
    traces = write_jsonl(tmp_path / "runs.jsonl", synthetic_runs(200, 12))
    out = tmp_path / "out.yaml"
    result = forewarn_here("discover", traces, "--spec", marked, "-o", out, "--no-confirm", "--max-predicates", "1",
                           "--no-action-memory")
    assert result.returncode == 0, result.stderr
    written = out.read_text(encoding="utf-8")
    assert "\ufeff" not in written and written.startswith("# forewarn discover added 1 predicate(s)")
    assert written.endswith(SPEC[SPEC.index("unsafe:"):]) and "# the user's own spec" in written
    assert next(iter(load_spec(out).predicates)) == "broken"


COMMENTED = """\
# my spec, as I keep it
name: synthetic   # the name
guard:
  thresholds: {reflect: 0.6}   # flow style, kept
  unseen_state: allow
predicates:
  # the violation
  broken:
    cel: 'state.broken'
    description: something broke
  early: 'state.step < 2'  # a short form
unsafe: 'broken'
learning:
  # recent states only
  memory:
    previous: 0
# the end
"""


def test_discover_on_its_own_output_comes_to_rest(tmp_path: Path, forewarn_here: CLI) -> None:
    """The written spec keeps the user's text (every line, in order, comments included), learns as it is,
    and discovering again on it, once nothing new is found, writes it back unchanged and says so."""
    import difflib

    traces = write_jsonl(tmp_path / "runs.jsonl", synthetic_runs(300, 2))
    spec = tmp_path / "spec.yaml"
    spec.write_text(COMMENTED)
    texts = [COMMENTED]
    for round_ in range(1, 4):
        out = tmp_path / f"round{round_}.yaml"
        result = forewarn_here("discover", traces, "--spec", spec, "-o", out, "--group-by", "meta.task")
        assert result.returncode == 0, result.stderr
        texts.append(out.read_text())
        if "(the spec unchanged)" in result.stderr:
            break
        old, new = texts[-2].splitlines(), texts[-1].splitlines()
        opcodes = difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
        assert all(tag in ("equal", "insert") for tag, *_ in opcodes), opcodes  # only lines added
        spec = out
    assert round_ > 1 and texts[-1] == texts[-2], "discovery kept finding something"
    assert "the spec is unchanged" in result.stdout
    assert texts[-1] != COMMENTED and "forewarn discover added" in texts[-1]
    learned = forewarn_here("learn", traces, "--spec", spec, "-o", tmp_path / "model.json")
    assert learned.returncode == 0, learned.stderr
    final = load_spec(spec)
    assert list(final.predicates)[:2] == ["broken", "early"] and len(final.predicates) > 2


def test_an_exclusion_that_matches_no_field_is_noted(spec_file: Path) -> None:
    """A mistyped --exclude (meta.outcme for meta.outcome) would leave the label in silently: it is noted."""
    lines = synthetic_runs(120, 13)
    for line in lines:
        line["meta"]["outcome"] = "unsafe" if any(s["state"]["broken"] for s in line["steps"]) else "safe"
    report = discover(as_runs(lines), load_spec(spec_file), target=parse_target("false-alarms=0.1"),
                      group_by="meta.task", confirm=False, action_memory=False, exclude=("meta.outcme", "state.hidden"))
    assert [n for n in report.notes if n.startswith("--exclude")] == [
        "--exclude meta.outcme: no field discovery reads in these runs is at or below it; nothing left out"]


def test_discover_off_a_terminal_prints_progress_and_clean_json(tmp_path: Path, spec_file: Path, forewarn_here: CLI,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FOREWARN_PROGRESS_SECONDS", "0.02")
    traces = write_jsonl(tmp_path / "runs.jsonl", synthetic_runs(200, 2))
    result = forewarn_here("discover", traces, "--spec", spec_file, "-o", tmp_path / "out.yaml", "--group-by",
                           "meta.task", "--folds", "3", "--format", "json")
    assert result.returncode == 0, result.stderr
    assert isinstance(result.json(), dict)  # no progress on stdout
    # stage: done/total, elapsed, estimate (tests/test_cli_progress.py)
    shown = re.compile(r"^discovering: confirming with the real learner .+: \d+/\d+ done, \d+ s elapsed, "
                       r"(about \d+ s left|no estimate yet|finishing)$", re.M)
    assert shown.search(result.stderr), result.stderr
