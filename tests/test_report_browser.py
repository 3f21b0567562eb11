"""The report page in a real browser: the Pareto plot renders offline, with no request made."""

from __future__ import annotations

import optuna
import pytest
from support.chromium_helper import launch, png_size
from support.fixture_studies import sqlite_study

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
    # The 11 trials that measured both objectives (7 feasible, 2 breaking the SLO, 2 pruned)
    # and the ring that marks the default trial; the 5 that measured nothing are not drawn.
    assert points == 12
    assert front_line >= 1
    assert any("Pareto-optimal" in t for t in legend)
    assert any("sglang defaults" in t for t in legend)
    assert any("pruned" in t for t in legend) and any("violates an SLO" in t for t in legend)
    assert not any("crashed" in t or "not launched" in t for t in legend)
    # A rendered plot compresses far worse than an empty area of the same size.
    assert png_size(shot)[0] > 1000
    assert len(shot) > 5 * len(blank_shot), (len(shot), len(blank_shot))


def test_png_export_with_kaleido(report_path):
    png = report_path.parent / "pareto.png"
    data = png.read_bytes()
    assert png_size(data) == (1400, 760)
    assert len(data) > 20_000  # a blank 1400x760 image is a few kB


# What the page draws, read from plotly's own figure objects in the browser.
_DRAWN = """() => {
    const fig = (id) => document.getElementById(id);
    const text = (sel) => [...document.querySelectorAll(sel)].map((n) => n.textContent);
    const labels = '#fig-parallel .axis-title, #fig-parallel .gtitle';
    const boxes = [...document.querySelectorAll(labels)].map((n) => {
        const r = n.getBoundingClientRect();
        return [r.left, r.top, r.right, r.bottom];
    });
    const verdict = document.getElementById('verdict');
    return {
        verdictClass: verdict.className,
        verdictBackground: getComputedStyle(verdict).backgroundColor,
        xTitle: text('#fig-pareto .xtitle')[0],
        yTitle: text('#fig-pareto .ytitle')[0],
        hover: fig('fig-pareto').data.flatMap((t) => t.hovertext || []),
        xs: fig('fig-pareto').data.flatMap((t) => t.x),
        ys: fig('fig-pareto').data.flatMap((t) => t.y),
        notes: text('#fig-pareto .annotation-text'),
        labelBoxes: boxes,
        parallelTicks: text('#fig-parallel .tick text'),
    };
}"""


def _drawn(path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(path.resolve().as_uri(), wait_until="load")
            page.wait_for_selector("#fig-pareto .main-svg", timeout=30_000)
            page.wait_for_selector("#fig-parallel .axis-title", timeout=30_000)
            return page.evaluate(_DRAWN)
        finally:
            browser.close()


def _drawn_trials(drawn) -> set[int]:
    return {int(h.split("trial ", 1)[1].split("<", 1)[0]) for h in drawn["hover"]}


def _overlapping(boxes):
    return [
        (a, b)
        for i, a in enumerate(boxes)
        for b in boxes[i + 1 :]
        if a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
    ]


def test_a_study_with_no_feasible_trial(tmp_path):
    # The default (0) and trial 1 served the benchmark, both above p99_ttft_ms <= 100;
    # 4 failed to launch, 9 broke a start-up rule, 10 was skipped by the memory estimate.
    sqlite_study(tmp_path, "none-ok", only=[0, 1, 4, 9, 10], slo_limit_ms=100.0)
    drawn = _drawn(write_report(None, "none-ok", studies_dir=tmp_path))
    assert drawn["verdictClass"] == "verdict verdict-nothing"
    assert drawn["verdictBackground"] == "rgb(253, 236, 234)"  # red, not the green of a gain
    assert drawn["xTitle"] == "output tok/s (more is better)"
    assert drawn["yTitle"] == "median TPOT (ms)"
    assert _drawn_trials(drawn) == {0, 1}
    assert sorted(drawn["xs"]) == [180.0, 180.0, 234.0]  # the default's ring doubles it
    assert sorted(drawn["ys"]) == [14.0, 45.0, 45.0]
    assert drawn["notes"] == [
        "not drawn: 3 trials without a measurement (crashed, not launched, tuner errors; "
        "listed below the plots)"
    ]


def test_never_launched_trials_are_not_drawn_as_measured_points(report_path):
    drawn = _drawn(report_path)
    assert drawn["verdictClass"] == "verdict verdict-improved"
    assert drawn["xTitle"] == "output tok/s (more is better)"
    # 4 (launch failed), 9 (start-up rule), 10 (skipped), 11 (died, nothing measured) and
    # 15 (tuner error) have no point; every drawn x is a measured throughput, none is 0.
    assert _drawn_trials(drawn) == {0, 1, 2, 3, 5, 6, 7, 8, 12, 13, 14}
    assert min(drawn["xs"]) == 120.0 and 0.0 not in drawn["ys"]
    assert drawn["notes"] and drawn["notes"][0].startswith("not drawn: 5 trials")
    # Parallel coordinates: the 9 axis labels and the title stand clear of each other; no tick
    # in e-notation.
    assert len(drawn["labelBoxes"]) == 10
    assert _overlapping(drawn["labelBoxes"]) == []
    assert not [t for t in drawn["parallelTicks"] if "e+" in t or "e-" in t]
