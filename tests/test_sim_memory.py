"""The memory plan reproduces the seed scenario and fails the way sglang fails."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.sim_spaces import SEED_NEXTN, SEED_NEXTN_OLD, SEED_VERSION

from tuner.sim.args import parse_args
from tuner.sim.config import resolve
from tuner.sim.failures import StartupFailure
from tuner.sim.memory import plan_memory

SPEC = SEED_NEXTN
SEED_SPEC = [*SPEC, "--mem-fraction-static", "0.93"]  # the profile's assumption for the seed
# The seed figures come from the planner older than 0.5.23 (the seed used the pre-rename flag).
SEED_SPEC_OLD = [*SEED_NEXTN_OLD, "--mem-fraction-static", "0.93"]
OLD = ("--sim-sglang-version", SEED_VERSION)


def plan(*argv: str):
    return plan_memory(resolve(parse_args(list(argv))))


def failure(*argv: str) -> StartupFailure:
    with pytest.raises(StartupFailure) as exc:
        plan(*argv)
    return exc.value


def test_defaults_give_96_slots_and_19_running():
    p = plan(*OLD)
    assert p.mamba_slots == 96 and p.mamba_slot_ratio == 5
    assert p.max_running_requests == 19
    assert 0.86 <= p.mem_fraction_static <= 0.87
    assert p.max_total_num_tokens > 200_000
    # 0.5.23 keeps one slot's worth for the pool's padding slot inside the state budget
    new = plan()
    assert (new.mamba_slots, new.max_running_requests) == (95, 19)


def test_seed_mtp_run_gives_4_running_and_the_mamba_cache_sizes():
    p = plan(*SEED_SPEC_OLD)
    assert p.mamba_slots == 24
    assert p.max_running_requests == 4
    assert round(p.ssm_state_gib, 2) == 3.52
    assert round(p.intermediate_ssm_gib, 2) == 2.81


def test_explicit_max_running_requests_shrinks_the_speculative_reserve():
    p = plan(*SEED_NEXTN_OLD, "--max-running-requests", "8")
    assert p.max_running_requests == 8
    assert p.spec_reserve_gib == pytest.approx(8 * 4 * p.state_bytes_per_request / 1024**3)
    # 0.5.23: the reserve is for min(8, slots // ratio) + 1 requests
    new = plan(*SPEC, "--max-running-requests", "8")
    assert new.max_running_requests == 8
    assert new.spec_reserve_gib == pytest.approx(9 * 4 * new.state_bytes_per_request / 1024**3)


def test_no_buffer_uses_three_slots_per_request():
    p = plan("--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule")
    assert p.mamba_slot_ratio == 3
    assert p.max_running_requests == p.mamba_slots // 3


def test_explicit_no_buffer_with_overlap_fails_in_0_5_23_and_is_switched_off_before():
    assert (
        "no_buffer do not support overlap schedule"
        in failure("--mamba-radix-cache-strategy", "no_buffer").line
    )
    old = plan("--sim-sglang-version", "0.5.11", "--mamba-scheduler-strategy", "no_buffer")
    assert old.mamba_slot_ratio == 3


def test_hicache_does_not_raise_the_running_cap():
    base = plan(*SEED_SPEC_OLD)
    hi = plan(*SEED_SPEC_OLD, "--enable-hierarchical-cache", "--hicache-ratio", "4")
    assert hi.max_running_requests == base.max_running_requests
    assert hi.max_total_num_tokens == base.max_total_num_tokens
    # 0.5.10 rounds the host pool up to whole pages plus one page
    assert hi.hicache_host_tokens == 4 * base.max_total_num_tokens + 1


def test_plain_attention_model_on_h200():
    p = plan("--sim-model", "qwen3-8b", "--sim-hardware", "h200")
    assert p.mamba_slots == 0 and p.max_running_requests > 1000
    assert p.kv_bytes_per_token == 36 * 2 * 8 * 128 * 2


def test_not_enough_memory():
    f = failure(*OLD, "--mem-fraction-static", "0.5")
    assert (
        f.line == "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    )
    assert f.kind == "not_enough_memory"
    # MTP at the automatic fraction: 0.5.10's 48-request speculative reserve leaves no state
    # slots; 0.5.23's joint solve starts with 42 slots, 8 running.
    assert failure(*SEED_NEXTN_OLD).kind == "not_enough_memory"
    assert plan(*SPEC).max_running_requests == 8


def test_0_5_23_memory_failures_are_worded_as_0_5_23_words_them():
    f = failure("--mem-fraction-static", "0.5")  # the weights alone exceed the static pool
    assert f.line.startswith(
        "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        "--mem-fraction-static=0.5."
    )
    assert f.kind == "not_enough_memory"
    f = failure("--mem-fraction-static", "0.56", "--mamba-full-memory-ratio", "0.01")
    assert f.line.startswith(
        "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache."
    )
    f = failure("--max-mamba-cache-size", "4")
    assert f.line.startswith(
        "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any "
        "requests. max_mamba_cache_size=4, mamba_ratio=5"
    )


def test_out_of_memory_when_the_fraction_leaves_no_room_for_activations():
    f = failure("--mem-fraction-static", "0.975")
    assert f.line.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate")
    assert f.kind == "out_of_memory"


def test_cuda_graph_capture_fails_when_graphs_do_not_fit():
    f = failure("--mem-fraction-static", "0.985", "--cuda-graph-max-bs-decode", "512")
    assert f.line.startswith("Exception: Capture cuda graph failed: CUDA out of memory.")
    assert f.kind == "cuda_graph"


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["--speculative-algorithm", "MTP"], "ValueError: Unknown speculative algorithm name: MTP"),
        (
            ["--speculative-eagle-topk", "1", "--speculative-algorithm", "NEXTN"],
            "ValueError: --speculative-num-steps must be set",
        ),
        (
            [*SPEC, "--mamba-track-interval", "2"],
            "AssertionError: mamba_track_interval (2) must be >= speculative_num_draft_tokens (4)",
        ),
        (
            [
                "--mamba-radix-cache-strategy",
                "extra_buffer",
                "--page-size",
                "64",
                "--mamba-track-interval",
                "96",
            ],
            "AssertionError: mamba_track_interval (96) must be",
        ),
        (
            ["--mamba-radix-cache-strategy", "no_buffer", "--page-size", "16"],
            "ValueError: no_buffer mamba scheduler strategy requires --page-size 1",
        ),
        (
            ["--enable-hierarchical-cache", "--disable-radix-cache"],
            "ValueError: The arguments enable-hierarchical-cache and disable-radix-cache are "
            "mutually exclusive",
        ),
        (
            ["--mamba-scheduler-strategy", "no_buffer", "--speculative-algorithm", "NEXTN"],
            "ValueError: Speculative decoding for hybrid linear-attention models with the "
            "no_buffer strategy",
        ),
        (
            ["--mamba-scheduler-strategy", "extra_buffer", "--disable-radix-cache"],
            "ValueError: extra_buffer mamba scheduler strategy requires the radix cache",
        ),
        (
            [
                "--sim-sglang-version",
                "0.5.11",
                "--sim-model",
                "qwen3-8b",
                "--enable-hicache",
                "--hicache-ratio",
                "0.5",
            ],
            "AssertionError: The host memory should be larger than the device memory",
        ),
        (["--enable-hicache", "--hicache-size", "900"], "ValueError: Not enough host memory"),
    ],
)
def test_startup_rules(argv, text):
    f = failure(*argv)
    assert f.line.startswith(text), f.line


def test_hicache_and_speculation_allowed_on_hybrid_models_in_0_5_23_and_0_5_10():
    assert plan(*SEED_SPEC, "--enable-hicache").max_running_requests == 12
    # 0.5.10 has no such refusal: its scheduler picks HiMambaRadixCache for hybrid models
    assert plan(*SEED_SPEC_OLD, "--enable-hicache").max_running_requests == 4
    assert plan(*OLD, "--enable-hicache").hicache_host_tokens > 0


def test_hicache_ratio_of_one_starts_in_both_releases():
    # 0.5.10 asserts host pool > device pool, but rounds the host pool up by one page first
    # (mem_cache/memory_pool_host.py), so a ratio of 1.0 passes and only a smaller one fails.
    assert plan("--enable-hicache", "--hicache-ratio", "1.0").max_total_num_tokens > 0
    old = plan(*OLD, "--sim-model", "qwen3-8b", "--enable-hicache", "--hicache-ratio", "1.0")
    assert old.hicache_host_tokens == old.max_total_num_tokens + 1


def run_sim(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner.sim", "--port", "0", "--sim-load-time", "0", *argv],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--speculative-algorithm", "MTP"], "ValueError: Unknown speculative algorithm name: MTP"),
        (
            [*OLD, "--mem-fraction-static", "0.5"],
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
        ),
        (
            ["--mem-fraction-static", "0.5"],
            "ValueError: Loaded weights leave no GPU memory for the KV cache",
        ),
        (["--mem-fraction-static", "0.975"], "torch.OutOfMemoryError: CUDA out of memory."),
        (
            ["--mem-fraction-static", "0.985", "--cuda-graph-max-bs-decode", "512"],
            "Capture cuda graph failed: CUDA out of memory.",
        ),
    ],
)
def test_server_prints_the_failure_and_exits_nonzero(argv, line):
    out = run_sim(*argv)
    assert out.returncode != 0
    assert line in out.stderr
    assert "The server is fired up and ready to roll!" not in out.stderr
