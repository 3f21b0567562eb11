"""The quality benchmark (benchmarks/quality/) runs end to end (--fast), its figures are
well-formed, and its Pareto figures are tuner.results.pareto's.

Only shape is checked here: what the figures are is the benchmark's business, not the test's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.chromium_helper import CHROMIUM

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "tuner_quality.py"  # the old path: the README's commands
METHODS = (
    "default",
    "wrong-estimate",
    "no-warm-start",
    "no-polish",
    "tpe",
    "tpe-no-pruning",
    "tpe-no-feasibility",
    "random",
    "model-free",
    "grid",
    "grid-shuffled",
)


def _can_plot() -> bool:
    try:
        import kaleido  # noqa: F401
    except ImportError:
        return False
    return CHROMIUM is not None


def test_fast_run_writes_well_formed_figures(tmp_path):
    plot = _can_plot()
    argv = [sys.executable, str(SCRIPT), "--fast", "--out", str(tmp_path)]
    run = subprocess.run(
        argv + ([] if plot else ["--no-plot"]), capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    data = json.loads((tmp_path / "tuner_quality.json").read_text())
    table = (tmp_path / "tuner_quality.md").read_text()
    assert set(data["methods"]) == set(METHODS)
    assert data["oracle"]["best_throughput"] > 0 and data["oracle"]["hypervolume"] > 0
    assert "p99_ttft_ms" in " ".join(data["slos"])  # the seed space as shipped
    for name, method in data["methods"].items():
        assert set(method["budgets"]) == {"5", "10"}, name
        for budget, seeds in method["budgets"].items():
            assert len(seeds) == 1
            for f in seeds:
                assert 0.0 <= f["best_fraction"] <= 1.05, (name, f)
                # Trials within the SLOs noise-free are some of those measured within them.
                assert 0.0 <= f["feasible_fraction"] <= f["best_fraction"], (name, f)
                assert 0.0 <= f["hv_fraction"] <= 1.05, (name, f)
                assert f["gpu_hours"] >= 0 and f["crashed"] >= 0, (name, f)
                assert f["pruned"] >= 0 and f["skipped"] >= 0, (name, f)
                reach = f["trials_to_reach"]
                assert reach is None or 1 <= reach <= int(budget), (name, f)
        curve = method["curve"]["median"]
        assert len(curve) == 10 and all(0.0 <= v <= 1.05 for v in curve), name
        assert curve == sorted(curve), name  # best-so-far never goes down
    for name in METHODS:
        assert name in data["methods"] and "| " in table
    if plot:
        assert (tmp_path / "tuner_quality.png").read_bytes()[:4] == b"\x89PNG"


def test_the_package_runs_as_a_module_and_refuses_an_unknown_method():
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.quality", "--methods", "default,nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr[-2000:]
    assert "unknown methods ['nope']" in run.stderr.splitlines()[-1]


def test_front_and_area_are_the_tuners_pareto_figures(benchmarks):
    truth = benchmarks("quality.truth")
    points = [(100.0, 20.0), (200.0, 30.0), (90.0, 40.0), (200.0, 30.0), (150.0, 35.0)]
    # The repeat counts once; (90, 40) and (150, 35) are dominated by (200, 30).
    assert truth.front(points) == [(100.0, 20.0), (200.0, 30.0)]
    # Strips below latency 50: 100 tok/s over [20, 30), 200 over [30, 50).
    assert truth.area(points, 50.0) == 100.0 * 10 + 200.0 * 20
    # Points at or beyond the reference latency, or without throughput, add nothing.
    assert truth.area([(300.0, 50.0), (0.0, 1.0)], 50.0) == 0.0
    assert truth.area([*points, (300.0, 60.0)], 50.0) == 5000.0


@pytest.fixture
def oracle_measurer(benchmarks):
    return benchmarks("oracle_measurer")


def test_config_noise_draws_by_configuration_not_by_trial_number(oracle_measurer, monkeypatch):
    """With BENCH_NOISE=config a configuration's first measurement draws the same noise in two
    studies wherever it falls, its second a new draw; by default the draw follows the number."""
    from tuner.engines import sglang as engine
    from tuner.space.load import load_space

    space = load_space("qwen3.6-27b-mtp-hicache")
    args = engine.build_server_args({"model_path": space.model_path}, space.engine_version)
    other = engine.build_server_args(
        {"model_path": space.model_path, "max_running_requests": 8}, space.engine_version
    )

    def figure(serve, number, server_args):
        stages = []
        serve.measure(number, server_args, lambda c, p: None, lambda s, m: stages.append(m) or True)
        return stages[-1]["output_throughput"]

    by_number = [figure(oracle_measurer.OracleMeasurer(space, seed=4), n, args) for n in (1, 7)]
    assert by_number[0] != by_number[1]
    monkeypatch.setenv("BENCH_NOISE", "config")
    one, two = (oracle_measurer.OracleMeasurer(space, seed=4) for _ in range(2))
    first = figure(one, 1, args)
    assert figure(two, 2, other) != first  # another configuration, another draw
    assert figure(two, 7, args) == first  # the same configuration's first measurement
    assert figure(one, 9, args) != first  # measured again: a new draw
    assert figure(oracle_measurer.OracleMeasurer(space, seed=5), 1, args) != first


def test_oracle_measurer_charges_only_what_ran(oracle_measurer):
    from tuner.engines import sglang as engine
    from tuner.launcher import LaunchError
    from tuner.space.load import load_space

    space = load_space("qwen3.6-27b-mtp-hicache")
    serve = oracle_measurer.OracleMeasurer(space, seed=0)
    args = engine.build_server_args({"model_path": space.model_path}, space.engine_version)
    stages = []
    full = serve.measure(
        0, args, lambda c, p: None, lambda s, summary: stages.append(summary) or True
    )
    assert len(stages) == space.bench.stages and full.stopped_at_stage is None
    assert stages[-1]["completed"] == full.summary["completed"] > stages[0]["completed"]
    cut = serve.measure(1, args, lambda c, p: None, lambda s, summary: False)
    assert cut.stopped_at_stage == 0 and serve.costs[1].pruned
    assert serve.costs[1].launch_s == serve.costs[0].launch_s > 60  # a launch takes minutes
    assert serve.costs[1].bench_s < serve.costs[0].bench_s / 2
    starved = engine.build_server_args(
        {"model_path": space.model_path, "mem_fraction_static": 0.5}, space.engine_version
    )
    with pytest.raises(LaunchError) as failed:
        serve.measure(2, starved, lambda c, p: None, lambda s, summary: True)
    assert failed.value.failure_class == "not_enough_memory"
    assert 0 < failed.value.elapsed_s < serve.costs[0].launch_s
    assert serve.costs[2].crashed and serve.costs[2].bench_s == 0
