"""sglang's memory planning per release: the tuner's estimate and the simulator agree with what
sglang's own planning code decides (tests/data/sglang_real_plans.json, written by
tools/dump_sglang_plans.py from the 0.5.23, 0.5.11 and 0.5.10 wheels) and with the 0.5.23 formula
worked by hand (docs/sglang-memory.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.engines.memory_plan import mamba_slot_ratio, plan_pools, planner_for, version_tuple
from tuner.engines.model_config import ModelMemory, read_config
from tuner.predict.memory import GB, estimate_memory
from tuner.sim.args import parse_args
from tuner.sim.config import resolve
from tuner.sim.failures import StartupFailure
from tuner.sim.memory import plan_memory
from tuner.sim.profiles import PROFILE_DIR, load_hardware

GIB = 2**30
REAL = json.loads((Path(__file__).parent / "data" / "sglang_real_plans.json").read_text())
REAL_CASES = [(version, case) for version, cases in REAL["releases"].items() for case in cases]
SEED_MODEL = ModelMemory.from_hf_config(read_config(PROFILE_DIR / "model" / "qwen3.6-27b"))
SEED_GPU = load_hardware("rtx-pro-6000-blackwell")


def flags_of(argv: list[str]) -> dict[str, object]:
    """The tuner's flags for an sglang argv of `--name value` pairs (sim-only options dropped)."""
    flags: dict[str, object] = {}
    for name, value in zip(argv[::2], argv[1::2], strict=True):
        if not name.startswith("--sim-"):
            flags[name[2:].replace("-", "_")] = float(value) if "." in value else value
    return flags


def tuner_estimate(argv: list[str], version: str):
    return estimate_memory(
        flags_of(argv),
        SEED_MODEL,
        SEED_GPU.gpu_memory_gib * GIB / GB,
        version=version,
        runtime_overhead_gb=SEED_GPU.runtime_overhead_gib * GIB / GB,
    )


def test_seed_nextn_cap_in_0_5_23_worked_by_hand():
    # Seed hardware: 94.97 GiB, 1.72322 GiB runtime overhead; weights 54,713,457,120 B and the
    # MTP head 849,398,784 B (both counted from the shipped config.json).
    # rest = 0.93 x 94.97 - 1.72322 GiB - weights - head
    #      = 86.59888 GiB - 54,713,457,120 B - 849,398,784 B = 37,421,983,464 B (34.852 GiB)
    rest = (0.93 * 94.97 - 1.72322) * GIB - 54_713_457_120 - 849_398_784
    assert rest == pytest.approx(37_421_983_464, abs=1)
    # One request's state: 48 linear layers x (conv 30,720 x 2 B + SSM 786,432 x 4 B)
    per_req = 48 * (30_720 * 2 + 786_432 * 4)
    assert per_req == 153_944_064  # 146.8 MiB
    # State budget = rest x 0.9 / 1.9 = 17,726,202,693 B
    budget = rest * 0.9 / 1.9
    # extra_buffer with overlap: 3 + 2 = 5 slots per request; D = 4 draft tokens
    # K = (budget - per_req x (1 + 4)) // (per_req x (1 + 4 / 5))
    #   = (17,726,202,693 - 769,720,320) // 277,099,315.2 = 61.19 -> 61
    slots = int((budget - per_req * 5) // (per_req * 1.8))
    assert slots == 61
    # cap = min(48 (sglang's default with speculation), 61 // 5 = 12) = 12
    cap = min(48, slots // 5)
    assert cap == 12
    # reserve = per_req x (12 + 1) x 4 = 8,005,091,328 B (7.46 GiB), not 0.5.10's 48 x 4
    assert per_req * (cap + 1) * 4 == 8_005_091_328

    argv = [
        "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--mamba-radix-cache-strategy", "extra_buffer", "--mem-fraction-static", "0.93",
    ]  # fmt: skip
    sim = plan_memory(resolve(parse_args(argv)))
    assert (sim.mamba_slots, sim.max_running_requests) == (61, 12)
    assert sim.spec_reserve_gib * GIB == pytest.approx(8_005_091_328)
    estimate = tuner_estimate(argv, "0.5.23")
    assert estimate.fits and estimate.max_running_requests == 12 and estimate.state_slots == 61

    # The older planner on the same memory still gives the seed's cap of 4.
    old = ["--sim-sglang-version", "0.5.10", *argv[:-4]]
    old += ["--mamba-scheduler-strategy", "extra_buffer", "--mem-fraction-static", "0.93"]
    assert plan_memory(resolve(parse_args(old))).max_running_requests == 4
    assert tuner_estimate(old, "0.5.10").max_running_requests == 4


@pytest.mark.parametrize(
    ("version", "case"), REAL_CASES, ids=[f"{v} {c['name']}" for v, c in REAL_CASES]
)
def test_simulator_and_tuner_estimate_decide_as_sglang_does(version, case):
    if version_tuple(version) >= (0, 5, 23):
        argv = [*case["argv"], "--mamba-radix-cache-strategy", "extra_buffer"]
    else:
        argv = ["--sim-sglang-version", version, *case["argv"]]
        argv += ["--mamba-scheduler-strategy", "extra_buffer"]
    estimate = tuner_estimate(argv, version)
    if case.get("error") or case["mamba_slots"] <= 0 or case["max_running_requests"] <= 0:
        with pytest.raises(StartupFailure) as failure:
            plan_memory(resolve(parse_args(argv)))
        assert failure.value.kind == "not_enough_memory"
        assert not estimate.fits and estimate.failure_class == "not_enough_memory"
        return
    sim = plan_memory(resolve(parse_args(argv)))
    # the simulator's rest after the weights is the one sglang was given
    assert sim.rest_gib == pytest.approx(case["rest_gib"], abs=1e-6)
    assert (sim.mamba_slots, sim.max_running_requests) == (
        case["mamba_slots"],
        case["max_running_requests"],
    )
    assert sim.mamba_slot_ratio == case["slot_ratio"]
    assert sim.spec_reserve_gib * GIB == pytest.approx(case["spec_reserve_bytes"], abs=2)
    assert estimate.fits
    assert estimate.state_slots == case["mamba_slots"]
    assert estimate.max_running_requests == case["max_running_requests"]
    assert estimate.kv_tokens == sim.max_total_num_tokens  # and they size the same KV pool


def test_planner_per_release():
    assert planner_for("0.5.10") == planner_for("0.5.11") == "0.5.10"
    assert planner_for("0.5.23") == planner_for("0.5.23.post1") == "0.5.23"


def test_slot_ratio():
    assert mamba_slot_ratio(radix_cache=False, strategy="extra_buffer", overlap=True) == 1
    assert mamba_slot_ratio(radix_cache=True, strategy="no_buffer", overlap=False) == 3
    assert mamba_slot_ratio(radix_cache=True, strategy="extra_buffer", overlap=True) == 5
    assert mamba_slot_ratio(radix_cache=True, strategy="extra_buffer", overlap=False) == 4


def test_0_5_23_rejects_what_0_5_10_starts_and_the_reverse():
    # A tight budget: 0.5.10 reserves for 4 requests x 4 tokens and keeps 3 slots; 0.5.23 keeps
    # room for the padding slot and the 1 + D reserve first.
    per = 153_944_064
    common = {"kv_bytes_per_token": 65536, "state_bytes_per_request": per, "slot_ratio": 3}
    rest = per * 40.0
    old = plan_pools(rest, draft_tokens=4, max_running_requests=4, version="0.5.10", **common)
    new = plan_pools(rest, draft_tokens=4, max_running_requests=4, version="0.5.23", **common)
    assert old.fits and old.mamba_slots == 11 and old.max_running_requests == 3
    assert new.fits and new.mamba_slots == 5 and new.max_running_requests == 1
    tight = plan_pools(per * 8.0, draft_tokens=4, version="0.5.23", **common)
    assert not tight.fits and "state cache" in tight.reason
