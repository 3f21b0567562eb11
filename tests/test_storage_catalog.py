"""`tuner studies` and the reader commands' wiring (report, export) on the command line."""

from __future__ import annotations

import subprocess
import sys

import optuna
from support.fixture_studies import build_study, sqlite_study
from typer.testing import CliRunner

from tuner.cli import app
from tuner.results.catalog import format_listing, list_studies

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_lists_every_study_file_with_counts_and_best_points(tmp_path):
    sqlite_study(tmp_path, "qwen-mtp")
    sqlite_study(tmp_path, "small", only=[0, 4])
    (tmp_path / "junk.db").write_text("not a database")
    listings = {s.name: s for s in list_studies(None, tmp_path)}
    qwen = listings["qwen-mtp"]
    assert qwen.trials == 16
    assert qwen.by_state == {"COMPLETE": 8, "PRUNED": 7, "FAIL": 1}
    assert qwen.feasible == 7 and qwen.pareto_size == 4
    assert qwen.best_throughput.trial == 2 and qwen.best_latency.trial == 5
    assert listings["small"].feasible == 1
    assert any(s.error for s in listings.values())  # the junk file is reported, not fatal

    text = format_listing(list(listings.values()))
    assert "highest output tok/s: trial 2 (410.0 output tok/s at 30.0 ms median TPOT)" in text
    assert "lowest median TPOT: trial 5 (20.0 ms median TPOT at 330.0 output tok/s)" in text
    assert "16 (8 complete, 7 pruned, 1 fail)" in text


def test_lists_a_storage_with_several_studies_and_one_without_feasible_trials(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    build_study(url, "a", only=[0, 2])
    build_study(url, "b", only=[4, 9])
    text = format_listing(list_studies(url, tmp_path))
    assert text.index("a  (") < text.index("b  (")
    assert "no trial served the whole benchmark within the constraints" in text
    assert format_listing(list_studies(None, tmp_path / "empty")) == "no studies found"


def test_cli_report_export_and_studies(tmp_path):
    studies = tmp_path / "studies"
    sqlite_study(studies, "qwen-mtp")
    runner = CliRunner()
    result = runner.invoke(app, ["studies", "--studies-dir", str(studies)])
    assert result.exit_code == 0 and "qwen-mtp" in result.output

    # No --study: the only study is used.
    result = runner.invoke(app, ["report", "--studies-dir", str(studies)])
    assert result.exit_code == 0, result.output
    assert (studies / "qwen-mtp" / "report.html").exists()

    out_dir = tmp_path / "out"
    args = ["export", "--studies-dir", str(studies), "--out-dir", str(out_dir)]
    result = runner.invoke(app, [*args, "--pick", "min-latency", "--slo", "p99_ttft_ms<=1700"])
    assert result.exit_code == 0, result.output
    assert "trial 14 of qwen-mtp" in result.output  # 5 (1900 ms) is filtered out
    assert (out_dir / "launch_qwen-mtp_trial14.sh").exists()
    assert (out_dir / "launch_qwen-mtp_trial14.yaml").exists()


def test_user_errors_are_one_line_and_exit_2(tmp_path):
    sqlite_study(tmp_path, "qwen-mtp", only=[0])
    for args in (
        ["export", "--study", "missing"],
        ["export", "--pick", "fastest"],
        ["report", "--storage", "nosuchdialect://x"],
    ):
        out = subprocess.run(
            [sys.executable, "-m", "tuner.cli", *args, "--studies-dir", str(tmp_path)],
            capture_output=True,
            text=True,
        )
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.startswith("error: ") and "Traceback" not in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


def test_the_best_points_and_the_report_name_the_rule_that_proposed_them(tmp_path):
    """A trial's `guided_by` (the search rule that proposed it) reaches `tuner studies` and the
    report's Pareto table; a study that never recorded one shows nothing in its place."""
    from tuner.results.report import write_report
    from tuner.results.storage import open_storage

    url = sqlite_study(tmp_path, "qwen-mtp", rules={2: "polish:edge"})
    text = format_listing(list_studies(None, tmp_path))
    assert "trial 2 (410.0 output tok/s at 30.0 ms median TPOT), proposed by polish:edge" in text
    assert "trial 5 (20.0 ms median TPOT at 330.0 output tok/s)\n" in text + "\n"

    page = write_report(open_storage(url, "qwen-mtp", tmp_path), "qwen-mtp", studies_dir=tmp_path)
    table = page.read_text().split('id="pareto-table"', 1)[1].split("</table>", 1)[0]
    assert "<th>proposed by</th>" in table
    rows = {row.split("<", 1)[0].strip(): row for row in table.split("<tr><td>")[1:]}
    assert "<td>polish:edge</td>" in rows["2"]
    assert all("polish:edge" not in row for number, row in rows.items() if number != "2")
