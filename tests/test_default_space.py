"""The shipped spaces are found from any working directory, as the quick start needs."""

from __future__ import annotations

import subprocess
import sys

from tuner.space.load import default_space_path, shipped_spaces


def test_the_default_space_is_found_beside_the_package_not_under_the_working_directory(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # no search_spaces/ here
    assert default_space_path().is_file()
    assert {"qwen3.6-27b-mtp-hicache", "qwen3-8b-h200"} <= set(shipped_spaces())


def _dry_run(cwd, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner.cli", "optimize", "--dry-run", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_optimize_runs_the_default_space_from_another_directory(tmp_path):
    run = _dry_run(tmp_path, "--trials", "2")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "dry run: nothing launched" in run.stdout
    shipped = _dry_run(tmp_path, "--space", "qwen3-8b-h200")
    assert shipped.returncode == 0, shipped.stdout + shipped.stderr
