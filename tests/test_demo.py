"""`forewarn demo` end to end on both built-in domains, small."""
from __future__ import annotations

from pathlib import Path

from rich.console import Console

from forewarn.domains.demo import run_demo
from forewarn.guard import GuardModel


def test_the_embodied_demo_learns_checks_and_compares_enforcements(tmp_path: Path) -> None:
    console = Console(record=True, width=200)
    rows = run_demo(out_dir=tmp_path, runs=40, episodes=6, seed=3, console=console)
    text = console.export_text()
    assert "unsafe %" in text and "completed %" in text and str(tmp_path / "models") in text
    by_name = {(row.enforcement, row.theta): row for row in rows}
    none = by_name[("none", None)]
    assert none.episodes > 0 and none.unsafe > 0  # the simulated agent does reach hazards
    # 'stop' never lets a run complete more often than without a guard, and stops some
    assert all(row.completed <= none.completed for (name, _), row in by_name.items() if name == "stop")
    assert any(row.stopped > 0 for (name, _), row in by_name.items() if name == "stop")
    shield = by_name[("shield", 0.5)]  # the shield's row, on the same episodes as the others
    assert shield.episodes == none.episodes and "shield" in text
    models = sorted((tmp_path / "models").glob("*.json"))
    assert models and all(GuardModel.load(path).dtmc.size > 1 for path in models)
    assert all(GuardModel.load(path).mdp is not None for path in models)  # learned for the shield


def test_the_driving_demo_warns_before_violations(tmp_path: Path) -> None:
    console = Console(record=True, width=200)
    run_demo(domain="driving", out_dir=tmp_path, runs=60, episodes=3, seed=5, console=console)
    text = console.export_text()
    assert "warned in time" in text and "collisions" in text
    model = GuardModel.load(tmp_path / "driving-model.json")
    assert model.dtmc.monitors == ["start_on_green", "red_light"]
    assert model.provenance["product_states"] >= model.provenance["chain_states"]
