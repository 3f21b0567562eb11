"""The report page in a real browser: the Pareto plot renders offline, with no request made."""

from __future__ import annotations

import optuna
import pytest
from chromium_helper import launch, png_size
from fixture_studies import sqlite_study

from tuner.results.report import write_report

pytestmark = pytest.mark.browser
optuna.logging.set_verbosity(optuna.logging.WARNING)
VIEWPORT = {"width": 1400, "height": 900}


@pytest.fixture(scope="module")
def report_path(tmp_path_factory):
    studies = tmp_path_factory.mktemp("studies")
    sqlite_study(studies, "qwen-mtp")
    return write_report(None, "qwen-mtp", studies_dir=studies, png=True)


def test_pareto_plot_renders_offline(report_path, tmp_path):
    from playwright.sync_api import sync_playwright

    url = report_path.resolve().as_uri()
    requests: list[str] = []
    errors: list[str] = []
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.on("request", lambda r: requests.append(r.url))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url, wait_until="load")
            page.wait_for_selector("#fig-pareto .main-svg", timeout=30_000)
            points = page.locator("#fig-pareto .scatterlayer .point").count()
            front_line = page.locator("#fig-pareto .scatterlayer .js-line").count()
            legend = page.locator("#fig-pareto .legendtext").all_text_contents()
            shot = page.locator("#fig-pareto").screenshot()

            blank = browser.new_page(viewport=VIEWPORT)
            blank.set_content('<div id="x" style="width:1300px;height:620px"></div>')
            blank_shot = blank.locator("#x").screenshot()
        finally:
            browser.close()

    assert requests == [url], f"the page fetched something: {requests}"
    assert errors == []
    # Each of the 16 trials has a point (those without a measurement in the column at 0 tok/s),
    # plus the ring that marks the default trial.
    assert points == 17
    assert front_line >= 1
    assert any("Pareto-optimal" in t for t in legend)
    assert any("sglang defaults" in t for t in legend)
    assert any("crashed" in t for t in legend) and any("violates an SLO" in t for t in legend)
    # A rendered plot compresses far worse than an empty area of the same size.
    assert png_size(shot)[0] > 1000
    assert len(shot) > 5 * len(blank_shot), (len(shot), len(blank_shot))


def test_png_export_with_kaleido(report_path):
    png = report_path.parent / "pareto.png"
    data = png.read_bytes()
    assert png_size(data) == (1400, 760)
    assert len(data) > 20_000  # a blank 1400x760 image is a few kB
