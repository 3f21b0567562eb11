import random

import pytest

from tuner.predict.memory import ModelMemory, estimate_memory
from tuner.trial.crash_model import CrashModel, LaunchObservation

QWEN_LIKE = {
    "num_hidden_layers": 64,
    "hidden_size": 5120,
    "intermediate_size": 17408,
    "vocab_size": 248320,
    "num_attention_heads": 24,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "full_attention_interval": 4,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 48,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "num_nextn_predict_layers": 1,
}


def test_hf_config_gives_kv_per_token_of_full_attention_layers_only():
    model = ModelMemory.from_hf_config(QWEN_LIKE)
    # 16 full-attention layers x 2 (K and V) x 4 KV heads x 256 x 2 bytes = 64 KiB
    assert model.kv_bytes_per_token == 16 * 2 * 4 * 256 * 2
    assert model.hybrid
    assert 40e9 < model.weight_bytes < 70e9
    assert model.draft_bytes > 0


def test_plain_attention_model_has_no_state():
    model = ModelMemory.from_hf_config(
        {
            "num_hidden_layers": 32,
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "intermediate_size": 14336,
            "vocab_size": 128256,
        }
    )
    assert not model.hybrid
    assert model.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2


@pytest.mark.parametrize(
    ("mfs", "fits", "failure"),
    [(0.50, False, "not_enough_memory"), (0.85, True, None), (0.995, False, "out_of_memory")],
)
def test_memory_estimate_rejects_only_clear_failures(mfs, fits, failure):
    model = ModelMemory.from_hf_config(QWEN_LIKE)
    est = estimate_memory({"mem_fraction_static": mfs}, model, gpu_memory_gb=96)
    assert est.fits is fits
    assert est.failure_class == failure
    if fits:
        assert est.kv_tokens > 0 and est.state_slots > 0


def test_derived_fraction_fits_and_speculation_reserves_more():
    model = ModelMemory.from_hf_config(QWEN_LIKE)
    plain = estimate_memory({}, model, gpu_memory_gb=96)
    spec = estimate_memory({"speculative_algorithm": "NEXTN"}, model, gpu_memory_gb=96)
    assert plain.fits and spec.fits
    assert spec.mem_fraction_static < plain.mem_fraction_static
    assert spec.kv_tokens < plain.kv_tokens


def _history(n, rng, threshold=None, p=None):
    hist = []
    for _ in range(n):
        mfs = rng.uniform(0.7, 0.99)
        hist.append(
            LaunchObservation(
                {"mem_fraction_static": mfs, "hicache": rng.random() < 0.5},
                crashed=mfs > 0.93,
                p_crash=p,
                threshold=threshold,
            )
        )
    return hist


def test_crash_model_learns_the_crash_region():
    rng = random.Random(1)
    history = _history(30, rng)
    model = CrashModel(probe_rate=0.0, seed=0)
    risky = model.predict({"mem_fraction_static": 0.98, "hicache": True}, history)
    safe = model.predict({"mem_fraction_static": 0.75, "hicache": True}, history)
    assert risky is not None and safe is not None
    assert risky.skip and risky.p_crash > 0.8
    assert not safe.skip and safe.p_crash < 0.2


def test_crash_model_waits_for_both_outcomes():
    model = CrashModel()
    only_ok = [LaunchObservation({"mem_fraction_static": 0.8}, crashed=False) for _ in range(20)]
    assert model.predict({"mem_fraction_static": 0.8}, only_ok) is None


def test_threshold_adapts_to_missed_crashes_and_wrong_skips():
    model = CrashModel(base_threshold=0.8, step=0.05)
    missed = [LaunchObservation({}, crashed=True, p_crash=0.1, threshold=0.8)] * 2
    assert model.threshold(missed) == pytest.approx(0.7)
    wrong_skip = [LaunchObservation({}, crashed=False, p_crash=0.9, threshold=0.8, probe=True)]
    assert model.threshold(wrong_skip) == pytest.approx(0.9)


def test_adaptive_speculation_needs_room_for_its_widest_draft():
    """sglang 0.5.23 sizes adaptive speculation's Mamba intermediate states for the largest
    candidate step count + 1 but budgets only the starting draft: at a memory fraction where
    static NEXTN fits, adaptive is rejected before launch, and fits with more room left."""
    from tuner.host import read_host_facts
    from tuner.predict.memory import estimate_memory
    from tuner.space import default_space_path, load_space
    from tuner.study import StudyOptions, launch_target

    space = load_space(default_space_path())
    target = launch_target(space, StudyOptions(engine="sim"))
    host = read_host_facts("sim", target.module, target.extra_args, space.model_path)
    flags = {
        "speculative_algorithm": "NEXTN",
        "speculative_num_steps": 1,
        "speculative_num_draft_tokens": 2,
        "speculative_eagle_topk": 1,
        "max_running_requests": 16,
    }
    static = estimate_memory({**flags, "mem_fraction_static": 0.95}, host.model, host.gpu_memory_gb)
    tight = estimate_memory(
        {**flags, "mem_fraction_static": 0.95, "speculative_adaptive": True},
        host.model,
        host.gpu_memory_gb,
    )
    roomy = estimate_memory(
        {**flags, "mem_fraction_static": 0.8, "speculative_adaptive": True},
        host.model,
        host.gpu_memory_gb,
    )
    assert static.fits and roomy.fits
    assert not tight.fits and "adaptive draft states" in tight.reason
