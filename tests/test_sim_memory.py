"""The memory plan reproduces the seed scenario and fails the way sglang fails."""

from __future__ import annotations

import subprocess
import sys

import pytest
from sim_spaces import SEED_NEXTN

from tuner.sim.args import parse_args
from tuner.sim.config import resolve
from tuner.sim.failures import StartupFailure
from tuner.sim.memory import plan_memory

SPEC = SEED_NEXTN
SEED_SPEC = [*SPEC, "--mem-fraction-static", "0.93"]  # the profile's assumption for the seed


def plan(*argv: str):
    return plan_memory(resolve(parse_args(list(argv))))


def failure(*argv: str) -> StartupFailure:
    with pytest.raises(StartupFailure) as exc:
        plan(*argv)
    return exc.value


def test_defaults_give_96_slots_and_19_running():
    p = plan()
    assert p.mamba_slots == 96 and p.mamba_slot_ratio == 5
    assert p.max_running_requests == 19
    assert 0.86 <= p.mem_fraction_static <= 0.87
    assert p.max_total_num_tokens > 200_000


def test_seed_mtp_run_gives_4_running_and_the_mamba_cache_sizes():
    p = plan(*SEED_SPEC)
    assert p.mamba_slots == 24
    assert p.max_running_requests == 4
    assert round(p.ssm_state_gib, 2) == 3.52
    assert round(p.intermediate_ssm_gib, 2) == 2.81


def test_explicit_max_running_requests_shrinks_the_speculative_reserve():
    p = plan(*SPEC, "--max-running-requests", "8")
    assert p.max_running_requests == 8
    assert p.spec_reserve_gib == pytest.approx(8 * 4 * p.state_bytes_per_request / 1024**3)


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
    base = plan(*SEED_SPEC)
    hi = plan(*SEED_SPEC, "--enable-hierarchical-cache", "--hicache-ratio", "4")
    assert hi.max_running_requests == base.max_running_requests
    assert hi.max_total_num_tokens == base.max_total_num_tokens
    assert hi.hicache_host_tokens == 4 * base.max_total_num_tokens


def test_plain_attention_model_on_h200():
    p = plan("--sim-model", "qwen3-8b", "--sim-hardware", "h200")
    assert p.mamba_slots == 0 and p.max_running_requests > 1000
    assert p.kv_bytes_per_token == 36 * 2 * 8 * 128 * 2


def test_not_enough_memory():
    f = failure("--mem-fraction-static", "0.5")
    assert (
        f.line == "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    )
    assert f.kind == "not_enough_memory"
    # MTP at the automatic fraction: the 48-request speculative reserve leaves no state slots
    assert failure(*SPEC).kind == "not_enough_memory"


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
                "1.0",
            ],
            "AssertionError: The host memory should be larger than the device memory",
        ),
        (["--enable-hicache", "--hicache-size", "900"], "ValueError: Not enough host memory"),
    ],
)
def test_startup_rules(argv, text):
    f = failure(*argv)
    assert f.line.startswith(text), f.line


def test_hicache_and_speculation_allowed_on_hybrid_models_in_0_5_23():
    assert plan(*SEED_SPEC, "--enable-hicache").max_running_requests == 4


def test_hicache_ratio_of_one_is_allowed_in_0_5_23_only():
    # 0.5.1x asserted a host pool larger than the device pool; 0.5.23 dropped that assertion.
    assert plan("--enable-hicache", "--hicache-ratio", "1.0").max_total_num_tokens > 0
    old = failure(
        "--sim-sglang-version", "0.5.11", "--sim-model", "qwen3-8b",
        "--enable-hicache", "--hicache-ratio", "1.0",
    )  # fmt: skip
    assert "host memory should be larger" in old.line


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
            ["--mem-fraction-static", "0.5"],
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
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
