"""What ``forewarn discover`` says did not help: each predicate once (issue 38, item 7)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from test_discover import SPEC, as_runs, synthetic_runs, write_jsonl

from _support import CLI
from forewarn.guard.discovery.discover import discover
from forewarn.guard.evaluation.tune import parse_target
from forewarn.guard.spec import parse_spec


def test_a_predicate_rejected_in_several_rounds_is_listed_once(tmp_path: Path, forewarn_here: CLI) -> None:
    lines = synthetic_runs(400, 1)
    report = discover(as_runs(lines), parse_spec(SPEC), target=parse_target("false-alarms=0.1"),
                      group_by="meta.task", confirm=True)
    assert len(report.not_helping) > 3  # rounds after the first rejected many of these again
    assert [cel for cel, n in Counter(cel for cel, _, _ in report.not_helping).items() if n > 1] == []
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    shown = forewarn_here("discover", write_jsonl(tmp_path / "runs.jsonl", lines), "--spec", spec,
                          "-o", tmp_path / "out.yaml", "--group-by", "meta.task")
    assert shown.returncode == 0, shown.stderr
    listed = [line for line in shown.stdout.splitlines() if line.startswith("did not help: ")]
    assert listed and all(line.endswith(", as last scored)") for line in listed), listed
    assert len(set(listed)) == len(listed)
