"""The simulator's command line follows sglang's: names of both generations, argparse exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tuner.sim.args import parse_args
from tuner.sim.config import resolve


def run_sim(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner.sim", *argv], capture_output=True, text=True, timeout=30
    )


def test_new_names_parse():
    args = parse_args(
        [
            "--mamba-radix-cache-strategy",
            "extra_buffer_lazy",
            "--cuda-graph-max-bs-decode",
            "64",
            "--cuda-graph-max-bs-prefill",
            "8",
            "--enable-hicache",
            "--hicache-ratio",
            "3",
            "--max-total-tokens",
            "200k",
            "--model",
            "some/model",
        ]
    )
    assert args.mamba_radix_cache_strategy == "extra_buffer_lazy"
    assert args.cuda_graph_max_bs_decode == 64 and args.cuda_graph_max_bs_prefill == 8
    assert args.enable_hierarchical_cache and args.hicache_ratio == 3.0
    assert args.max_total_tokens == 200_000
    assert args.model_path == "some/model"
    assert args.sglang_version == "0.5.23"


def test_old_names_parse_and_present_as_older_release():
    args = parse_args(["--mamba-scheduler-strategy", "no_buffer", "--cuda-graph-max-bs", "32"])
    assert args.mamba_radix_cache_strategy == "no_buffer"
    assert args.cuda_graph_max_bs_decode == 32
    assert sorted(args.old_flag_names) == ["--cuda-graph-max-bs", "--mamba-scheduler-strategy"]
    assert args.sglang_version == "0.5.10"


@pytest.mark.parametrize(
    "argv",
    [
        ["--no-such-flag"],
        ["--schedule-policy", "shortest"],
        ["--mamba-radix-cache-strategy", "lazy"],
        ["--mamba-scheduler-strategy", "extra_buffer_lazy"],  # not a choice of the old flag
        ["--hicache-write-policy", "write_sometimes"],
        ["--mem-fraction-static", "high"],
        # a strict 0.5.23 rejects the old names, as real 0.5.23 does
        ["--sim-sglang-version", "0.5.23", "--mamba-scheduler-strategy", "auto"],
        ["--sim-sglang-version", "0.5.23", "--cuda-graph-max-bs", "8"],
        # and a strict 0.5.10 the new ones
        ["--sim-sglang-version", "0.5.10", "--mamba-radix-cache-strategy", "auto"],
    ],
)
def test_argparse_errors_exit_2(argv):
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2


def test_unknown_flag_exits_2_as_a_process():
    out = run_sim("--port", "1", "--definitely-unknown")
    assert out.returncode == 2
    assert "unrecognized arguments: --definitely-unknown" in out.stderr


def test_bad_choice_exits_2_as_a_process():
    out = run_sim("--port", "1", "--mamba-radix-cache-strategy", "sometimes")
    assert out.returncode == 2
    assert "invalid choice: 'sometimes'" in out.stderr


def test_config_file_and_command_line_wins(tmp_path: Path):
    cfg = tmp_path / "flags.yaml"
    cfg.write_text("mem_fraction_static: 0.8\nmax-running-requests: 7\nenable_metrics: true\n")
    args = parse_args(["--config", str(cfg), "--max-running-requests", "9"])
    assert args.mem_fraction_static == 0.8
    assert args.max_running_requests == 9
    assert args.enable_metrics


def test_sim_options_and_profiles():
    config = resolve(
        parse_args(["--sim-hardware", "h200", "--sim-model", "qwen3-8b", "--sim-time-scale", "25"])
    )
    assert config.hardware.name == "h200" and config.model.name == "qwen3-8b"
    assert config.args.sim_time_scale == 25.0
    with pytest.raises(SystemExit):
        parse_args(["--sim-time-scale", "0"])


def test_unknown_profile_is_a_clear_error():
    out = run_sim("--port", "1", "--sim-hardware", "tpu-v9")
    assert out.returncode == 2
    assert "unknown hardware profile 'tpu-v9'" in out.stderr
    assert "rtx-pro-6000-blackwell" in out.stderr


def test_model_path_with_hf_config_derives_a_profile(tmp_path: Path):
    (tmp_path / "config.json").write_text(
        '{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096,'
        ' "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,'
        ' "vocab_size": 128256, "max_position_embeddings": 131072}'
    )
    config = resolve(parse_args(["--model-path", str(tmp_path)]))
    model = config.model
    assert model.name == tmp_path.name and not model.hybrid
    assert model.kv_bytes_per_token() == 32 * 2 * 8 * 128 * 2
    assert 15e9 < model.weight_bytes < 17e9  # ~8B parameters in bf16
    assert config.context_length == 131072


def test_model_path_with_hybrid_hf_config(tmp_path: Path):
    (tmp_path / "config.json").write_text(
        '{"architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 48,'
        ' "hidden_size": 2048, "intermediate_size": 5120, "num_attention_heads": 16,'
        ' "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 151936,'
        ' "full_attention_interval": 4, "linear_num_key_heads": 16,'
        ' "linear_num_value_heads": 32, "linear_key_head_dim": 128,'
        ' "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,'
        ' "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,'
        ' "num_nextn_predict_layers": 1, "max_position_embeddings": 262144}'
    )
    model = resolve(parse_args(["--model-path", str(tmp_path)])).model
    assert model.hybrid and model.full_attention_layers == 12
    assert model.linear_attention_layers == 36
    assert model.ssm_state_bytes() == 36 * 32 * 128 * 128 * 4
    assert model.mtp is not None
    assert model.active_params < model.weight_bytes / 2 / 5  # MoE: few experts active
