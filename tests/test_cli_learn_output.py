"""What ``forewarn learn`` prints: by default the few lines a person reads (the start risk and its interval,
where the data is thin, whether the runs are enough); every figure under ``--verbose`` and in ``--format json``."""
from __future__ import annotations

import math
from pathlib import Path

from _support import CLI, WriteRuns, toy_run
from forewarn.guard.cli._model_text import enough_runs_line, thin_line
from forewarn.guard.model import GuardModel

EVERY_BOUND = ("PAC (ε=", "PAC, tighter bound (", "PAC, empirical-Bernstein bound (", "PAC, joint bound (",
               "PAC, outcome bound (")


def test_the_default_is_a_few_lines(toy_traces: Path, toy_spec_path: Path, tmp_path: Path,
                                    forewarn_here: CLI) -> None:
    result = forewarn_here("learn", toy_traces, "--spec", toy_spec_path, "-o", tmp_path / "m.json")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) <= 6, result.stdout
    assert lines[0].startswith(f"forewarn learn → {tmp_path / 'm.json'}: 5 runs (")
    text = " ".join(result.stdout.split())
    assert "Risk at the start: " in text and "95% interval [" in text
    assert "Thin: " in text and "Enough runs? " in text and "--verbose" in text
    assert not any(bound in text for bound in EVERY_BOUND) and "pac_tight_runs_factor" not in text
    # the one bound: from the start, the outcome bound's figures and the runs it asks for
    model = GuardModel.load(tmp_path / "m.json")
    outcome = model.pac.outcome
    assert outcome is not None and outcome.initial_runs_factor is not None and not outcome.initial_satisfied
    needed = math.ceil(outcome.initial_runs_factor * 5)
    assert (f"a run's risk from its start is within ±{outcome.initial_bound:.3g} (PAC, outcome bound, 95% "
            f"confidence); ε needs about") in text and f"{needed:,} instead of 5 (met in ≥ 95% of learnings)." in text
    # thin: every state the PAC report covers, the fewest visits first
    fewest = min(model.pac.states, key=lambda s: (s.visits, s.state))
    assert f"Thin: {len(model.pac.states)} of {len(model.pac.states)} states seen fewer than 20 times" in text
    assert f"state {fewest.state} (" in text


def test_verbose_and_json_keep_every_figure(toy_traces: Path, toy_spec_path: Path, tmp_path: Path,
                                            forewarn_here: CLI) -> None:
    verbose = forewarn_here("learn", toy_traces, "--spec", toy_spec_path, "-o", tmp_path / "m.json", "--verbose")
    assert verbose.returncode == 0, verbose.stderr
    text = " ".join(verbose.stdout.split())
    assert all(bound in text for bound in EVERY_BOUND), text
    document = forewarn_here("learn", toy_traces, "--spec", toy_spec_path, "-o", tmp_path / "m.json",
                             "--format", "json").json()
    assert isinstance(document, dict)
    shown = {key for key in document if key not in ("pac_worst", "initial_interval", "threshold_warnings", "read")}
    assert len(shown) > 30 and all(f"│ {key} " in verbose.stdout for key in shown)  # a row per figure


def test_thin_and_enough_when_the_runs_suffice(write_runs: WriteRuns, tmp_path: Path, toy_spec_path: Path,
                                              forewarn_here: CLI) -> None:
    runs = [toy_run(f"r{i}", [0, 1 + i % 2, 3 if i % 3 == 0 else 0]) for i in range(3000)]
    path = write_runs(runs)
    learned = forewarn_here("learn", path, "--spec", toy_spec_path, "-o", tmp_path / "m.json", "--epsilon", "0.2")
    assert learned.returncode == 0, learned.stderr
    model = GuardModel.load(tmp_path / "m.json")
    assert thin_line(model) == f"No thin state: each of the {len(model.pac.states)} states was seen at least 20 times."
    line = enough_runs_line(model)
    assert line is not None and line.startswith("Enough runs? Yes for ε = 0.2: a run's risk from its start is within")
    assert line in " ".join(learned.stdout.split())
