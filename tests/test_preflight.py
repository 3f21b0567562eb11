"""Before the first launch: the cost `tuner optimize` prints, `--dry-run`, and the sglang release
check of `--engine sglang` with its translated space."""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from support.sim_spaces import small_space

from tuner import launcher
from tuner.engines.model_config import ModelMemory
from tuner.host import HostFacts
from tuner.optimize.command import run_optimize
from tuner.optimize.cost import GRAPH_CAPTURE_S, LOAD_RATE_GB_S, PROCESS_START_S, study_cost
from tuner.space.load import load_space
from tuner.study.loop import run_study
from tuner.study.options import StudyOptions
from tuner.study.run import resolve_run
from tuner.trial import measure as serve

ROOT = Path(__file__).resolve().parents[1]
QWEN3_8B = ROOT / "search_spaces" / "qwen3-8b-h200.yaml"


def _dry_run(tmp_path: Path, space: Path, *extra: str) -> str:
    argv = [sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space), "--dry-run"]
    argv += ["--studies-dir", str(tmp_path / "studies"), "--seed", "0", *extra]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_dry_run_prints_the_cost_and_the_first_configurations_and_stores_nothing(tmp_path):
    out = _dry_run(tmp_path, QWEN3_8B, "--trials", "7")
    assert "cost: 7 launches" in out
    assert f"weights at {LOAD_RATE_GB_S:g} GB/s" in out  # the assumed load rate is stated
    assert re.search(r"total +~\d+\.\d\d GPU hours", out)
    scale = load_space(QWEN3_8B).sim["time_scale"]
    assert "simulator: ~" in out and f"at time scale {scale:g}" in out
    # the default first, then the estimate's picks (H200 is in the spec table), then the sampler
    assert "trial 0 sglang's defaults: (nothing: sglang defaults)" in out
    assert re.search(r"trial 1 estimate: --mem-fraction-static", out)
    assert re.search(r"trial 5 sampler: ", out)
    assert "dry run: nothing launched, no study created" in out
    assert not (tmp_path / "studies").exists()


def test_dry_run_of_a_grid_smaller_than_the_preview_lists_each_point_once(tmp_path):
    # Telling the preview's last grid point made Optuna's GridSampler call study.stop(), which
    # raises outside study.optimize.
    space = small_space(tmp_path)
    data = yaml.safe_load(space.read_text())
    data["params"] = {"max_running_requests": {"choices": [4, 8]}}
    space.write_text(yaml.safe_dump(data))
    out = _dry_run(tmp_path, space, "--sampler", "grid", "--trials", "10", "--no-guide")
    sampled = re.findall(r"trial \d+ sampler: (.*)", out)
    assert sorted(sampled) == ["--max-running-requests 4", "--max-running-requests 8"]
    assert "dry run: nothing launched, no study created" in out


def test_dry_run_starts_no_server(tmp_path, monkeypatch):
    def no_launch(*_args: object, **_kw: object) -> None:
        raise AssertionError("a dry run started a server")

    monkeypatch.setattr(launcher, "start", no_launch)
    monkeypatch.setattr(launcher, "launch", no_launch)
    monkeypatch.setattr(serve, "launch", no_launch)  # the trial path's own reference
    options = StudyOptions(trials=3, space_path=QWEN3_8B, studies_dir=tmp_path / "s", seed=0)
    assert run_optimize(options, workers=1, report=False, dry_run=True) == 0
    assert not (tmp_path / "s").exists()


def test_the_cost_model(tmp_path):
    model = ModelMemory.from_model_path(ROOT / "tuner" / "sim" / "profiles" / "model" / "qwen3-8b")
    assert model is not None
    run = resolve_run(StudyOptions(trials=40, space_path=QWEN3_8B, engine="sim"))
    run = replace(run, host=HostFacts("NVIDIA H200", 141.0, model))
    cost = study_cost(run, done=10)
    assert cost.launches == 30
    weights_gb = model.weight_bytes / 1e9
    assert cost.launch_s == pytest.approx(PROCESS_START_S + weights_gb + GRAPH_CAPTURE_S)
    assert cost.gpu_hours == pytest.approx(30 * (cost.launch_s + cost.bench_s) / 3600)
    assert "the estimate for sglang's defaults on H200" in cost.bench_rule
    assert cost.sim_wall_s is not None and cost.sim_wall_s < cost.gpu_hours * 3600 / 10
    # An unknown GPU: a stated rough rule instead of the estimate.
    rough = study_cost(replace(run, host=HostFacts("Some Future GPU", None, model)))
    assert "rough rule" in rough.bench_rule and rough.bench_s > 0
    assert "(10 already in the study)" in cost.lines()[0]


def test_the_cost_model_on_a_cpu_counts_no_graph_capture_and_no_gpu(tmp_path):
    # The shipped CPU space (real sglang on a CPU): sglang 0.5.23 captures no graph there, and no
    # GPU serves the trials, even on a host that has one beside.
    cpu_space = ROOT / "search_spaces" / "tiny-llama-cpu.yaml"
    options = StudyOptions(
        trials=10, space_path=cpu_space, engine="sglang", engine_python=sys.executable, tp_size=2
    )
    model = ModelMemory.from_model_path(ROOT / "tuner" / "sim" / "profiles" / "model" / "qwen3-8b")
    assert model is not None
    run = replace(resolve_run(options), host=HostFacts("NVIDIA H200", 141.0, model))
    cost = study_cost(run)
    weights_gb = model.weight_bytes / 1e9
    assert cost.on_cpu
    # two tensor-parallel ranks each load half the weights, at once
    assert cost.launch_s == pytest.approx(PROCESS_START_S + weights_gb / 2 / LOAD_RATE_GB_S)
    assert cost.gpu_hours == pytest.approx(10 * (cost.launch_s + cost.bench_s) / 3600)  # not x2
    assert "no estimate for a CPU" in cost.bench_rule and "H200" not in cost.bench_rule
    text = "\n".join(cost.lines())
    assert "CUDA" not in text and "GPU" not in text, text
    assert "no graph capture on a CPU" in text
    assert re.search(r"total +~\d+\.\d\d hours of the CPU host;", text)
    # The same space on the GPU: graphs counted, the estimate for the GPU, GPU hours x2.
    flags = {k: v for k, v in run.space.fixed_flags.items() if k != "device"}
    gpu_run = replace(run, space=run.space.model_copy(update={"fixed_flags": flags}))
    gpu_cost = study_cost(gpu_run)
    assert not gpu_cost.on_cpu
    assert gpu_cost.launch_s == pytest.approx(cost.launch_s + GRAPH_CAPTURE_S)
    assert "CUDA graphs" in "\n".join(gpu_cost.lines())
    assert gpu_cost.gpu_hours == pytest.approx(
        10 * (gpu_cost.launch_s + gpu_cost.bench_s) * 2 / 3600
    )


def test_a_resumed_study_costs_only_what_is_left(tmp_path):
    space = small_space(tmp_path)
    run_study(
        resolve_run(
            StudyOptions(trials=1, space_path=space, studies_dir=tmp_path / "studies", seed=0)
        )
    )
    out = _dry_run(tmp_path, space, "--trials", "3")
    assert "cost: 2 launches (1 already in the study)" in out
