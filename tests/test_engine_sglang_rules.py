"""sglang's start-up rules, checked before a launch (0.5.10 / 0.5.11 and 0.5.23 wording)."""

from __future__ import annotations

import pytest

from tuner.engines.sglang import check_startup_rules

QWEN = "Qwen/Qwen3.6-27B"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
MTP = {
    "speculative_algorithm": "NEXTN",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}
OVERLAP = "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True."
SPEC_NO_BUFFER = (
    "Speculative decoding for Qwen/Qwen3.6-27B is not compatible with radix cache when using "
    "--mamba-scheduler-strategy no_buffer."
)
HICACHE_RADIX = (
    "The arguments enable-hierarchical-cache and disable-radix-cache are mutually exclusive and "
    "cannot be used at the same time. Please use only one of them."
)


def rules(version: str, **flags: object) -> list[str]:
    return check_startup_rules(flags, version)


@pytest.mark.parametrize("version", ["0.5.10", "0.5.11", "0.5.23"])
@pytest.mark.parametrize("model", [QWEN, LLAMA])
def test_defaults_start(version: str, model: str):
    assert rules(version, model_path=model) == []
    assert rules(version, model_path=model, enable_hierarchical_cache=True, hicache_ratio=4) == []


# --------------------------------------------------------------------------- 0.5.23


def test_seed_configs_that_start_on_0_5_23():
    assert rules("0.5.23", model_path=QWEN, **MTP, mamba_radix_cache_strategy="extra_buffer") == []
    assert rules("0.5.23", model_path=QWEN, **MTP) == []  # auto picks extra_buffer
    assert (
        rules(
            "0.5.23",
            model_path=QWEN,
            **MTP,
            mamba_radix_cache_strategy="no_buffer",
            disable_overlap_schedule=True,
            enable_hierarchical_cache=True,
        )
        == []
    )


def test_no_buffer_needs_overlap_off_on_0_5_23():
    assert rules("0.5.23", model_path=QWEN, mamba_radix_cache_strategy="no_buffer") == [OVERLAP]


def test_no_buffer_page_size_and_backend_on_0_5_23():
    problems = rules(
        "0.5.23",
        model_path=QWEN,
        mamba_radix_cache_strategy="no_buffer",
        disable_overlap_schedule=True,
        page_size=16,
        attention_backend="trtllm_mha",
    )
    assert problems == [
        "no_buffer only supports page_size=1.",
        "no_buffer do not support trtllm_mha attention backend.",
    ]


def test_extra_buffer_without_radix_cache_on_0_5_23():
    problems = rules(
        "0.5.23",
        model_path=QWEN,
        mamba_radix_cache_strategy="extra_buffer",
        disable_radix_cache=True,
    )
    assert problems == [
        "--mamba-radix-cache-strategy extra_buffer needs mamba state, got Qwen/Qwen3.6-27B."
    ]


def test_extra_buffer_on_a_model_without_mamba_state():
    problems = check_startup_rules(
        {"model_path": LLAMA, "mamba_radix_cache_strategy": "extra_buffer"}, "0.5.23", hybrid=False
    )
    assert problems == [
        "--mamba-radix-cache-strategy extra_buffer needs mamba state, "
        "got meta-llama/Llama-3.1-8B-Instruct."
    ]


def test_track_interval_rules_apply_to_auto_with_overlap_on_0_5_23():
    flags = {**MTP, "speculative_num_steps": 9, "speculative_num_draft_tokens": 10}
    problems = rules("0.5.23", model_path=QWEN, mamba_track_interval=8, page_size=3, **flags)
    assert problems == [
        "mamba_track_interval 8 must be greater than or equal to speculative_num_draft_tokens 10",
        "mamba_track_interval 8 must be divisible by page_size 3",
    ]
    # auto with overlap off and page size 1 resolves to no_buffer, where these do not apply
    off = rules(
        "0.5.23", model_path=QWEN, mamba_track_interval=8, disable_overlap_schedule=True, **flags
    )
    assert off == []


def test_extra_buffer_needs_the_triton_linear_attention_backend_on_0_5_23():
    problems = rules(
        "0.5.23",
        model_path=QWEN,
        mamba_radix_cache_strategy="extra_buffer",
        linear_attn_backend="flashinfer",
    )
    assert problems == ["extra_buffer is not supported for Qwen/Qwen3.6-27B; use no_buffer."]


def test_unknown_speculative_algorithm_fails_at_startup_on_0_5_23():
    assert rules("0.5.23", model_path=QWEN, speculative_algorithm="MTP") == [
        "Unknown speculative algorithm name: MTP"
    ]
    assert rules("0.5.23", model_path=QWEN, speculative_algorithm="nextn") == []
    # 0.5.10 has argparse choices: build_server_args / validate_server_args refuse MTP there
    assert rules("0.5.10", model_path=LLAMA, speculative_algorithm="MTP") == []


# --------------------------------------------------------------------------- 0.5.10 / 0.5.11


@pytest.mark.parametrize("version", ["0.5.10", "0.5.11"])
def test_speculation_with_no_buffer_and_radix_cache_is_refused(version: str):
    explicit = rules(version, model_path=QWEN, **MTP, mamba_scheduler_strategy="no_buffer")
    assert len(explicit) == 1 and explicit[0].startswith(SPEC_NO_BUFFER)
    assert "SGLANG_ENABLE_SPEC_V2=1" in explicit[0]
    # 0.5.1x resolves auto to no_buffer, so the default strategy fails the same way
    assert rules(version, model_path=QWEN, **MTP) == explicit
    # the canonical name is understood for the old release too
    assert (
        rules(version, model_path=QWEN, **MTP, mamba_radix_cache_strategy="no_buffer") == explicit
    )
    assert rules(version, model_path=QWEN, **MTP, mamba_radix_cache_strategy="extra_buffer") == []
    assert rules(version, model_path=QWEN, **MTP, disable_radix_cache=True) == []
    # no_buffer without speculation: sglang switches overlap off itself
    assert rules(version, model_path=QWEN, mamba_radix_cache_strategy="no_buffer") == []


@pytest.mark.parametrize("version", ["0.5.10", "0.5.11"])
def test_extra_buffer_rules_on_0_5_1x(version: str):
    problems = rules(
        version,
        model_path=QWEN,
        mamba_radix_cache_strategy="extra_buffer",
        disable_radix_cache=True,
        page_size=48,
    )
    assert problems == [
        "mamba extra_buffer is not compatible with --disable-radix-cache Overlap scheduling is "
        "already supported with no_buffer + disable_radix_cache. Please use "
        "--mamba-scheduler-strategy no_buffer instead.",
        "mamba_track_interval 256 must be divisible by page_size 48",
        "For SSM models with extra buffer, either FLA_CHUNK_SIZE or page_size must be divisible "
        "by the other, got FLA_CHUNK_SIZE=64, self.page_size=48",
    ]


def test_flashinfer_gdn_decode_with_no_buffer_only_on_0_5_10():
    flags = {
        "model_path": QWEN,
        "mamba_radix_cache_strategy": "no_buffer",
        "linear_attn_decode_backend": "flashinfer",
    }
    assert check_startup_rules(flags, "0.5.10")[0].startswith(
        "FlashInfer GDN decode (--linear-attn-decode-backend flashinfer) is not compatible"
    )
    assert check_startup_rules(flags, "0.5.11") == []


def test_host_pool_smaller_than_device_pool_on_0_5_1x():
    flags = {"model_path": LLAMA, "enable_hierarchical_cache": True, "hicache_ratio": 0.5}
    assert check_startup_rules(flags, "0.5.10") == [
        "The host memory should be larger than the device memory with the current protocol "
        "(hicache_ratio=0.5 < 1)"
    ]
    assert check_startup_rules({**flags, "hicache_size": 100}, "0.5.10") == []
    assert check_startup_rules(flags, "0.5.23") == []  # 0.5.23 only warns


# --------------------------------------------------------------------------- every version


@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
def test_hicache_needs_the_radix_cache(version: str):
    problems = rules(
        version, model_path=LLAMA, enable_hierarchical_cache=True, disable_radix_cache=True
    )
    assert problems == [HICACHE_RADIX]


@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
def test_topk_or_draft_tokens_need_steps(version: str):
    problems = rules(
        version, model_path=LLAMA, speculative_algorithm="EAGLE", speculative_eagle_topk=4
    )
    assert len(problems) == 1
    assert "speculative_eagle_topk set without speculative_num_steps" in problems[0]
    assert rules(version, model_path=LLAMA, speculative_algorithm="EAGLE") == []


def test_topk_above_one_with_pages_needs_a_tree_capable_backend():
    flags = {
        "model_path": LLAMA,
        "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 4,
        "speculative_num_draft_tokens": 8,
        "page_size": 16,
        "attention_backend": "flashmla",
    }
    assert check_startup_rules(flags, "0.5.23") == [
        "speculative_eagle_topk > 1 with page_size > 1 is only supported on "
        "('flashinfer', 'fa3', 'triton'); got attention_backend='flashmla'. "
        "Use page_size == 1 or one of those backends."
    ]
    assert check_startup_rules(flags, "0.5.10")[0].startswith(
        "speculative_eagle_topk > 1 with page_size > 1 is unstable"
    )
    assert check_startup_rules({**flags, "attention_backend": "triton"}, "0.5.23") == []
    trtllm = {**flags, "attention_backend": "trtllm_mha", "page_size": 1}
    assert check_startup_rules(trtllm, "0.5.23") == [
        "trtllm_mha backend only supports topk = 1 for speculative decoding."
    ]


def test_hybrid_is_inferred_from_the_model_path_or_mamba_flags():
    no_buffer = {"mamba_radix_cache_strategy": "no_buffer"}
    assert check_startup_rules({"model_path": QWEN, **no_buffer}, "0.5.23") == [OVERLAP]
    assert check_startup_rules(no_buffer, "0.5.23") == [OVERLAP]  # a Mamba flag says hybrid
    assert check_startup_rules({"model_path": LLAMA, **no_buffer}, "0.5.23", hybrid=False) == []
    # a speculative hybrid model without any Mamba flag is recognised by its name
    assert rules("0.5.10", model_path="Qwen/Qwen3-Next-80B-A3B-Instruct", **MTP) != []
    assert rules("0.5.10", model_path=LLAMA, **MTP) == []


def test_adaptive_speculation_needs_one_of_its_candidate_step_counts_on_0_5_23():
    nextn = {"model_path": "Qwen/Qwen3.6-27B", "speculative_algorithm": "NEXTN"}
    adaptive = {**nextn, "speculative_adaptive": True}
    for steps in (1, 3, 5):
        assert check_startup_rules({**adaptive, "speculative_num_steps": steps}, "0.5.23") == []
    assert check_startup_rules(adaptive, "0.5.23") == []  # sglang takes the middle candidate
    (message,) = check_startup_rules({**adaptive, "speculative_num_steps": 4}, "0.5.23")
    assert "--speculative-num-steps=4 is not in the adaptive config candidate_steps" in message
    # Without adaptive, or with topk > 1 (sglang turns adaptive off), any count starts.
    assert check_startup_rules({**nextn, "speculative_num_steps": 4}, "0.5.23") == []
    topk = {**adaptive, "speculative_num_steps": 4, "speculative_eagle_topk": 2}
    assert not [m for m in check_startup_rules(topk, "0.5.23") if "adaptive" in m]
