"""The stop rule end to end on the simulator: a study that stops by itself and says so, the
same command that finds it done, `--min-gain 0` that runs the rest of the budget."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
from support.sim_spaces import small_space

from tuner.optimize.command import run_optimize
from tuner.results import record
from tuner.results.storage import open_storage
from tuner.study.budget import measured_count
from tuner.study.options import StudyOptions
from tuner.study.stopping import StopRule

# The small space's optimum comes within the guide's first picks; a short window shows the stop
# in a few trials instead of the default 12 + 8.
QUICK = StopRule(min_trials=4, patience=2)
BUDGET = 12


def _launched(tmp_path: Path) -> int:
    storage = open_storage(None, "small", tmp_path / "studies")
    return measured_count(optuna.load_study(study_name="small", storage=storage).get_trials())


def _quick(tmp_path: Path, space: Path, trials: int, **kw: Any) -> StudyOptions:
    """The small space's study under the QUICK rule, seeded, in tmp_path's studies folder."""
    return StudyOptions(
        trials=trials,
        space_path=space,
        studies_dir=tmp_path / "studies",
        seed=0,
        stop_rule=QUICK,
        **kw,
    )


def test_a_study_stops_by_the_rule_says_why_and_resumes_with_min_gain_0(tmp_path, capsys):
    space = small_space(tmp_path)

    def optimize(min_gain: float) -> str:
        options = _quick(tmp_path, space, BUDGET, min_gain=min_gain)
        assert run_optimize(options, workers=1, report=False) == 0
        return " ".join(capsys.readouterr().out.split())

    out = optimize(0.01)
    stopped_at = _launched(tmp_path)
    assert 4 <= stopped_at < BUDGET
    assert (
        f"done after {stopped_at} of {BUDGET} trials: the last 2 launched trials moved the front"
        in out
    )
    assert f"Saved {BUDGET - stopped_at} launches, ~" in out and "GPU hours (modelled)" in out
    assert "the same command with --min-gain 0" in out

    again = optimize(0.01)  # the same command: the evidence has not changed, nothing launched
    assert _launched(tmp_path) == stopped_at
    assert f"done after {stopped_at} of {BUDGET} trials" in again

    rest = optimize(0.0)  # the rest of the budget, on the same study
    assert _launched(tmp_path) == BUDGET
    assert "done after" not in rest
    storage = open_storage(None, "small", tmp_path / "studies")
    study = optuna.load_study(study_name="small", storage=storage)
    assert study.user_attrs[record.STUDY_STOPPED]["launched"] == stopped_at  # stale now


def test_a_min_gain_out_of_range_is_one_line_and_creates_nothing(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "optimize", "--min-gain", "1.5", "--trials", "1"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "--min-gain 1.5: give a share from 0 (off: run every trial) to below 1" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "studies").exists()


def test_limits_out_of_reach_end_the_study_and_name_the_closest_trial(tmp_path, capsys):
    """A p99 TTFT limit of 5 ms that no configuration comes near: the study stops after
    min_trials + patience launches, says which trial came closest, and the summary prints the
    export command with limits that trial meets."""
    space = small_space(tmp_path, slos=["p99_ttft_ms <= 5"])
    options = _quick(tmp_path, space, 10)
    assert run_optimize(options, workers=1, report=False) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert _launched(tmp_path) == 6
    assert "done after 6 of 10 trials: no trial met the SLOs in 6 launches" in out
    assert "the closest, trial 0, measured p99_ttft_ms" in out and "x its limit" in out
    assert "comes closest" in out and "tuner export --study small" in out and "--slo" in out


def test_the_min_gain_help_states_the_default_the_study_uses():
    import typer

    from tuner.cli import app
    from tuner.study.stopping import DEFAULT_MIN_GAIN, StopRule

    command = typer.main.get_command(app).commands["optimize"]  # type: ignore[attr-defined]
    option = next(p for p in command.params if p.name == "min_gain")
    assert f"(default {DEFAULT_MIN_GAIN:g} = {DEFAULT_MIN_GAIN:.0%})" in option.help
    assert StudyOptions(trials=1).min_gain == StopRule().min_gain == DEFAULT_MIN_GAIN
