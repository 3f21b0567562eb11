"""Input people get wrong (issue 13): each is one line naming the thing, the value and the fix,
exits non-zero without a traceback, and leaves no study and no file behind."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from support.fixture_studies import sqlite_study

from tuner.results.catalog import list_studies
from tuner.space.load import default_space_path

optuna.logging.set_verbosity(optuna.logging.WARNING)

SEED = default_space_path().read_text()
MEM_LINE = "  mem_fraction_static: {low: 0.70, high: 0.95, step: 0.01}\n"
MEM_LINENO = SEED.splitlines(keepends=True).index(MEM_LINE) + 1


def seed_with(line: str) -> str:
    return SEED.replace(MEM_LINE, line)


def tuner(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


SPACE_CASES = [
    # A missing '}' is reported where it was opened, not three lines later where PyYAML noticed.
    (
        seed_with("  mem_fraction_static: {low: 0.70, high: 0.95, step: 0.01\n"),
        rf"space\.yaml:{MEM_LINENO}:24: invalid YAML: the '\{{' opened here "
        rf"\('mem_fraction_static: \{{low: 0\.70, high: 0\.95, step: 0\.01'\) is not closed "
        rf"before line {MEM_LINENO + 3} ",
    ),
    (
        seed_with("  mem_fraction_static: {low: 0.70, high: 1.5}\n"),
        r"space\.yaml: params\.mem_fraction_static\.high: 1\.5 is out of range: "
        r"mem_fraction_static is a fraction of GPU memory, allowed 0 < value <= 1$",
    ),
    (
        seed_with("  mem_fraction_static: {high: 1.5}\n"),
        r"space\.yaml: params\.mem_fraction_static\.low: a range needs both low and high$",
    ),
    (
        seed_with("  mem_fraction_static: {choices: [0.8, 0]}\n"),
        r"params\.mem_fraction_static\.choices: 0 is out of range: .* allowed 0 < value <= 1$",
    ),
    (
        SEED.replace(
            "max_running_requests: {low: 1, high: concurrency, log: true}",
            "max_running_requests: {low: 0, high: concurrency}",
        ),
        r"params\.max_running_requests\.low: 0 is out of range: max_running_requests is a "
        r"count, allowed 1 <= value$",
    ),
    (
        SEED.replace(
            "hicache_ratio: {low: 1.0, high: 8.0, step: 0.5",
            "hicache_ratio: {low: -1.0, high: 8.0, step: 0.5",
        ),
        r"params\.hicache_ratio\.low: -1\.0 is out of range: hicache_ratio is a ratio of host "
        r"to GPU cache size, allowed 0 < value$",
    ),
]


@pytest.mark.parametrize(("text", "expected"), SPACE_CASES)
def test_a_bad_search_space_is_one_line_and_leaves_no_study(tmp_path, text, expected):
    (tmp_path / "space.yaml").write_text(text)
    result = tuner(tmp_path, "optimize", "--space", "space.yaml", "--trials", "1")
    assert re.search(expected, one_line_error(result)), result.stderr
    assert not (tmp_path / "studies").exists() or not any((tmp_path / "studies").iterdir())
    assert list_studies(None, tmp_path / "studies") == []  # what `tuner studies` lists


EXPORT_CASES = [
    (
        ["--trial", "9"],
        r"error: trial 9 never ran a server \(invalid \(startup_rule\): speculative decoding "
        r"with no_buffer needs the radix cache off\): nothing measured to export; choose a "
        r"trial that served the benchmark, or --pick knee$",
    ),
    (["--trial", "4"], r"error: trial 4 never ran a server \(launch failed \(cuda_graph\)"),
    (["--trial", "10"], r"error: trial 10 never ran a server \(skipped \(not_enough_memory\)"),
    (["--slo", "p99_ttft_ms=2000"], r"--slo 'p99_ttft_ms=2000' is not a limit: write METRIC<="),
    (["--slo", "p99_ttf_ms<=2000"], r"no trial measured 'p99_ttf_ms'; metrics recorded: "),
    (["--pick", "best"], r"--pick 'best': choose one of max-throughput, min-latency, knee$"),
    (
        ["--slo", "p99_ttft_ms<=1000"],
        r"no trial of study 'qwen-mtp' served the whole benchmark within p99_ttft_ms <= 1000 "
        r"\(.*\); trial 3 comes closest, within p99_ttft_ms <= 1200: tuner export --study "
        r"qwen-mtp --studies-dir runs --pick knee --slo 'p99_ttft_ms<=1200' \(--slo "
        r"replaces the study's SLOs\), or run more trials$",
    ),
]


@pytest.mark.parametrize(("args", "expected"), EXPORT_CASES)
def test_a_bad_export_is_one_line_and_writes_nothing(tmp_path, args, expected):
    # The study is in a --studies-dir of its own: the suggested command must carry it.
    sqlite_study(tmp_path / "runs", "qwen-mtp")
    out = tmp_path / "out"
    where = ["--study", "qwen-mtp", "--studies-dir", "runs", "--out-dir", str(out)]
    result = tuner(tmp_path, "export", *where, *args)
    assert re.search(expected, one_line_error(result)), result.stderr
    assert not out.exists()


def test_the_suggested_export_command_works(tmp_path):
    sqlite_study(tmp_path / "runs", "qwen-mtp")
    failed = tuner(tmp_path, "export", "--studies-dir", "runs", "--slo", "p99_ttft_ms<=1000").stderr
    command = shlex.split(failed.split(": tuner export ", 1)[1].split(" (--slo", 1)[0])
    result = tuner(tmp_path, "export", *command)
    assert result.returncode == 0, result.stderr
    assert "trial 3 of qwen-mtp (--pick knee)" in result.stdout
    script = (tmp_path / "launch_qwen-mtp_trial3.sh").read_text()
    assert "with --slo p99_ttft_ms <= 1200 (instead of the study's SLOs)" in script


def test_export_help_says_slo_replaces_the_study_slos(tmp_path):
    result = tuner(tmp_path, "export", "--help")
    text = " ".join(result.stdout.replace("│", " ").split())  # rich wraps it in a box
    assert "replaces the study's SLOs for this pick" in text
