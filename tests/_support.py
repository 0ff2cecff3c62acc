"""Test support: a toy domain written by hand and exact solvers independent of Storm.

The toy domain has two predicates, ``a`` (bit 0) and ``b`` (bit 1), and is unsafe when
both hold; so the abstract states are NONE=0, A=1, B=2 and AB=3 (unsafe). It and its exact
reachability live in ``bench/_toy.py`` (the benchmarks' known chains use them too), and are
re-exported here.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import orjson

from _toy import AB as AB
from _toy import NONE as NONE
from _toy import TOY_SPEC as TOY_SPEC
from _toy import A as A
from _toy import B as B
from _toy import Row as Row
from _toy import can_reach as can_reach
from _toy import reach_probabilities as reach_probabilities
from _toy import solve_fractions as solve_fractions
from _toy import toy_state as toy_state

# The toy spec where an unseen state is never judged from the seen ones near it (guard.near_states: 0):
# for the tests of the unseen-state policy itself.
FAR_SPEC = TOY_SPEC.replace("  unseen_state: ask_human\n", "  unseen_state: ask_human\n  near_states: 0\n")

WriteRuns = Callable[..., Path]  # the write_runs fixture: (runs, name=...) -> path of a JSONL file


def toy_run(run_id: str, bits: Sequence[int], times: Sequence[float] | None = None) -> dict[str, Any]:
    """A trace line (as a dict) visiting the abstract states ``bits``."""
    steps: list[dict[str, Any]] = []
    for i, b in enumerate(bits):
        step: dict[str, Any] = {"state": toy_state(b), "action": f"step {i}"}
        if times is not None:
            step["t"] = times[i]
        steps.append(step)
    return {"id": run_id, "steps": steps}


def eq1_row(counts: Mapping[int, int], valid: Sequence[int], alpha: Fraction) -> Row:
    """Paper eq. 1 for one source state: (n_ij + α) / (n_i + k_i·α) over valid j.

    With α = 0, targets never observed get probability 0 and are left out; a source
    never observed gets the uniform row over its valid successors.
    """
    n_i = sum(counts.values())
    k_i = len(valid)
    if n_i == 0:
        return {j: Fraction(1, k_i) for j in valid}
    row = {j: (counts.get(j, 0) + alpha) / (n_i + k_i * alpha) for j in valid}
    return {j: p for j, p in row.items() if p != 0}


def bounded_reach(rows: Mapping[int, Row], targets: set[int], horizon: int) -> dict[int, Fraction]:
    """Exact P(F<=h target): the h-th iterate of x ↦ [target] + [not target]·P·x."""
    x = {i: Fraction(int(i in targets)) for i in rows}
    for _ in range(horizon):
        x = {i: Fraction(1) if i in targets else sum((p * x[j] for j, p in rows[i].items()), Fraction(0))
             for i in rows}
    return x


def expected_steps(rows: Mapping[int, Row], absorbing: set[int]) -> dict[int, Fraction]:
    """Exact expected number of steps before absorption from each transient state."""
    transient = sorted(i for i in rows if i not in absorbing)
    position = {s: k for k, s in enumerate(transient)}
    matrix = [[Fraction(int(r == c)) for c in range(len(transient))] for r in range(len(transient))]
    for s in transient:
        for j, p in rows[s].items():
            if j in position:
                matrix[position[s]][position[j]] -= p
    solution = solve_fractions(matrix, [Fraction(1)] * len(transient))
    return dict(zip(transient, solution))


@dataclass(frozen=True)
class Result:
    """What a ``forewarn`` command did: its arguments, exit code and output."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:  # parsed JSON, as httpx's Response.json()
        return orjson.loads(self.stdout)


CLI = Callable[..., Result]


def install_package(site: Path, distribution: str, modules: Mapping[str, str],
                    entry_points: Mapping[str, str]) -> Path:
    """Install a distribution into ``site`` as pip lays one out (its modules and a ``.dist-info``
    with ``entry_points`` in group ``forewarn.predicates``): the operator's way to register
    Python predicates. Put ``site`` on ``sys.path`` (or ``PYTHONPATH``) to use it."""
    site.mkdir(parents=True, exist_ok=True)
    for name, source in modules.items():
        (site / f"{name}.py").write_text(source, encoding="utf-8")
    info = site / f"{distribution}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n", encoding="utf-8")
    lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[forewarn.predicates]\n{lines}", encoding="utf-8")
    return site


# The approval-scope scenario (issue 36), for every seam's test: deleting one file takes a run from a risk of
# about 0.3 to about 0.6 (of going on to delete three); a second delete stays in the same abstract state.
DELETES_SPEC = """
name: deletes
predicates:
  deleted: 'state.files.deleted > 0'
  many: 'state.files.deleted > 2'
unsafe: 'many'
"""


def learn_deletes(folder: Path) -> Any:
    """The model of :data:`DELETES_SPEC` learned from 200 runs written to ``folder`` (a GuardModel)."""
    from forewarn.guard import learn_model
    from forewarn.guard.spec import parse_spec

    shapes = [[0, 0, 0, 0]] * 100 + [[0, 0, 1, 1]] * 40 + [[0, 1, 2, 3]] * 60
    runs = [{"id": f"r{i}", "steps": [{"state": {"files": {"deleted": n}}} for n in shape]}
            for i, shape in enumerate(shapes)]
    path = folder / "deletes.jsonl"
    path.write_bytes(b"".join(orjson.dumps(run) + b"\n" for run in runs))
    return learn_model([path], parse_spec(DELETES_SPEC))
