"""The effects of real sglang in the simulator (tuner/sim/effects.py): each changes what it
should, and strength 0 switches it off; all at strength 0 give the simulator without them."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
import yaml
from support.sim_spaces import SEED_NEXTN

from tuner.bench import WorkloadSpec
from tuner.sim.args import parse_args
from tuner.sim.config import resolve, resolve_with
from tuner.sim.effects import (
    AcceptanceShape,
    ExpertRouting,
    HicacheTransfer,
    SchedulerCpu,
    anchored_first,
    chain_accept_length,
)
from tuner.sim.memory import capture_sizes, plan_memory
from tuner.sim.oracle import predict
from tuner.sim.perf import build_perf_model
from tuner.sim.profiles import ProfileError, load_hardware, load_model, load_overrides

EFFECTS_OFF = {
    "hardware": {
        "effects": {
            name: {"strength": 0}
            for name in (
                "graph_padding",
                "gemm_efficiency",
                "kv_kernel",
                "state_kernel",
                "scheduler_cpu",
                "hicache_transfer",
            )
        }
    },
    "model": {
        "effects": {
            name: {"strength": 0} for name in ("acceptance", "graph_memory", "expert_routing")
        }
    },
}


def perf_of(argv: list[str], hw: dict | None = None, model: dict | None = None):
    args = parse_args(argv)
    hardware = load_hardware(args.sim_hardware, {"effects": hw} if hw else None)
    profile = load_model(args.sim_model, {"effects": model} if model else None)
    config = resolve_with(args, hardware, profile)
    plan = plan_memory(config)
    return build_perf_model(config, plan), config, plan


def test_all_effects_at_strength_0_reproduce_the_simulator_without_them(tmp_path):
    # Figures of the simulator as it was before the effects (commit "Sim layout"), with the
    # seed GPU's speculative overhead as it was then (0.35 ms; recalibrated to 0.2 with them).
    off = {**EFFECTS_OFF, "hardware": {**EFFECTS_OFF["hardware"]}}
    off["hardware"]["spec_per_request_overhead_ms"] = 0.35
    path = tmp_path / "off.yaml"
    path.write_text(yaml.safe_dump(off))
    rnd = WorkloadSpec(kind="random", requests=16, input_len=512, output_len=128)
    base = ["--sim-profile-overrides", str(path)]
    plain = predict(base, rnd, concurrency=4, warmup_requests=2)
    assert plain.output_throughput == pytest.approx(95.78371659901512, rel=1e-12)
    assert plain.p99_ttft_ms == pytest.approx(502.2906437275907, rel=1e-12)
    eight = predict([*base, "--sim-model", "qwen3-8b", "--sim-hardware", "h200"], rnd,
                    concurrency=4, warmup_requests=2)  # fmt: skip
    assert eight.output_throughput == pytest.approx(751.400807246314, rel=1e-12)
    chat = WorkloadSpec.from_dict(
        {"kind": "multi-turn", "conversations": 8, "turns": 3, "system_prompt_len": 2048,
         "user_len": 256, "answer_len": 128}
    )  # fmt: skip
    spec = [*base, *SEED_NEXTN[:-2], "--mem-fraction-static", "0.93"]
    mtp = predict(spec, chat, concurrency=4, warmup_requests=2)
    assert mtp.output_throughput == pytest.approx(181.9530492863461, rel=1e-12)
    assert mtp.accept_length == pytest.approx(3.3427638737758434, rel=1e-12)
    # and on: slower in each case (the effects cost time on these shapes)
    assert predict([], rnd, concurrency=4, warmup_requests=2).output_throughput < 95.7


def test_expert_routing_counts_the_experts_a_batch_touches():
    uniform = ExpertRouting()
    assert uniform.touched(128, 8, 1) == 8.0
    # two tokens: 128 x (1 - (1 - 8/128)^2) experts in expectation
    assert uniform.touched(128, 8, 2) == pytest.approx(128 * (1 - (15 / 16) ** 2))
    assert uniform.touched(128, 8, 10_000) == pytest.approx(128.0)
    skewed = ExpertRouting(skew=1.0)
    assert 8.0 < skewed.touched(128, 8, 16) < uniform.touched(128, 8, 16)
    assert ExpertRouting(strength=0.0).touched(128, 8, 64) == 8.0
    assert uniform.touched(0, 0, 64) == 0.0  # a dense model has none


def test_a_mixture_of_experts_step_reads_more_weights_with_a_larger_batch():
    argv = ["--sim-model", "qwen3-30b-a3b", "--sim-hardware", "h100-sxm"]
    perf, config, _ = perf_of(argv)
    off, _, _ = perf_of(argv, model={"expert_routing": {"strength": 0}})
    skewed, _, _ = perf_of(argv, model={"expert_routing": {"skew": 1.0}})
    assert perf.weights_read(1) == perf.decode_weight_bytes == off.weights_read(64)
    assert perf.weights_read(1) < skewed.weights_read(16) < perf.weights_read(16)
    # a long prefill chunk touches every expert: all the weights but the input embedding
    embedding = config.model.vocab_size * config.model.hidden_size * 2
    assert perf.weights_read(8192) == pytest.approx(config.model.weight_bytes - embedding, rel=1e-3)
    # decode: a memory-bound step grows with the batch where the routed reads do
    grown = perf.decode_step(16, 16 * 1024) / perf.decode_step(1, 1024)
    flat = off.decode_step(16, 16 * 1024) / off.decode_step(1, 1024)
    assert grown > 3.0 and flat < 1.5
    dense, _, _ = perf_of(["--sim-model", "qwen3-8b", "--sim-hardware", "h100-sxm"])
    assert dense.weights_read(64) == dense.decode_weight_bytes


def test_capture_sizes_are_sglangs_lists_clamped_to_the_request_pool():
    plain = capture_sizes(256, speculative=False, pool=4096)
    assert plain[:8] == (1, 2, 4, 8, 12, 16, 24, 32) and plain[-1] == 256
    spec = capture_sizes(256, speculative=True, pool=4096)
    assert spec[:12] == (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16) and 40 in spec and 36 not in spec
    assert capture_sizes(256, speculative=False, pool=19)[-3:] == (12, 16, 19)
    assert capture_sizes(0, speculative=False, pool=19) == ()


def test_graph_padding_costs_a_batch_that_is_not_a_captured_size():
    argv = ["--sim-model", "qwen3-8b", "--sim-hardware", "h100-sxm"]
    perf, _, _ = perf_of(argv)
    off, _, _ = perf_of(argv, hw={"graph_padding": {"strength": 0}})
    assert perf.padded(3) == 4 and perf.padded(9) == 12 and perf.padded(8) == 8
    assert off.padded(9) == 9
    # padded rows are GEMM work: free while a step is memory-bound, paid once it is not
    assert perf.decode_step(9, 9 * 512) == off.decode_step(9, 9 * 512)
    slow = load_hardware("h100-sxm", {"bf16_tflops": 20.0})
    args = parse_args(argv)
    config = resolve_with(args, slow, load_model("qwen3-8b"))
    bound = build_perf_model(config, plan_memory(config))
    unpadded = dataclasses.replace(bound, padding_strength=0.0)
    assert bound.decode_step(9, 9 * 512) / unpadded.decode_step(9, 9 * 512) > 1.08
    assert bound.decode_step(8, 8 * 512) == unpadded.decode_step(8, 8 * 512)


def test_gemm_efficiency_slows_small_shapes_and_strength_0_removes_it():
    argv = ["--sim-model", "qwen3-8b", "--sim-hardware", "h100-sxm"]
    perf, _, _ = perf_of(argv)
    off, _, _ = perf_of(argv, hw={"gemm_efficiency": {"strength": 0}})
    assert perf.gemm.share(16) == pytest.approx(0.5) and off.gemm.share(16) == 1.0
    small = perf.prefill(64, 1, 64 * 32) / off.prefill(64, 1, 64 * 32)
    large = perf.prefill(8192, 1, 8192 * 4096) / off.prefill(8192, 1, 8192 * 4096)
    assert small > large > 1.0 and large < 1.01


@pytest.mark.parametrize("kernel", ["kv_kernel", "state_kernel"])
def test_kernel_efficiency_changes_the_reads_it_names(kernel):
    argv = [*SEED_NEXTN]  # the hybrid seed model reads both state and KV
    perf, _, _ = perf_of(argv)
    off, _, _ = perf_of(argv, hw={kernel: {"strength": 0}})
    other = "state_kernel" if kernel == "kv_kernel" else "kv_kernel"
    assert getattr(off, kernel.replace("_kernel", "_efficiency")) == 1.0
    assert getattr(off, other.replace("_kernel", "_efficiency")) != 1.0
    long_context = perf.step(4, 4 * 60_000) - off.step(4, 4 * 60_000)
    if kernel == "kv_kernel":  # attention reads faster than the weights stream
        assert long_context < 0
    else:  # state reads slower
        assert long_context > 0


def test_scheduler_cpu_shows_without_overlap_and_in_a_bubble_with_it():
    cpu = SchedulerCpu(round_ms=1.0, per_request_ms=0.1, overlap_bubble=0.2)
    assert cpu.exposed_s(10, overlap=False, prefill=False) == pytest.approx(0.002)
    assert cpu.exposed_s(10, overlap=True, prefill=False) == pytest.approx(0.0004)
    assert cpu.exposed_s(10, overlap=True, prefill=True) == pytest.approx(0.002)
    assert dataclasses.replace(cpu, strength=0).exposed_s(10, False, True) == 0.0
    plain, _, _ = perf_of([])
    serial = ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"]
    no_overlap, _, _ = perf_of(serial)
    off, _, _ = perf_of(serial, hw={"scheduler_cpu": {"strength": 0}})
    assert no_overlap.decode_step(4, 2000) - off.decode_step(4, 2000) == pytest.approx(
        0.4e-3 + 4 * 0.01e-3
    )
    assert plain.decode_step(4, 2000) < no_overlap.decode_step(4, 2000)


def test_hicache_direct_backend_wastes_the_link_on_small_pages():
    transfer = HicacheTransfer()
    assert transfer.slowdown("kernel", 1) == transfer.slowdown("kernel", 64) == 1.0
    assert transfer.slowdown("direct", 1) == pytest.approx(17.0)
    assert transfer.slowdown("direct", 64) == pytest.approx(1.25)
    off = dataclasses.replace(transfer, strength=0)
    assert (off.slowdown("kernel", 1), off.slowdown("direct", 1)) == (1.0, 1.25)
    hicache = ["--enable-hierarchical-cache", "--hicache-io-backend", "direct"]
    small, _, _ = perf_of(hicache)
    paged, _, _ = perf_of([*hicache, "--page-size", "64"])
    assert small.hicache_cost(4096, 0) > 10 * paged.hicache_cost(4096, 0)


def test_acceptance_decays_with_depth_anchored_at_the_reference_steps():
    shape = AcceptanceShape(position_decay=0.9, spread=0.0, reference_steps=3)
    first = anchored_first(0.8, shape)
    flat = [chain_accept_length(0.8, 1.0, 0.0, n) for n in (1, 3, 7)]
    decayed = [chain_accept_length(first, 0.9, 0.0, n) for n in (1, 3, 7)]
    assert decayed[1] == pytest.approx(flat[1], rel=1e-6)  # same at 3 steps
    assert decayed[0] > flat[0] and decayed[2] < flat[2]  # more at 1, less deep
    off = dataclasses.replace(shape, strength=0.0)
    assert off.flat and anchored_first(0.8, off) == 0.8


def test_acceptance_spread_gives_each_text_its_own_accept_length():
    perf, _, _ = perf_of(SEED_NEXTN)
    assert perf.accept_spread == 0.25
    easy, hard = perf.request_pmf(2.0), perf.request_pmf(-2.0)
    length = np.arange(1, len(easy) + 1)
    assert (easy * length).sum() > (hard * length).sum() + 0.3
    off, _, _ = perf_of(SEED_NEXTN, model={"acceptance": {"strength": 0}})
    assert off.accept_pmf() == pytest.approx([0.12, 0.88 * 0.12, 0.88**2 * 0.12, 0.88**3])
    # served over many texts, the mean is the model's mean (3.34 at 3 steps, as the flat 0.88)
    rnd = WorkloadSpec(kind="random", requests=64, input_len=128, output_len=256)
    result = predict([*SEED_NEXTN, "--mem-fraction-static", "0.93"], rnd, concurrency=4)
    assert result.accept_length == pytest.approx(chain_accept_length(0.88, 1, 0, 3), rel=0.03)
    per_request = {round(r.spec_accept_length or 0, 2) for r in predict(
        [*SEED_NEXTN, "--mem-fraction-static", "0.93"], rnd, concurrency=4, keep_records=True
    ).records}  # fmt: skip
    assert len(per_request) > 10


def test_graph_memory_per_captured_size(tmp_path):
    base = plan_memory(resolve(parse_args([])))
    path = tmp_path / "more.yaml"
    path.write_text(
        yaml.safe_dump({"model": {"effects": {"graph_memory": {"bytes_per_graph": 50e6}}}})
    )
    more = plan_memory(resolve(parse_args(["--sim-profile-overrides", str(path)])))
    graphs = len(capture_sizes(256, False, base.max_running_requests))
    assert more.cuda_graph_gib - base.cuda_graph_gib == pytest.approx(
        (50e6 - 0.5e6) * graphs / 1024**3, rel=1e-6
    )


def test_overrides_file_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpu: {}\n")
    with pytest.raises(ProfileError, match="hardware and/or model"):
        load_overrides(str(bad))
    with pytest.raises(ProfileError, match="unknown effects"):
        load_hardware(None, {"effects": {"warp_drive": {"strength": 1}}})
    with pytest.raises(ProfileError, match="unknown keys"):
        load_hardware(None, {"effects": {"kv_kernel": {"speed": 1}}})
    with pytest.raises(ProfileError, match="must be >= 0"):
        load_model(None, {"effects": {"acceptance": {"strength": -1}}})
    with pytest.raises(ProfileError, match="not found"):
        load_overrides(str(tmp_path / "missing.yaml"))
    with pytest.raises(ProfileError, match="mtp: unknown keys"):
        load_model(None, {"mtp": {"accept": 0.5}})
    # an override replaces a constant as well as a strength
    assert load_hardware(None, {"hbm_efficiency": 0.5}).hbm_efficiency == 0.5
    mtp = load_model(None, {"mtp": {"acceptance": 0.8}}).mtp
    assert mtp is not None and mtp.acceptance == 0.8


def test_the_server_refuses_a_bad_overrides_file_in_one_line(tmp_path):
    bad = tmp_path / "world.yaml"
    bad.write_text("hardware: {effects: {kv_kernel: {strength: -2}}}\n")
    done = subprocess.run(
        [sys.executable, "-m", "tuner.sim", "--sim-profile-overrides", str(bad)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: {bad}: hardware: effects.kv_kernel.strength must be >= 0, got -2"
    ]
