"""Tensor parallelism (--tp-size N): a model too large for one GPU, split over N.

The simulator serves it (each GPU holds its share; every layer pays two all-reduces), the
tuner's memory plan and estimate count per GPU, `tuner init` writes `tp_size` into the space,
and the study launches, estimates and counts GPU hours with it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tuner.bench import WorkloadSpec
from tuner.engines.model_config import ModelMemory, read_config
from tuner.errors import UserError
from tuner.init.command import write_space
from tuner.init.write import InitRequest
from tuner.predict.estimate import Estimator, communication
from tuner.predict.gpu_specs import gpu_spec
from tuner.predict.memory import estimate_memory
from tuner.sim.args import parse_args
from tuner.sim.config import resolve_with
from tuner.sim.effects import AllReduce
from tuner.sim.memory import plan_memory
from tuner.sim.oracle import predict
from tuner.sim.perf import build_perf_model
from tuner.sim.profiles import load_hardware, load_model
from tuner.space.load import load_space
from tuner.study.options import StudyOptions
from tuner.study.run import resolve_run
from tuner.trial.same_run import SameRunRules

ROOT = Path(__file__).resolve().parents[1]
LLAMA_70B = ROOT / "tests" / "data" / "models" / "llama-3.3-70b"
WORKLOAD = WorkloadSpec.from_dict({"kind": "random", "requests": 32, "input_len": 512,
                                   "output_len": 64, "seed": 0})  # fmt: skip


def _sim(tp: int, *extra: str, strength: float | None = None):
    argv = ["--model-path", str(LLAMA_70B), "--sim-hardware", "h100-sxm", "--tp-size", str(tp)]
    hw = {"effects": {"allreduce": {"strength": strength}}} if strength is not None else None
    args = parse_args([*argv, *extra])
    return args, resolve_with(args, load_hardware("h100-sxm", hw), load_model(str(LLAMA_70B)))


def test_the_simulator_splits_a_70b_model_and_pays_for_its_all_reduces():
    # 141 GB of weights: no KV room on one or two 80 GB H100s at sglang's own fraction, room on 4
    base = ["--model-path", str(LLAMA_70B), "--sim-hardware", "h100-sxm"]
    for tp, failure in ((1, "not_enough_memory"), (2, "not_enough_memory"), (3, "startup_rule")):
        assert (
            predict([*base, "--tp-size", str(tp)], WORKLOAD, concurrency=8).failure_kind == failure
        )
    _, config = _sim(4)
    assert config.model.weight_bytes == pytest.approx(load_model(str(LLAMA_70B)).weight_bytes / 4)
    assert config.model.num_kv_heads == 2 and config.cuda_graph_max_bs_decode == 512
    plan = plan_memory(config)
    perf = build_perf_model(config, plan)
    _, quiet = _sim(4, strength=0.0)
    free = build_perf_model(quiet, plan_memory(quiet))
    # two all-reduces a layer, 160 in all; a decode step of 32 carries 32 x 8192 x 2 bytes each
    one = AllReduce().seconds(32 * 8192 * 2, 4)
    assert perf.communication(32) == pytest.approx(160 * one)
    assert perf.decode_step(32, 32 * 600) - free.decode_step(32, 32 * 600) == pytest.approx(
        160 * one
    )
    assert 4e-6 < AllReduce().seconds(512, 4) < 5e-6 < one  # sglang PR #2904's custom all-reduce
    # eight GPUs: half the bytes each, more all-reduce time; still faster
    tput = {
        tp: predict([*base, "--tp-size", str(tp)], WORKLOAD, concurrency=32).summary[
            "output_throughput"
        ]
        for tp in (4, 8)
    }
    assert 1.3 < tput[8] / tput[4] < 2.0


def test_the_estimate_plans_memory_and_time_per_gpu():
    model = ModelMemory.from_hf_config(read_config(LLAMA_70B))
    assert (model.attention_heads, model.kv_heads, model.layers) == (64, 8, 80)
    share = model.sharded(4)
    assert share.weight_bytes == model.weight_bytes / 4
    assert share.kv_bytes_per_token == model.kv_bytes_per_token / 4
    # 16 GPUs for 8 KV heads: each keeps one head, a copy on two GPUs
    assert model.sharded(16).kv_bytes_per_token == model.kv_bytes_per_token / 8
    assert "attention heads" in (model.tensor_parallel_problem(3) or "")
    assert model.tensor_parallel_problem(8) is None
    assert not estimate_memory({}, model, 85.5).fits
    assert estimate_memory({"tp_size": 4}, model, 85.5).fits
    assert estimate_memory({"tp_size": 3}, model, 85.5).failure_class == "startup_rule"
    h100 = gpu_spec("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.link_gb_s == 450  # NVLink 4, one direction
    assert communication(model, h100, 1, 32) == 0.0
    assert communication(model, h100, 4, 32) > 160 * 5e-6
    space = load_space("qwen3-8b-h200")
    est = Estimator(space, model, h100, 85.5)
    at4, at8 = (est.predict({"tp_size": tp, "max_running_requests": 32}) for tp in (4, 8))
    assert at4.fits and at8.fits and at8.tpot_ms < at4.tpot_ms
    # the estimate and the simulator agree on the defaults of a 4-GPU server within 25%
    sim = predict(
        ["--model-path", str(LLAMA_70B), "--sim-hardware", "h100-sxm", "--tp-size", "4",
         "--max-running-requests", "32"],
        WORKLOAD, concurrency=32,
    ).summary  # fmt: skip
    assert sim["median_tpot_ms"] / at4.tpot_ms == pytest.approx(1.0, abs=0.25)


def test_init_writes_the_tensor_parallel_size_and_names_the_one_that_fits(tmp_path):
    request = InitRequest(model_path=str(LLAMA_70B), gpu="h100", workload="chat")
    with pytest.raises(UserError, match=r"on one H100 SXM .*\(--tp-size 2 fits\)"):
        write_space(request, tmp_path / "one.yaml")
    with pytest.raises(UserError, match="64 attention heads do not divide over --tp-size 3"):
        write_space(replace(request, tp_size=3), tmp_path / "three.yaml")
    path = write_space(replace(request, tp_size=4), tmp_path / "four.yaml")
    data = yaml.safe_load(path.read_text())
    assert data["fixed_flags"]["tp_size"] == 4 and data["name"] == "llama-3.3-70b-4xh100-sxm-chat"
    # the same-run rule counts one GPU's KV bytes: a lower fraction gives up 4x the tokens
    model = ModelMemory.from_hf_config(read_config(LLAMA_70B))
    rules = SameRunRules.of(load_space(path), model, 85.5)
    assert rules.kv_bytes_per_token == model.sharded(4).kv_bytes_per_token
    assert "on each of 4 GPUs" in path.read_text()
    # the study takes the space's size for its launches, GPU groups and estimate
    run = resolve_run(StudyOptions(trials=2, space_path=path, engine="sim"))
    assert run.options.tp_size == 4 and run.space.fixed_flags["tp_size"] == 4
    with pytest.raises(UserError, match="--tp-size 2 and the space's fixed_flags tp_size 4"):
        resolve_run(StudyOptions(trials=2, space_path=path, engine="sim", tp_size=2))


def test_init_notes_a_default_slo_that_no_configuration_comes_near(tmp_path):
    from tuner.init.command import written_space

    # 32 clients asking questions on 4,096-token documents of a 70B model on two H200s: each
    # first prefill takes about half a second, so init's 5 s p99 TTFT is out of reach (the
    # simulator's best is about 9 s); a chat space over four H100s is well within its 3 s
    rag = InitRequest(model_path=str(LLAMA_70B), gpu="h200", workload="rag", tp_size=2)
    note = written_space(rag, tmp_path / "rag.yaml").note
    assert note is not None and "p99_ttft_ms ~" in note and "against 5,000" in note, note
    chat = InitRequest(model_path=str(LLAMA_70B), gpu="h100", workload="chat", tp_size=4)
    assert written_space(chat, tmp_path / "chat.yaml").note is None


def test_sglangs_chunk_and_graph_defaults_follow_the_gpus_memory_and_the_tp_size(tmp_path):
    from tuner.engines.memory_plan import default_graph_limit, gpu_defaults

    # sglang 0.5.23 arg_groups/memory_hook.py: an L20 / L40S (48 GB), an H100 (80 GB) alone and
    # in fours, a B200 (180 GB)
    assert gpu_defaults(48.0) == (4096, 32) and gpu_defaults(48.0, 4) == (4096, 160)
    assert gpu_defaults(85.5) == (8192, 256) and gpu_defaults(85.5, 4) == (8192, 512)
    assert gpu_defaults(192.0) == (16384, 512)
    assert default_graph_limit(85.5, 8) == 512 and default_graph_limit(None, 1) is None
    assert default_graph_limit(64.4, 1) is None  # 60 GiB: too near a bucket's edge to trust
    # so a 70B model over four 48 GB cards fits at some fraction, which init names
    request = InitRequest(model_path=str(LLAMA_70B), gpu="NVIDIA L20", gpu_memory_gb=48.0)
    with pytest.raises(UserError, match=r"\(--tp-size 4 fits\)"):
        write_space(request, tmp_path / "l20.yaml")
