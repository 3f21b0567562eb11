"""`--goal capacity` end to end on the simulator: what the goal sets, the closed-loop refusal,
the rate steps each trial records, the export pick, the words and the report's figure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from support.sim_spaces import small_space

from tuner.errors import UserError
from tuner.optimize.command import run_optimize
from tuner.optimize.progress import rate_step_words
from tuner.results import record
from tuner.results.export import export_trial
from tuner.results.goals import (
    GOALS,
    SUSTAINED_RATE,
    Slo,
    capacity_words,
    goal_defaults,
)
from tuner.results.report import write_report
from tuner.results.storage import open_storage
from tuner.study.loop import stop_rule
from tuner.study.options import StudyOptions
from tuner.study.run import resolve_run

CAPACITY = GOALS["capacity"]


def open_loop_space(tmp_path: Path, name: str = "open", **overrides: object) -> Path:
    """The small simulator space as an open loop of short requests, without objectives and
    SLOs of its own (the goal gives them)."""
    path = small_space(
        tmp_path,
        name=name,
        workload={"kind": "random", "num_requests": 40, "input_len": 512, "output_len": 32},
        bench={"concurrency": None, "request_rate": 1.0, "stages": 2, "warmup_requests": 1},
        params={"max_running_requests": {"low": 2, "high": 32, "log": True}},
        **overrides,
    )
    data = yaml.safe_load(path.read_text())
    data.pop("objectives", None)
    if "slos" not in overrides:
        data.pop("slos", None)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_the_capacity_goal_maximizes_the_sustained_rate_and_keeps_the_files_other_choices():
    assert goal_defaults(CAPACITY, {}) == {
        "objectives": {"throughput": SUSTAINED_RATE, "latency": "p99_tpot_ms"},
        "slos": ["p99_ttft_ms <= 3000"],
    }
    # The file's latency objective and SLOs win; what is maximized is what the goal means.
    own = {"objectives": {"throughput": "output_throughput", "latency": "median_tpot_ms"}}
    assert goal_defaults(CAPACITY, {**own, "slos": ["p99_ttft_ms <= 800"]}) == {
        "objectives": {"throughput": SUSTAINED_RATE, "latency": "median_tpot_ms"}
    }
    rule = stop_rule(StudyOptions(goal="capacity"))
    assert rule.measure == "throughput" and rule.noise == CAPACITY.noise > 0


def test_the_sustained_rate_in_words():
    slos = [Slo("p99_ttft_ms", "<=", 3000.0), Slo("p99_tpot_ms", "<=", 50.0)]
    assert capacity_words(7.5, slos[:1]) == "sustains 7.5 req/s with p99 TTFT <= 3 s"
    assert capacity_words(2.456, slos) == (
        "sustains 2.46 req/s with p99 TTFT <= 3 s and p99 TPOT <= 50 ms"
    )
    assert capacity_words(0.0, slos[:1]) == "sustains no tested rate with p99 TTFT <= 3 s"
    step = {"step": 2, "rate": 1.5, "met": False, "broke": "p99_ttft_ms <= 3000"}
    words = rate_step_words({**step, "stopped_early": True, "completed": 8, "requests": 40})
    assert words == (
        "rate step 3: 1.5 req/s broke p99_ttft_ms <= 3000, stopped after 8 of 40 requests"
    )


def test_capacity_on_a_closed_loop_space_is_one_clear_line_and_exit_2(tmp_path):
    closed = small_space(tmp_path, name="closed")  # concurrency 8, no request_rate
    result = subprocess.run(
        [
            *(sys.executable, "-m", "tuner.cli", "optimize", "--space", str(closed)),
            *("--goal", "capacity", "--trials", "2", "--studies-dir", str(tmp_path / "studies")),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "closed.yaml: bench: the capacity objective" in lines[0]
    assert "needs an open-loop benchmark: set bench.request_rate" in lines[0]
    assert "this space has concurrency 8, no request_rate" in lines[0]
    assert not (tmp_path / "studies").exists() or not any((tmp_path / "studies").iterdir())


def test_capacity_needs_a_latency_limit(tmp_path):
    path = open_loop_space(tmp_path, name="nolimit", slos=[])
    with pytest.raises(UserError, match=r"slos: the capacity objective .* needs a latency limit"):
        resolve_run(StudyOptions(space_path=path, goal="capacity"))


def test_a_capacity_study_end_to_end_on_the_simulator(tmp_path, capsys):
    options = StudyOptions(
        trials=3,
        space_path=open_loop_space(tmp_path),
        studies_dir=tmp_path,
        seed=0,
        goal="capacity",
        min_gain=0.0,
    )
    assert run_optimize(options, workers=1, report=False) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "sustains" in out and "with p99 TTFT <= 3 s" in out
    assert "--pick max-throughput" in out

    storage = open_storage(None, "open", tmp_path)
    study = optuna.load_study(study_name="open", storage=storage)
    assert study.user_attrs[record.STUDY_GOAL] == "capacity"
    assert study.user_attrs[record.STUDY_OBJECTIVES][0]["metric"] == SUSTAINED_RATE
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert complete, [t.user_attrs.get(record.FAILURE_MSG) for t in study.trials]
    for t in complete:
        steps = t.user_attrs[record.RATE_STEPS]
        met = [s["rate"] for s in steps if s["met"]]
        broken = [s["rate"] for s in steps if not s["met"]]
        assert steps[0]["rate"] == 1.0  # bench.request_rate: where each search starts
        # The objective is the highest met step, below every broken one, within the tolerance.
        assert t.values[0] == max(met) == t.user_attrs[record.METRICS][SUSTAINED_RATE]
        assert broken and max(met) < min(broken) <= max(met) * 1.04 + 1e-9
        # The latency objective is read at the sustained rate's step.
        at = next(s for s in steps if s["rate"] == max(met))
        assert t.values[1] == pytest.approx(at["metrics"]["p99_tpot_ms"])
        assert record.feasible(t.user_attrs[record.CONSTRAINTS])

    exported = export_trial(storage, "open", out_dir=tmp_path)
    assert exported.picked_by == "max-throughput"
    best = max(t.values[0] for t in complete)
    chosen = study.trials[exported.trial_number]
    assert chosen.values[0] == best

    page = write_report(storage, "open", studies_dir=tmp_path).read_text()
    assert 'id="capacity-list"' in page and 'id="fig-capacity"' in page
    assert "Request rate against latency" in page
