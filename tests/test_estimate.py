"""The estimate's TTFT tail, its fitted prefix reuse, and the guide's search over it
(tuner/predict/estimate.py, workload_shape.py, guide.py)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from tuner.engines.model_config import ModelMemory
from tuner.predict.estimate import Calibration, Estimator, Observation
from tuner.predict.gpu_specs import gpu_spec
from tuner.predict.workload_shape import WorkloadShape
from tuner.space.load import load_space
from tuner.study.guide import Guide, random_params

# Qwen3-8B-like shape: 16.4 GB of bf16 weights, 36 layers x 8 KV heads x 128 x 2 x 2 bytes.
MODEL = ModelMemory(weight_bytes=16.4e9, kv_bytes_per_token=36 * 8 * 128 * 2 * 2)


def _estimator(**calibration) -> Estimator:
    space = load_space("qwen3-8b-h200")  # 64 clients, shared-prefix workload, p99 TTFT SLO
    gpu = gpu_spec("NVIDIA H200")
    assert gpu is not None
    return Estimator(space, MODEL, gpu, 150.0, Calibration(**calibration))


def test_one_client_without_a_slot_waits_a_whole_turn_of_the_running_batch():
    est = _estimator()
    full = est.predict({"max_running_requests": 64})
    one_short = est.predict({"max_running_requests": 63})
    assert one_short.queued_share > 0.01
    cycle_ms = 1000 * one_short.running * 256 / one_short.throughput  # 256 output tokens
    assert one_short.ttft_at(0.99) >= cycle_ms
    assert one_short.ttft_at(0.99) > 2 * full.ttft_at(0.99)


def test_the_tail_ttft_includes_the_opening_burst_and_larger_chunks_share_less():
    est = _estimator()
    small = est.predict({"max_running_requests": 64, "chunked_prefill_size": 2048})
    large = est.predict({"max_running_requests": 64, "chunked_prefill_size": 16384})
    # 64 of the 256 requests are the burst: its p99 is its 96th percentile.
    assert small.burst_share == 0.25
    assert small.ttft_at(0.99) == pytest.approx(small.burst_ttft_ms * 0.96)
    assert small.burst_ttft_ms > small.ttft_ms  # the median does not wait for the burst
    assert small.ttft_at(0.5) == small.ttft_ms
    assert large.burst_ttft_ms >= small.burst_ttft_ms


def test_a_long_benchmark_leaves_the_burst_out_of_its_tail():
    est = _estimator()
    est.shape = WorkloadShape.of({**est.space.workload, "prompts_per_group": 500}, est.clients)
    long = est.predict({"max_running_requests": 64})  # 64 of 8000 requests: under 1 per cent
    assert long.burst_share < 0.01 and long.ttft_at(0.99) == long.ttft_ms


def test_the_burst_of_a_multi_turn_chat_shares_one_system_prompt():
    shape = WorkloadShape.of(
        {"kind": "multi-turn", "turns": 4, "system_prompt_len": 2048, "user_len": 256}, 16
    )
    assert (shape.first_prompt, shape.first_shared, shape.prefixes) == (2304, 2048, 1)
    random_shape = WorkloadShape.of({"kind": "random", "input_len": 1000}, 8)
    assert (random_shape.first_shared, random_shape.prefixes) == (0.0, 8)


def test_a_violation_scores_lower_the_further_it_is_over_the_limit():
    est = _estimator()
    near = est.score({"max_running_requests": 48})
    far = est.score({"max_running_requests": 8})
    within = est.score({"max_running_requests": 64})
    assert within > near > far > 0


def test_prefix_reuse_is_refit_to_the_measured_cache_hit_rate():
    truth = _estimator()
    flags = [{"max_running_requests": n} for n in (16, 32, 64)]
    observations = [
        Observation(f, p.throughput, p.tpot_ms, p.running, None, metrics={"cache_hit_rate": h})
        for f in flags
        for p in [truth.predict(f)]
        for h in [p.hit_rate]
    ]
    blind = _estimator(prefix_reuse=0.0)
    assert blind.predict(flags[0]).hit_rate == 0.0
    blind.fit(observations)
    assert blind.calibration.prefix_reuse == pytest.approx(1.0)
    # A benchmark that reports no cached tokens at all teaches nothing about the cache.
    silent = [Observation(o.flags, o.throughput, o.tpot_ms, o.running, None) for o in observations]
    still_blind = _estimator(prefix_reuse=0.0)
    still_blind.fit(silent)
    assert still_blind.calibration.prefix_reuse == 0.0


def _seed_estimator() -> tuple[Estimator, object]:
    """The seed space's estimate (a hybrid model: a state pool beside the KV pool) and its
    params-to-flags reader, as a study on the simulator builds them."""
    from tuner.host import read_host_facts
    from tuner.study import StudyOptions, launch_target
    from tuner.study.guide import GuideSettings, make_guide

    space = load_space("qwen3.6-27b-mtp-hicache")
    target = launch_target(space, StudyOptions(engine="sim"))
    host = read_host_facts("sim", target.module, target.extra_args, space.model_path)
    guide = make_guide(space, host, GuideSettings.of(StudyOptions(engine="sim", seed=0)))
    assert guide is not None and guide.estimator is not None
    return guide.estimator, guide._flags


def _mtp(steps: int, hicache: bool = False) -> dict[str, object]:
    params: dict[str, object] = {
        "speculative_algorithm": "NEXTN",
        "speculative_num_steps": steps,
        "speculative_eagle_topk": 1,
        "mem_fraction_static": 0.95,
        "enable_hierarchical_cache": hicache,
        "mamba_radix_cache_strategy": "extra_buffer",
        "max_running_requests": 16,
        "chunked_prefill_size": 4096,
    }
    if hicache:
        params.update(hicache_ratio=8.0, hicache_write_policy="write_through")
    return params


def test_hit_rates_that_fall_with_the_spare_state_slots_fit_a_state_limit_hicache_lifts():
    """On a hybrid model more draft steps leave fewer state slots to the prefix cache. Trials
    measured where the cache needs 60 spare slots (hit rates falling from 2 draft steps to 5,
    as on the simulator: 0.906, 0.832, 0.678) fit that need, and HiCache's host pool, which
    holds states too, gives the hits back. Hit rates that do not differ fit no limit."""
    truth, flags_of = _seed_estimator()
    truth.calibration = replace(truth.calibration, state_need=60.0)
    observations = [
        Observation(f, p.throughput, p.tpot_ms, p.running, None, metrics={"cache_hit_rate": h})
        for steps in (2, 3, 5)
        for f in [flags_of(_mtp(steps))]
        for p in [truth.predict(f)]
        for h in [p.hit_rate]
    ]
    hits = [o.metrics["cache_hit_rate"] for o in observations if o.metrics]
    assert hits[0] > hits[1] > hits[2]
    est, _ = _seed_estimator()
    est.fit(observations)
    assert est.calibration.state_need == pytest.approx(60.0, rel=0.05)
    fitted = {s: est.predict(flags_of(_mtp(s))).hit_rate for s in (2, 3, 4, 5)}
    assert fitted[2] > fitted[3] > fitted[4] > fitted[5]
    assert fitted[3] == pytest.approx(hits[1], abs=0.01)
    lifted = est.predict(flags_of(_mtp(3, hicache=True))).hit_rate
    assert lifted == pytest.approx(fitted[2], abs=0.01)
    plain = truth.predict(flags_of(_mtp(3))).throughput
    assert truth.predict(flags_of(_mtp(3, hicache=True))).throughput > 1.02 * plain

    same, _ = _seed_estimator()
    alike = [
        Observation(
            o.flags, o.throughput, o.tpot_ms, o.running, None, metrics={"cache_hit_rate": 0.9}
        )
        for o in observations
    ]
    same.fit(alike)
    assert same.calibration.state_need == 0.0


def test_the_guide_finds_the_estimates_corner_that_random_candidates_miss(monkeypatch):
    from tuner.study import guide as guide_module

    monkeypatch.setattr(guide_module, "_CANDIDATES", 20)
    est = _estimator()
    space = est.space
    guide = Guide(space, est, seed=3)
    pick = guide._best_candidate(set())
    assert pick is not None
    pool = [random_params(space, random.Random(3)) for _ in range(20)]
    best_random = max(est.score(guide._flags(p)) for p in pool)
    assert est.score(guide._flags(pick)) >= best_random
    assert pick["max_running_requests"] == 64  # the client count: nobody waits for a slot


def test_a_mixture_of_experts_reads_the_experts_its_batch_is_routed_to():
    from tuner.engines.model_config import read_config
    from tuner.predict.estimate import weights_read
    from tuner.sim.profiles import model_config_dir

    directory = model_config_dir("qwen3-30b-a3b")
    assert directory is not None
    moe = ModelMemory.from_hf_config(read_config(directory))  # Qwen3-30B-A3B's public config
    assert (moe.experts, moe.experts_per_token) == (128, 8)
    assert moe.expert_bytes == 48 * 3 * 2048 * 768 * 2  # gate, up, down in every layer, bf16
    # one token reads 8 experts of 128 per layer: 6.6 of the 61 GB (3.0e9 active parameters
    # and the input embedding); two tokens 128 x (1 - (15/16)^2) = 15.5 experts
    one = weights_read(moe, 1)
    assert one == pytest.approx(moe.weight_bytes - 120 * moe.expert_bytes)
    assert 6.0e9 < one < 7.0e9 and moe.weight_bytes > 60e9
    assert weights_read(moe, 2) - one == pytest.approx(7.5 * moe.expert_bytes)
    assert weights_read(moe, 8192) == pytest.approx(moe.weight_bytes)
    assert weights_read(MODEL, 64) == MODEL.weight_bytes  # a dense model reads all at once
    # so the estimate's decode step grows with the batch where a dense model's hardly does
    space = load_space("qwen3-8b-h200")
    gpu = gpu_spec("NVIDIA H200")
    assert gpu is not None
    dense = replace(moe, experts=0, experts_per_token=0, expert_bytes=0.0)
    moe_est, dense_est = (Estimator(space, m, gpu, 150.0) for m in (moe, dense))
    assert moe_est.params == pytest.approx(one / 2)
    tpot = {
        (name, cap): est.predict({"max_running_requests": cap}).tpot_ms
        for name, est in (("moe", moe_est), ("dense", dense_est))
        for cap in (1, 16)
    }
    assert tpot["moe", 16] > 3 * tpot["moe", 1]
    assert tpot["dense", 16] < 1.5 * tpot["dense", 1]
    assert tpot["moe", 1] < 0.3 * tpot["dense", 1]
