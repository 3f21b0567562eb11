"""Adaptive speculative decoding (``--speculative-adaptive``) as sglang 0.5.23 decides it."""

from __future__ import annotations

import json

import pytest
from support.sim_spaces import SEED_NEXTN

from tuner.bench import WorkloadSpec
from tuner.sim.adaptive import AdaptivePolicy, _Slot, default_config, load_config
from tuner.sim.args import parse_args
from tuner.sim.config import resolve
from tuner.sim.failures import StartupFailure
from tuner.sim.memory import plan_memory
from tuner.sim.oracle import predict

NEXTN = ["--speculative-algorithm", "NEXTN", "--mem-fraction-static", "0.93"]


def test_the_flags_exist_in_0_5_23_only(capsys):
    args = parse_args(["--speculative-adaptive", "--speculative-adaptive-config", "x.json"])
    assert args.speculative_adaptive and args.speculative_adaptive_config == "x.json"
    assert parse_args(["--sim-sglang-version", "0.5.23", "--speculative-adaptive"])
    for argv in (
        ["--sim-sglang-version", "0.5.10", "--speculative-adaptive"],
        ["--mamba-scheduler-strategy", "extra_buffer", "--speculative-adaptive"],
    ):
        with pytest.raises(SystemExit) as exc:
            parse_args(argv)
        assert exc.value.code == 2
    assert "--speculative-adaptive" in capsys.readouterr().err


def test_unset_steps_take_the_middle_candidate_and_draft_tokens_follow():
    spec = resolve(parse_args([*NEXTN, "--speculative-adaptive"])).spec
    assert spec is not None and spec.adaptive is not None
    assert (spec.num_steps, spec.topk, spec.num_draft_tokens) == (3, 1, 4)
    assert spec.adaptive.candidate_steps == [0, 1, 3, 5, 7]
    steps5 = resolve(parse_args([*NEXTN, "--speculative-adaptive", "--speculative-num-steps", "5"]))
    assert steps5.spec is not None and steps5.spec.num_draft_tokens == 6


def test_steps_outside_the_candidates_fail_at_start_up():
    with pytest.raises(StartupFailure) as exc:
        resolve(parse_args([*NEXTN, "--speculative-adaptive", "--speculative-num-steps", "2"]))
    assert exc.value.line.startswith("ValueError: --speculative-num-steps=2 is not in the")


def test_unsupported_setups_fall_back_to_static_with_a_warning():
    topk = resolve(
        parse_args([*NEXTN, "--speculative-adaptive", "--speculative-num-steps", "3",
                    "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "6"])
    )  # fmt: skip
    assert topk.spec is not None and topk.spec.adaptive is None
    assert any(
        "speculative_adaptive disabled: speculative_eagle_topk=2" in w for w in topk.warnings
    )
    ngram = resolve(parse_args(["--speculative-algorithm", "NGRAM", "--speculative-adaptive"]))
    assert ngram.spec is not None and ngram.spec.adaptive is None
    assert any("only EAGLE/EAGLE3" in w for w in ngram.warnings)


def test_a_config_file_replaces_the_tiers(tmp_path):
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps({"ema_alpha": 0.5, "1": {"candidate_steps": [2, 4]}}))
    config = load_config(str(path))
    assert config.candidate_steps == [2, 4] and config.tiers[0].ema_alpha == 0.5
    spec = resolve(
        parse_args([*NEXTN, "--speculative-adaptive", "--speculative-adaptive-config", str(path)])
    ).spec
    assert spec is not None and spec.num_steps == 4  # the middle of [2, 4]
    path.write_text(json.dumps({"1": {"candidate_steps": [-1]}}))
    with pytest.raises(StartupFailure, match="non-negative"):
        resolve(
            parse_args(
                [*NEXTN, "--speculative-adaptive", "--speculative-adaptive-config", str(path)]
            )
        )


def test_a_slot_moves_down_on_rejections_and_up_on_acceptances():
    tier = default_config().tiers[0]  # batch 1: 1 / 3 / 5 / 7
    low = _Slot.start(tier, 3)
    for _ in range(15):
        low.observe(0.0)
    assert low.steps == 1
    high = _Slot.start(tier, 3)
    for _ in range(tier.warmup_batches + tier.update_interval - 1):
        high.observe(3.0)
        assert high.steps == 3  # not before the first decision
    high.observe(3.0)
    assert high.steps == 5
    policy = AdaptivePolicy(default_config(), initial_steps=3)
    assert policy.steps_for(7, (1, 2, 4, 8)) == 3  # 7 pads to 8: the tier from 8 (0 / 1 / 3)
    assert policy.steps_for(40, (1, 2, 4, 8)) == 1  # from 32: 0 / 1, starting in the middle
    assert policy.steps_for(70, (1, 2, 4, 8)) == 0  # from 64 nothing is drafted


def test_served_steps_follow_acceptance_and_batch():
    rnd = WorkloadSpec(kind="random", requests=8, input_len=128, output_len=512)
    # 0.85: adaptive steps need room outside the pools for the widest draft's states (below)
    static = predict([*SEED_NEXTN, "--mem-fraction-static", "0.85"], rnd, concurrency=1)
    adaptive = predict(
        [*SEED_NEXTN, "--mem-fraction-static", "0.85", "--speculative-adaptive"],
        rnd,
        concurrency=1,
    )
    # acceptance 0.88: the batch-1 tier climbs to 5 and 7 steps, longer accepts, faster
    assert adaptive.accept_length > static.accept_length + 0.5
    assert adaptive.output_throughput > static.output_throughput
    # 48 running (sglang's cap with speculation): the tier from 32 offers 0 / 1 steps
    llama = ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "eagle"]
    wide = WorkloadSpec(kind="random", requests=200, input_len=128, output_len=256)
    big = predict([*llama, "--speculative-adaptive"], wide, "h100-sxm", "llama-3.1-8b-instruct",
                  concurrency=80)  # fmt: skip
    fixed = predict(llama, wide, "h100-sxm", "llama-3.1-8b-instruct", concurrency=80)
    assert big.accept_length is not None and fixed.accept_length is not None
    assert big.accept_length < 2.1 and fixed.accept_length > 3.0


def test_adaptive_captures_graphs_for_every_candidate_step():
    roomy = [*NEXTN, "--mem-fraction-static", "0.85"]  # the widest draft's states fit
    static = plan_memory(resolve(parse_args(roomy)))
    adaptive = plan_memory(resolve(parse_args([*roomy, "--speculative-adaptive"])))
    assert adaptive.cuda_graph_gib > static.cuda_graph_gib


def test_adaptive_states_are_sized_for_the_widest_draft():
    """sglang 0.5.23 allocates the Mamba intermediate states for the largest candidate step
    count + 1 (8 draft tokens with the default tiers) but budgets the pool for the starting
    draft only: at a memory fraction where static speculation fits, adaptive runs out of the
    memory outside the pools."""
    rnd = WorkloadSpec(kind="random", requests=8, input_len=128, output_len=64)
    args = [*SEED_NEXTN, "--mem-fraction-static", "0.93"]
    static = predict(args, rnd, concurrency=1)
    adaptive = predict([*args, "--speculative-adaptive"], rnd, concurrency=1)
    assert static.launch_ok
    assert not adaptive.launch_ok and adaptive.failure_kind in ("cuda_graph", "out_of_memory")
    roomy = predict([*SEED_NEXTN, "--mem-fraction-static", "0.85", "--speculative-adaptive"], rnd,
                    concurrency=1)  # fmt: skip
    assert roomy.launch_ok
    assert (
        roomy.memory["available_gpu_mem_gib"]
        < predict([*SEED_NEXTN, "--mem-fraction-static", "0.85"], rnd, concurrency=1).memory[
            "available_gpu_mem_gib"
        ]
    )
