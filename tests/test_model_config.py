"""One input path: a model's shape comes from its config.json, for a real or a simulated model."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.engines.model_config import (
    ModelMemory,
    find_config_dir,
    missing_config_message,
    parameter_counts,
    read_config,
)
from tuner.sim.profiles import (
    PROFILE_DIR,
    available,
    describe,
    load_model,
    model_config_dir,
    model_from_hf_config,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", available("model"))
def test_each_simulated_model_ships_a_config_json_that_agrees_with_its_profile(name):
    directory = model_config_dir(name)
    assert directory is not None, f"{name}: no {name}/config.json beside {name}.yaml"
    config = read_config(directory)
    memory = ModelMemory.from_hf_config(config)
    profile = load_model(name)
    assert memory.weight_bytes == pytest.approx(profile.weight_bytes, rel=1e-3)
    assert memory.kv_bytes_per_token == profile.kv_bytes_per_token()
    assert memory.state_bytes_per_request == profile.state_bytes_per_request(4)
    assert memory.draft_bytes == pytest.approx(profile.mtp.head_bytes if profile.mtp else 0.0)
    text = config.get("text_config", config)
    assert text["num_hidden_layers"] == profile.num_layers
    assert config["architectures"] == [profile.architecture]
    assert config["model_type"] == profile.model_type
    # the simulator's own reading of the same file gives the same shape
    derived = model_from_hf_config(directory)
    assert derived.weight_bytes == pytest.approx(memory.weight_bytes, rel=1e-3)
    for field in (
        "full_attention_layers",
        "linear_attention_layers",
        "num_kv_heads",
        "head_dim",
        "experts",
        "experts_per_token",
    ):
        assert getattr(derived, field) == getattr(profile, field), field
    assert derived.expert_bytes == pytest.approx(profile.expert_bytes, rel=1e-3)
    assert derived.decode_weight_bytes == pytest.approx(profile.decode_weight_bytes, rel=2e-2)


def test_qwen3_6_weights_are_the_target_model_without_the_mtp_layer():
    counts = parameter_counts(read_config(PROFILE_DIR / "model" / "qwen3.6-27b"))
    # text 26.896e9 + vision 0.461e9 parameters in bf16; the 0.425e9-parameter MTP layer is the
    # draft model's. The old profile figure, 55.49e9 B, was the checkpoint with the MTP layer.
    assert counts["text"] == pytest.approx(26.896e9, rel=1e-4)
    assert counts["vision"] == pytest.approx(0.4607e9, rel=1e-3)
    assert (counts["text"] + counts["vision"]) * 2 == pytest.approx(54.71e9, rel=1e-3)
    assert (counts["text"] + counts["vision"] + counts["mtp"]) * 2 == pytest.approx(
        55.56e9, rel=1e-3
    )


def test_a_hub_id_is_found_in_the_local_hugging_face_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    repo = tmp_path / "hub" / "models--Qwen--Qwen3.6-27B"
    snapshot = repo / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    source = PROFILE_DIR / "model" / "qwen3.6-27b" / "config.json"
    (snapshot / "config.json").write_text(source.read_text())
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abc\n")
    assert find_config_dir("Qwen/Qwen3.6-27B") == snapshot
    memory = ModelMemory.from_model_path("Qwen/Qwen3.6-27B")
    assert memory is not None and memory.hybrid


def test_absent_config_says_where_it_looked_and_what_is_lost(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert find_config_dir("Org/Absent-Model") is None
    assert ModelMemory.from_model_path("Org/Absent-Model") is None
    message = missing_config_message("Org/Absent-Model")
    assert "Org/Absent-Model" in message and str(tmp_path) in message
    assert "memory check is off" in message


def test_the_simulator_describes_its_gpu_and_model_directory():
    info = describe("rtx-pro-6000-blackwell", "qwen3.6-27b")
    assert info["gpu_memory_gb"] == pytest.approx(94.97 * 2**30 / 1e9)
    assert Path(info["model_config_dir"]) == (PROFILE_DIR / "model" / "qwen3.6-27b").resolve()


def test_a_config_json_without_tie_word_embeddings_takes_its_model_types_default():
    """Gemma-2-9B's config.json leaves the key out, and transformers ties its embeddings by
    default there (9.24B parameters); a Llama-shaped config.json without it is untied."""
    gemma = {
        "model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
        "num_hidden_layers": 42, "num_attention_heads": 16, "num_key_value_heads": 8,
        "head_dim": 256, "vocab_size": 256000,
    }  # fmt: skip
    embed = 256000 * 3584
    tied = parameter_counts(gemma)["text"]
    assert abs(tied - 9_241_705_984) / 9_241_705_984 < 0.001  # the checkpoint's count
    assert parameter_counts({**gemma, "tie_word_embeddings": False})["text"] == tied + embed
    llama = {**gemma, "model_type": "llama"}
    assert parameter_counts(llama)["text"] == tied + embed
