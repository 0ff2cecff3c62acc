"""Figures and the HTML report: not empty, self-contained, and rendered by headless Chromium."""
from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest
from matplotlib.image import imread

from _eval_support import RISK, with_risk
from _support import AB, NONE, TOY_SPEC, A, B, WriteRuns, toy_run
from forewarn.guard.evaluation.baselines import score_baselines
from forewarn.guard.evaluation.evaluate import evaluate
from forewarn.guard.evaluation.plots import advance_figure, choose_run, png_bytes, report_images, risk_figure
from forewarn.guard.evaluation.report import evaluation_html, replay_html
from forewarn.guard.pipeline import learn_model
from forewarn.guard.replay import ReplayReport, RunReplay, replay
from forewarn.guard.runtime import Guard
from forewarn.guard.spec import Spec, load_spec
from forewarn.guard.traces import read_runs

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not on PATH (CI installs Debian's "
                                                               "chromium to render the report headless)")


def pixels(png: bytes) -> np.ndarray:
    image = imread(io.BytesIO(png), format="png")
    return np.asarray(image[..., :3], dtype=float)


def assert_not_blank(png: bytes, *, min_ink: float = 0.01) -> None:
    rgb = pixels(png)
    assert rgb.std() > 0.03, "the image is one flat colour"
    ink = (rgb.min(axis=2) < 0.85).mean()  # share of pixels that are not (near) white
    assert ink > min_ink, f"only {ink:.2%} of the image is drawn"


@pytest.fixture(scope="module")
def toy_report(tmp_path_factory: pytest.TempPathFactory) -> ReplayReport:
    root = tmp_path_factory.mktemp("report")
    spec_path = root / "toy.yaml"
    spec_path.write_text(TOY_SPEC, encoding="utf-8")
    train = root / "train.jsonl"
    train.write_bytes(b"\n".join(orjson.dumps(toy_run(f"t{n}", bits))
                                 for n, bits in enumerate([[NONE, A, AB], [NONE, B, NONE], [AB]])))
    guard = Guard(with_risk(learn_model([train], load_spec(spec_path)), RISK))
    runs = root / "report.jsonl"
    runs.write_bytes(b"\n".join(orjson.dumps(line) for line in [
        toy_run("u1", [NONE, A, AB], [0.0, 1.0, 3.0]), toy_run("u2", [NONE, B, B, AB], [0.0, 2.0, 5.0, 9.0]),
        toy_run("s1", [NONE, B, NONE], [0.0, 1.0, 2.0]), toy_run("s2", [NONE, NONE], [0.0, 1.0]),
        toy_run("s3", [NONE, A, NONE], [0.0, 1.0, 2.0])]))
    thetas = [0.3, 0.5, 0.8]
    report = replay(guard, read_runs(runs), thetas, enforcement="observe")
    return replace(report, baselines=score_baselines(report.replays, thetas, predicates=guard.predicates,
                                                     monitors=guard.monitors))


@pytest.fixture(scope="module")
def rendered(toy_report: ReplayReport) -> tuple[dict[str, bytes], RunReplay | None]:
    return report_images(toy_report)


def test_every_figure_is_drawn(toy_report: ReplayReport, rendered: tuple[dict[str, bytes], RunReplay | None]) -> None:
    images, chosen = rendered
    assert set(images) == {"curve", "reliability", "advance", "risk"}
    # the middle θ (0.5) warned of u1 only: that is the run drawn
    assert chosen is not None and chosen.id == "u1"
    for png in images.values():
        assert png.startswith(b"\x89PNG")
        assert_not_blank(png)
    other = choose_run(toy_report, "s1")
    assert other is not None and other.id == "s1" and choose_run(toy_report, "nobody") is None


def test_figures_without_alarms_times_or_known_states(hand_guard: Guard, write_runs: WriteRuns) -> None:
    runs = write_runs([toy_run("u", [NONE, B, AB]), toy_run("s", [NONE])], name="plain.jsonl")
    report = replay(hand_guard, read_runs(runs), [0.0])  # θ = 0 never alarms on a known state
    assert_not_blank(png_bytes(advance_figure(report)), min_ink=0.005)  # "no violation was warned of in advance"
    unseen = replace(report.replays[0], p_unsafe=[None, 0.3, 1.0])
    assert_not_blank(png_bytes(risk_figure(unseen, report)))


def embedded_images(html: str) -> list[bytes]:
    return [base64.b64decode(data) for data in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)]


def test_the_report_is_self_contained(toy_report: ReplayReport,
                                      rendered: tuple[dict[str, bytes], RunReplay | None]) -> None:
    images, chosen = rendered
    html = replay_html(toy_report, images, chosen, context={"model": "toy.json"})
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"(src|href)=\"(https?:)?//", html) and "<script" not in html and "<link" not in html
    embedded = embedded_images(html)
    assert len(embedded) == 4
    for png in embedded:
        assert_not_blank(png)
    for heading in ("Warnings per threshold", "What stop would have done", "Calibration of p_unsafe",
                    "Against the baselines", "How these figures are computed"):
        assert heading in html
    assert "warned ahead of 1 of 2 violations (50.0%)" in html  # the summary, at the middle θ
    assert "blocked at step" in html and "warned-ahead rate" in html


def screenshot(html_path: Path, tmp_path: Path, height: int) -> bytes:
    assert CHROMIUM is not None
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--no-first-run",
                    f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", f"--window-size=1280,{height}",
                    html_path.resolve().as_uri()], check=True, capture_output=True, timeout=90)
    return shot.read_bytes()


def coloured(png: bytes) -> int:
    """Pixels of a strong colour (the figures' lines and markers; the page itself is greys and tints)."""
    rgb = pixels(png)
    return int(((rgb.max(axis=2) - rgb.min(axis=2)) > 0.35).sum())


@needs_chromium
def test_chromium_renders_the_report_with_its_figures(toy_report: ReplayReport, tmp_path: Path,
                                                      rendered: tuple[dict[str, bytes], RunReplay | None]) -> None:
    images, chosen = rendered
    page = tmp_path / "replay.html"
    page.write_text(replay_html(toy_report, images, chosen, context={"model": "toy.json"}), encoding="utf-8")
    shot = screenshot(page, tmp_path, 4200)
    assert_not_blank(shot)
    # the page without figures has about 500 such pixels (the coloured borders); with them, over 25 000
    assert coloured(shot) > 10_000, "the figures did not render"


def test_the_evaluation_report(toy_spec: Spec, write_runs: WriteRuns) -> None:
    from forewarn.guard.traces import read_runs as read

    lines = []
    for n in range(12):
        bits = [NONE, A, AB] if n % 3 == 0 else [NONE, B, NONE] if n % 3 == 1 else [NONE, A, NONE]
        line = toy_run(f"r{n}", bits, [0.0, 1.0, 2.0])
        line["meta"] = {"task": f"t{n % 4}", "success": n % 3 != 0}
        lines.append(line)
    runs = list(read(write_runs(lines, name="cv.jsonl")))
    result = evaluate(runs, toy_spec, [0.3, 0.5, 0.9], folds=4, group_by="meta.task")
    images, chosen = report_images(result.pooled, folds=[f.report for f in result.folds])
    html = evaluation_html(result, images, chosen, context={"spec": "toy.yaml"})
    assert "4-fold cross-validation grouped by meta.task over 12 runs" in html
    assert "<h2>Folds</h2>" in html and html.count("<tr>") > 4
    assert len(embedded_images(html)) == 4
