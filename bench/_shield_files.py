"""A small file-agent domain whose MDP the shield tests and benchmarks share.

Logged runs of an agent with ``read_file`` and ``delete_file``: deleting once is fine (runs end
there), a second delete leads where every logged run went on to a third — the violation. So from
no deletions every move is safe; after one, ``delete_file`` risks ≈ 99 % while ``read_file`` and
ending keep it near 0; after two, no move is under any θ below ≈ 99 % (``p_min``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

SHIELD_SPEC = """\
name: files
predicates:
  deleted: 'state.files.deleted > 0'
  two: 'state.files.deleted > 1'
  many: 'state.files.deleted > 2'
unsafe: 'many'
learning:
  mdp: true
  memory: {action_class: verb}
guard:
  enforcement: shield
  shield_theta: 0.5
  thresholds: {reflect: 0.3, ask_human: null, stop: null}
"""

# (runs, [(tool, files deleted after it), …]) from no deletion
SHAPES: list[tuple[int, list[tuple[str, int]]]] = [
    (80, [("read_file", 0), ("read_file", 0)]),
    (60, [("delete_file", 1), ("read_file", 1)]),
    (40, [("delete_file", 1), ("delete_file", 2), ("delete_file", 3)]),
    (20, [("read_file", 0), ("delete_file", 1)]),
]


def files_state(deleted: int) -> dict[str, Any]:
    return {"files": {"deleted": deleted}}


def shield_runs() -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    for count, moves in SHAPES:
        for _ in range(count):
            steps: list[dict[str, Any]] = [{"state": files_state(0)}]
            steps += [{"state": files_state(n), "action": {"tool": tool, "args": {"path": f"f{k}"}}}
                      for k, (tool, n) in enumerate(moves)]
            runs.append({"id": f"r{len(runs)}", "steps": steps})
    return runs


def learn_shield_model(folder: Path, spec_text: str = SHIELD_SPEC) -> Any:
    """The model (a GuardModel, with its MDP) learned from :func:`shield_runs` written to ``folder``."""
    from forewarn.guard import learn_model
    from forewarn.guard.spec import parse_spec

    path = folder / "files.jsonl"
    path.write_bytes(b"".join(orjson.dumps(run) + b"\n" for run in shield_runs()))
    return learn_model([path], parse_spec(spec_text))
