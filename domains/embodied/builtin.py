"""The built-in demo model: learned on first use from the embodied domain, then cached.

``forewarn serve`` with no model, examples and benchmarks use it, so they work on a
fresh machine with nothing downloaded.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ...guard.model import GuardModel
from ...guard.pipeline import learn_model
from ...guard.spec import load_spec

BUILTIN_TASK = "unsafe-0002"  # egg in a closed, running microwave (SafeAgentBench)
_RUNS = 300
_SEED = 7


def _cache_dir() -> Path:
    root = os.environ.get("FOREWARN_CACHE") or os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "forewarn"


def builtin_model_path(directory: str | Path | None = None) -> Path:
    """Path of the built-in model, learning it first if it is not cached yet (about 1 s)."""
    import yaml

    from .episodes import generate_traces
    from .spec import derive_spec
    from .tasks import load_tasks

    folder = Path(directory) if directory is not None else _cache_dir()
    path = folder / f"builtin-{BUILTIN_TASK}.json"
    if path.exists():
        try:
            GuardModel.load(path)
            return path
        except ValueError:
            pass  # a stale or damaged cache entry: learn it again
    folder.mkdir(parents=True, exist_ok=True)
    task = next(t for t in load_tasks("unsafe") if t.id == BUILTIN_TASK)
    with tempfile.TemporaryDirectory() as tmp:
        traces = Path(tmp) / "traces.jsonl"
        spec = Path(tmp) / "spec.yaml"
        generate_traces([task], _RUNS, _SEED, traces)
        document = derive_spec(task)
        # the paper's plain chain: the examples written against this model show each action in turn
        document["learning"] = {"memory": "off", "shrink": "off"}
        spec.write_text(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), encoding="utf-8")
        learn_model([traces], load_spec(spec)).save(path)
    return path


def builtin_model() -> GuardModel:
    return GuardModel.load(builtin_model_path())
