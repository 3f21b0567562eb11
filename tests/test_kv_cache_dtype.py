"""--kv-cache-dtype end to end: the simulator stores and reads the KV pool in the dtype sglang
0.5.23 sizes it with, the memory check, the estimate and the same-run rule count the bytes
the flag gives, `tuner init` offers the dtypes it is given, and `tuner export` warns of what a
study did not measure."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tuner.bench import WorkloadSpec
from tuner.engines.memory_plan import kv_element_bytes
from tuner.engines.model_config import ModelMemory, read_config
from tuner.errors import UserError
from tuner.init.command import write_space
from tuner.init.write import InitRequest
from tuner.predict.estimate import Estimator
from tuner.predict.gpu_specs import gpu_spec
from tuner.predict.memory import estimate_memory
from tuner.results.export import export_trial
from tuner.results.storage import open_storage
from tuner.sim.args import parse_args
from tuner.sim.config import resolve_with
from tuner.sim.memory import plan_memory
from tuner.sim.oracle import predict
from tuner.sim.perf import build_perf_model
from tuner.sim.profiles import load_hardware, load_model
from tuner.space.load import load_space
from tuner.study.loop import run_study
from tuner.study.options import StudyOptions
from tuner.study.run import resolve_run
from tuner.trial.same_run import SameRunRules

ROOT = Path(__file__).resolve().parents[1]
LLAMA_8B = ROOT / "tests" / "data" / "models" / "llama-3.1-8b"
# Long prompts: the decode steps read far more KV than at the seed's short contexts.
LONG = WorkloadSpec.from_dict({"kind": "random", "requests": 64, "input_len": 4096,
                               "output_len": 256, "seed": 0})  # fmt: skip
FRACTION = ["--mem-fraction-static", "0.85"]


def _config(dtype: str, quantized: float | None = None):
    argv = ["--model-path", str(LLAMA_8B), "--sim-hardware", "h100-sxm", *FRACTION]
    hw = {"effects": {"kv_quantized": {"strength": quantized}}} if quantized is not None else None
    args = parse_args([*argv, "--kv-cache-dtype", dtype])
    return resolve_with(args, load_hardware("h100-sxm", hw), load_model(str(LLAMA_8B)))


def test_the_simulator_sizes_and_reads_the_pool_in_the_flags_dtype():
    # 0.5.23's choices are its own: the older fp4_e2m1 is an argparse error there, and mxfp8 is
    # one before it
    with pytest.raises(SystemExit):
        parse_args(["--sim-sglang-version", "0.5.23", "--kv-cache-dtype", "fp4_e2m1"])
    with pytest.raises(SystemExit):
        parse_args(["--sim-sglang-version", "0.5.10", "--kv-cache-dtype", "mxfp8"])
    assert parse_args(["--sim-sglang-version", "0.5.23", "--kv-cache-dtype", "nvfp4"])
    plans = {dtype: plan_memory(_config(dtype)) for dtype in ("auto", "fp8_e4m3", "mxfp8")}
    bf16 = plans["auto"].kv_bytes_per_token
    assert bf16 == 32 * 2 * 8 * 128 * 2  # 32 layers, K and V, 8 KV heads of 128, bf16
    assert plans["fp8_e4m3"].kv_bytes_per_token == bf16 // 2
    assert plans["mxfp8"].kv_bytes_per_token == bf16 // 2 + bf16 // 2 // 32  # its block scales
    tokens = plans["fp8_e4m3"].max_total_num_tokens / plans["auto"].max_total_num_tokens
    assert tokens == pytest.approx(2.0, rel=0.01)
    # Half the KV bytes a decode step reads, at 0.93 of the kernel's bf16 rate (dequantizing)
    full, half = (
        build_perf_model(_config(d), plan_memory(_config(d))) for d in ("auto", "fp8_e4m3")
    )
    ideal = build_perf_model(_config("fp8_e4m3", quantized=0.0), plans["fp8_e4m3"])
    context = 64 * 4300
    assert half.decode_step(64, context) < ideal.decode_step(64, context) * 1.1
    assert (
        ideal.decode_step(64, context)
        < half.decode_step(64, context)
        < full.decode_step(64, context)
    )
    served = {
        dtype: predict(
            ["--model-path", str(LLAMA_8B), "--sim-hardware", "h100-sxm", *FRACTION,
             "--kv-cache-dtype", dtype],
            LONG, concurrency=64,
        ).summary["output_throughput"]
        for dtype in ("auto", "fp8_e4m3")
    }  # fmt: skip
    # sglang PR #1204 measured +17.8% with an fp8 KV cache (Llama-2-13B, A100, ShareGPT)
    assert 1.08 < served["fp8_e4m3"] / served["auto"] < 1.35


def test_the_memory_check_and_the_estimate_count_the_flags_bytes():
    model = ModelMemory.from_hf_config(read_config(LLAMA_8B))
    assert model.kv_element_bytes == 2.0
    assert kv_element_bytes("fp8_e5m2", 2) == 1.0 and kv_element_bytes(None, 2) == 2.0
    assert kv_element_bytes("auto", 4) == 4.0 and kv_element_bytes("nvfp4", 2) == 0.5 + 1 / 16
    fp8 = model.with_kv_cache_dtype("fp8_e4m3")
    assert fp8.kv_bytes_per_token == model.kv_bytes_per_token / 2
    assert model.with_kv_cache_dtype("auto") is model
    flags = {"mem_fraction_static": 0.85}
    sim = {d: plan_memory(_config(d)).max_total_num_tokens for d in ("auto", "fp8_e4m3", "nvfp4")}
    for dtype, tokens in sim.items():
        estimate = estimate_memory({**flags, "kv_cache_dtype": dtype}, model, 85.5)
        assert estimate.kv_tokens == pytest.approx(tokens, rel=0.01)
    h100 = gpu_spec("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    estimator = Estimator(load_space("qwen3-8b-h200"), model, h100, 85.5)
    assert "kv_cache_dtype" in estimator.MODELLED
    auto, eight = (estimator.predict({**flags, "kv_cache_dtype": d}) for d in ("auto", "fp8_e4m3"))
    assert eight.tpot_ms < auto.tpot_ms
    # The same-run rule: a lower fraction gives up twice the tokens of an 8-bit pool.
    rules = SameRunRules(
        clients=64, full_attention_only=True, gpu_memory_gb=141.0,
        kv_bytes_per_token=model.kv_bytes_per_token, resident_tokens=200_000,
    )  # fmt: skip
    pool = {"max_total_num_tokens": 900_000, "max_running_requests": 64}
    lost = {}
    for dtype in ("auto", "fp8_e4m3"):
        low, high = ({**flags, "mem_fraction_static": f, "kv_cache_dtype": dtype,
                      "max_running_requests": 64} for f in (0.8, 0.9))  # fmt: skip
        lost[dtype] = 900_000 - rules.capacity(pool, low, high)["max_total_num_tokens"]
    assert lost["fp8_e4m3"] == pytest.approx(2 * lost["auto"], rel=0.001)


def test_init_offers_the_dtypes_it_is_given(tmp_path):
    request = InitRequest(
        model_path=str(LLAMA_8B), gpu="h100", workload="rag", sglang_version="0.5.23",
        host_ram_gb=500, engine="sim",
    )  # fmt: skip
    both = write_space(replace(request, kv_cache_dtypes=("auto", "fp8_e4m3")), tmp_path / "a.yaml")
    data = yaml.safe_load(both.read_text())
    assert data["params"]["kv_cache_dtype"] == {"choices": ["auto", "fp8_e4m3"]}
    assert "cost accuracy" in both.read_text()
    assert load_space(both).params["kv_cache_dtype"].kind == "categorical"
    one = write_space(replace(request, kv_cache_dtypes=("fp8_e5m2",)), tmp_path / "b.yaml")
    data = yaml.safe_load(one.read_text())
    assert data["fixed_flags"]["kv_cache_dtype"] == "fp8_e5m2"
    assert "kv_cache_dtype" not in data["params"]
    # a short study on the simulator launches it, and the export says what was not measured
    data["workload"] = {"kind": "random", "requests": 8, "input_len": 256, "output_len": 16}
    data["bench"] = {**data["bench"], "concurrency": 4, "stages": 1, "warmup_requests": 0}
    fast = tmp_path / "fast.yaml"
    fast.write_text(yaml.safe_dump(data, sort_keys=False))
    studies = tmp_path / "studies"
    run_study(resolve_run(StudyOptions(trials=2, space_path=fast, studies_dir=studies, seed=0)))
    name = data["name"]
    result = export_trial(open_storage(None, name, studies), name, out_dir=tmp_path)
    assert "--kv-cache-dtype fp8_e5m2" in result.script.read_text()
    assert any("stores the KV cache as fp8_e5m2" in w for w in result.warnings)
    assert "not its accuracy" in result.config.read_text()
    with pytest.raises(UserError, match=r"--kv-cache-dtype fp8: sglang 0\.5\.23 takes auto, "):
        write_space(replace(request, kv_cache_dtypes=("fp8",)), tmp_path / "c.yaml")
    with pytest.raises(UserError, match=r"mxfp8: sglang 0\.5\.10 takes"):
        write_space(
            replace(request, kv_cache_dtypes=("mxfp8",), sglang_version="0.5.10"),
            tmp_path / "d.yaml",
        )


def test_init_says_when_the_pool_cannot_hold_the_clients_and_fp8_is_not_offered(tmp_path):
    from tuner.init.command import written_space

    request = InitRequest(
        model_path=str(ROOT / "tests" / "data" / "models" / "llama-3.3-70b"), gpu="h100",
        workload="rag", sglang_version="0.5.23", host_ram_gb=1000, tp_size=2,
    )  # fmt: skip
    note = written_space(request, tmp_path / "bf16.yaml").note or ""
    # 70.6 GB of weights on each 86 GB H100 leave ~58,700 tokens; 32 clients hold ~143,000
    assert "largest KV pool of this space holds 58," in note
    assert "--kv-cache-dtype auto,fp8_e4m3" in note
    offered = replace(request, kv_cache_dtypes=("auto", "fp8_e4m3"))
    assert "KV pool" not in (written_space(offered, tmp_path / "both.yaml").note or "")
    # the chat template's 16 clients fit that pool: nothing to say
    chat = replace(request, workload="chat")
    assert "KV pool" not in (written_space(chat, tmp_path / "chat.yaml").note or "")
