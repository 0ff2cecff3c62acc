"""Loading a model and deciding import neither Storm nor scipy (issue 11, point 5).

Learning and checking need them; a guard in an agent's process only reads the cached
values from the model file (guard/chain.py, guard/results.py). Each case runs in a fresh
interpreter, which is the only place ``sys.modules`` tells the truth.
"""
from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from _support import TOY_SPEC, toy_state
from forewarn.guard.bundle import learn_bundle
from forewarn.guard.pipeline import learn_model
from forewarn.guard.spec import parse_spec

HEAVY = ("stormpy", "scipy", "forewarn.guard.storm", "forewarn.guard.pac", "forewarn.guard.pipeline",
         "forewarn.guard.learning")

DECIDE = """
import sys
from forewarn.guard import Guard, load_guard
guard = {loader}({path!r})
session = guard.session(metadata={{"task": "t1"}})
first = session.preview({s0!r})
steps = [session.observe(s) for s in ({s0!r}, {s1!r}, {s2!r})]
print(first.action.value, [d.action.value for d in steps], session.preview({s3!r}).action.value)
print(sorted(m for m in sys.modules if m.startswith({heavy!r})))
"""

MONITORS = "monitors:\n  - name: b_after_a\n    kind: bounded_response\n    trigger: a\n    response: b\n    within: 2\n"
MEMORY = "  memory: {dwell: 2, previous: true}\n"
KINDS = "  kinds: 2\n"


def _runs(tmp_path: Path) -> Path:
    import orjson

    from _support import toy_run

    runs = [toy_run(f"r{i}", bits) for i, bits in enumerate([[0, 1, 3], [0, 2, 2, 0], [0, 1, 0, 2], [1, 1, 3],
                                                             [2, 0, 1], [0, 0, 2, 3]])]
    for i, run in enumerate(runs):
        run["meta"] = {"task": f"t{i % 2}"}
    path = tmp_path / "runs.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in runs) + b"\n")
    return path


def _decide(tmp_path: Path, loader: str, path: Path) -> list[str]:
    code = DECIDE.format(loader=loader, path=str(path), heavy=HEAVY,
                         s0=toy_state(0), s1=toy_state(1), s2=toy_state(2), s3=toy_state(3))
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


@pytest.mark.parametrize("extra", ["", MONITORS, "learning:\n  alpha: 0.1\n" + MEMORY, KINDS])
def test_guard_load_and_decisions_import_neither_storm_nor_scipy(tmp_path: Path, extra: str) -> None:
    text = TOY_SPEC + extra if not extra.startswith("learning:") else TOY_SPEC.replace("  alpha: 0.1\n", MEMORY)
    if extra == KINDS:  # a session weighing the kinds by its posterior: still no scipy
        text = TOY_SPEC.replace("  alpha: 0.1\n", "  alpha: 0.1\n" + KINDS)
    learned = learn_model([_runs(tmp_path)], parse_spec(text))
    assert (learned.kinds is not None) == (extra == KINDS)
    model = learned.save(tmp_path / "model.json")
    decisions, loaded = _decide(tmp_path, "Guard.load", model)
    assert loaded == "[]"
    # the same decisions as in this process, where everything is loaded
    from forewarn.errors import ThresholdWarning
    from forewarn.guard import Guard

    with warnings.catch_warnings():  # the child printed them on stderr; here they would be errors
        warnings.simplefilter("ignore", ThresholdWarning)
        here = Guard.load(model).session(metadata={"task": "t1"})
    first = here.preview(toy_state(0))
    steps = [here.observe(toy_state(b)) for b in (0, 1, 2)]
    assert decisions == f"{first.action.value} {[d.action.value for d in steps]} {here.preview(toy_state(3)).action.value}"


def test_a_bundle_loads_and_decides_without_them_too(tmp_path: Path) -> None:
    bundle = learn_bundle([_runs(tmp_path)], parse_spec(TOY_SPEC), group_by="meta.task", min_group_runs=2)
    path = bundle.save(tmp_path / "bundle.json")
    decisions, loaded = _decide(tmp_path, "load_guard", path)
    assert loaded == "[]" and decisions.startswith(("allow", "reflect", "ask_human", "stop"))


def test_the_learned_chain_still_becomes_scipy_on_first_use(tmp_path: Path) -> None:
    from forewarn.guard.chain import CsrArrays
    from forewarn.guard.model import GuardModel

    model = learn_model([_runs(tmp_path)], parse_spec(TOY_SPEC))
    loaded = GuardModel.load(model.save(tmp_path / "model.json"))
    assert isinstance(loaded.dtmc.arrays("matrix"), CsrArrays)
    assert (loaded.dtmc.matrix != model.dtmc.matrix).nnz == 0  # made a scipy matrix here, equal to the learned one
    assert not isinstance(loaded.dtmc.arrays("matrix"), CsrArrays)
    assert (loaded.dtmc.counts != model.dtmc.counts).nnz == 0
    assert loaded.visits.tolist() == model.visits.tolist()


def test_the_top_level_names_are_the_guard_packages_and_load_light(tmp_path: Path) -> None:
    # forewarn re-exports forewarn.guard's __all__ (one list, kept there), each loaded on first use
    code = ("import sys, forewarn\n"
            "before = sorted(m for m in sys.modules if m.startswith('forewarn'))\n"
            "from forewarn import Guard, Decision, Session, ForewarnError\n"
            "import forewarn.guard as core\n"
            "assert (Guard, Decision, Session, ForewarnError) == (core.Guard, core.Decision, core.Session, "
            "core.ForewarnError)\n"
            "assert forewarn.__all__ == core.__all__ and set(core.__all__) <= set(dir(forewarn))\n"
            f"print(before)\nprint(sorted(m for m in sys.modules if m.startswith({HEAVY[:2]!r})))\n"
            "assert all(getattr(forewarn, n) is getattr(core, n) for n in core.__all__ if n != '__version__')\n"
            "try:\n    forewarn.Nope\nexcept AttributeError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    before, heavy, missing = done.stdout.splitlines()
    assert missing == "module 'forewarn' has no attribute 'Nope'"
    assert before == "['forewarn', 'forewarn._version']" and heavy == "[]"


def test_the_command_line_starts_without_storm_or_scipy() -> None:
    """`forewarn mcp` and `forewarn serve` start a long-lived process that a host waits on: the CLI itself loads
    neither Storm nor scipy (a command that learns or checks loads them when it runs)."""
    code = f"import sys, forewarn.guard.cli; print(sorted(m for m in sys.modules if m.startswith({HEAVY!r})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
