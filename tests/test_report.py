"""write_report: one self-contained page per study, whatever the study holds."""

from __future__ import annotations

import re

import optuna
import pytest
from plotly.offline import get_plotlyjs
from support.fixture_studies import build_study, sqlite_study

from tuner.errors import UserError
from tuner.results.report import write_report

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def sample_page(tmp_path_factory):
    studies = tmp_path_factory.mktemp("studies")
    sqlite_study(studies, "qwen-mtp")
    path = write_report(None, "qwen-mtp", studies_dir=studies)
    return path, path.read_text(encoding="utf-8")


def test_report_goes_to_studies_dir_per_study(sample_page, tmp_path):
    path, _ = sample_page
    assert path.name == "report.html" and path.parent.name == "qwen-mtp"
    assert path.parent.parent.name.startswith("studies")


def test_plotly_js_is_embedded_exactly_once_and_nothing_is_fetched(sample_page):
    _, page = sample_page
    bundle = get_plotlyjs()
    assert page.count(bundle) == 1
    # Outside the bundle (whose option defaults mention URLs it never loads here) the page
    # names no address at all: no script, stylesheet, font or image to fetch.
    ours = page.replace(bundle, "")
    assert not re.search(r"https?://", ours)
    assert not re.search(r"<script[^>]+src=", ours)
    assert "<link" not in ours and "@import" not in ours


def test_page_holds_every_section(sample_page):
    _, page = sample_page
    for div in ("fig-pareto", "fig-history", "fig-importance", "fig-parallel"):
        assert f'id="{div}"' in page
    assert 'id="authority"' not in page  # optuna-dashboard reads the constraints too now
    assert "x2.28 output tok/s" in page  # the verdict
    assert "Run on the simulated server" in page


def test_pareto_table_lists_the_front_with_capacity_and_launch_command(sample_page):
    _, page = sample_page
    table = page.split('id="pareto-table"', 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr><td>(\d+)", table)
    assert rows == ["2", "12", "14", "5"]  # highest throughput first
    assert "245000" in table  # KV tokens of trial 12
    assert "python3 -m sglang.launch_server --model-path Qwen/Qwen3.6-27B" in table
    assert "--sim-" not in table
    assert 'class="tag">knee' in table


def test_failures_are_listed_with_their_reason(sample_page):
    _, page = sample_page
    table = page.split('id="failure-table"', 1)[1].split("</table>", 1)[0]
    assert re.findall(r"<tr><td>(\d+)", table) == ["4", "9", "10", "11", "15"]
    assert "Capture cuda graph failed" in table


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"with_default": False}, "No default trial in this study"),
        ({"slo_limit_ms": 10.0}, "nothing to recommend"),
        ({"only": [4, 9, 10]}, "nothing to recommend"),  # nothing launched at all
        ({"only": []}, "nothing to recommend"),  # an empty study
    ],
)
def test_honest_pages_for_degenerate_studies(tmp_path, kwargs, expected):
    url = f"sqlite:///{tmp_path / 's.db'}"
    build_study(url, "s", **kwargs)
    out = write_report(url, "s", out_path=tmp_path / "r" / "page.html")
    page = out.read_text(encoding="utf-8")
    assert out == tmp_path / "r" / "page.html"
    assert expected in page


def test_unknown_study_is_a_user_error(tmp_path):
    sqlite_study(tmp_path, "qwen-mtp", only=[0])
    with pytest.raises(UserError, match="qwen-mtp"):
        write_report(None, "other", studies_dir=tmp_path)
