"""`tuner init`: spaces for the shipped models and two other families, that load, hold exactly the
params that apply, and run on the simulator; the errors a user meets first."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from support.fake_nvml import FakePynvml
from typer.testing import CliRunner

from tuner.cli import app
from tuner.errors import UserError
from tuner.host import installed_sglang, read_host_facts
from tuner.init.command import write_space
from tuner.init.facts import meminfo_available_gb, read_gpu, read_host
from tuner.init.write import InitRequest
from tuner.space.load import load_space
from tuner.study import launch_target
from tuner.study.loop import run_study
from tuner.study.options import StudyOptions
from tuner.study.run import resolve_run

ROOT = Path(__file__).resolve().parents[1]
SIM_MODELS = ROOT / "tuner" / "sim" / "profiles" / "model"
TEST_MODELS = ROOT / "tests" / "data" / "models"

SPECULATION = {
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
}
MAMBA = {"mamba_radix_cache_strategy", "disable_overlap_schedule"}
HICACHE = {"enable_hierarchical_cache", "hicache_ratio", "hicache_write_policy"}
ALWAYS = {"mem_fraction_static", "max_running_requests", "chunked_prefill_size"}

# model dir, GPU, workload -> the params that apply
CASES = {
    "qwen3.6-27b": (
        SIM_MODELS / "qwen3.6-27b",
        "rtx-pro-6000-blackwell",
        "chat",
        # MTP heads (NEXTN, with sglang 0.5.23's adaptive steps) and a hybrid model (Mamba
        # strategy); the smallest KV pool already holds the chat working set, so no HiCache.
        ALWAYS | SPECULATION | MAMBA | {"schedule_policy", "speculative_adaptive"},
    ),
    "qwen3-8b": (SIM_MODELS / "qwen3-8b", "h200", "rag", ALWAYS | {"schedule_policy"}),
    "llama-3.1-8b": (TEST_MODELS / "llama-3.1-8b", "h200", "random", ALWAYS),
    # 93 GB of weights on 150 GB: a small KV pool that the RAG documents outgrow.
    "mixtral-8x7b": (
        TEST_MODELS / "mixtral-8x7b", "h200", "rag", ALWAYS | {"schedule_policy"} | HICACHE
    ),
}  # fmt: skip


def _init(tmp_path: Path, model: Path | str, gpu: str, workload: str = "chat", **kw) -> Path:
    """A space for the simulator (`--engine sim`) unless `engine` says otherwise."""
    kw.setdefault("engine", "sim")
    request = InitRequest(model_path=str(model), gpu=gpu, workload=workload, **kw)
    return write_space(request, tmp_path / f"{Path(model).name}.yaml")


def _fast(path: Path) -> Path:
    """The written space with a tiny workload and a fast simulator, for a 3-trial run."""
    data = yaml.safe_load(path.read_text())
    data["sim"] = {**data["sim"], "time_scale": 200}
    data["workload"] = {"kind": "random", "requests": 8, "input_len": 256, "output_len": 16}
    data["bench"] = {**data["bench"], "concurrency": 4, "stages": 1, "warmup_requests": 0}
    data["slos"] = ["p99_ttft_ms <= 600000"]
    fast = path.with_name(path.stem + "-fast.yaml")
    fast.write_text(yaml.safe_dump(data, sort_keys=False))
    return fast


@pytest.mark.parametrize("name", list(CASES))
def test_init_writes_a_space_with_exactly_the_params_that_apply_and_it_runs(tmp_path, name):
    model, gpu, workload, expected = CASES[name]
    path = _init(tmp_path, model, gpu, workload)
    space = load_space(path)  # the format, the ranges, and every flag against 0.5.23's parser
    assert set(space.params) == expected
    assert space.params["max_running_requests"].relative == {"high": "concurrency"}
    assert space.params["max_running_requests"].high == space.bench.concurrency
    text = path.read_text()
    for param in space.params:  # a comment above every param says why it is there
        lines = text.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(f"  {param}:"))
        assert lines[at - 1].startswith("  # "), param
    assert space.sim["hardware"] == gpu
    if model.parent == SIM_MODELS:
        assert space.sim["model"] == name  # the simulator's own profile
    else:
        assert "model" not in space.sim  # served from config.json through --model-path

    fast = _fast(path)
    options = StudyOptions(trials=3, space_path=fast, studies_dir=tmp_path / "studies", seed=0)
    run_study(resolve_run(options))
    study = optuna.load_study(
        study_name=space.name, storage=f"sqlite:///{tmp_path / 'studies' / space.name}.db"
    )
    done = [t for t in study.trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
    assert len([t for t in done if t.user_attrs.get("outcome") != "skipped"]) >= 3
    assert any(t.state == TrialState.COMPLETE for t in done)


def test_hicache_ratio_is_bounded_by_host_ram(tmp_path):
    model = SIM_MODELS / "qwen3.6-27b"
    roomy = load_space(_init(tmp_path / "a", model, "rtx-pro-6000-blackwell", "rag"))
    assert set(roomy.params) >= HICACHE
    ratio = roomy.params["hicache_ratio"]
    assert ratio.low == 1.0 and ratio.high > 1.0
    # 40 GB of host RAM less sglang's 10 GB holds about one KV pool of ~22 GB, not more.
    tight = _init(tmp_path / "b", model, "rtx-pro-6000-blackwell", "rag", host_ram_gb=40)
    assert load_space(tight).params["hicache_ratio"].high == 1.0
    assert "host RAM 40 GB (--host-ram-gb)" in tight.read_text()
    none = _init(tmp_path / "c", model, "rtx-pro-6000-blackwell", "rag", host_ram_gb=20)
    assert not HICACHE & set(load_space(none).params)
    assert "No HiCache: 20 GB of host RAM" in none.read_text()


def test_a_draft_model_brings_standalone_speculation(tmp_path):
    path = _init(
        tmp_path, TEST_MODELS / "llama-3.1-8b", "h200", "random", draft_model="org/draft-1b"
    )
    space = load_space(path)
    assert space.params["speculative_algorithm"].choices == (None, "STANDALONE")
    draft = space.params["speculative_draft_model_path"]
    assert draft.choices == ("org/draft-1b",)
    assert draft.when == {"speculative_algorithm": ("STANDALONE",)}


def test_older_release_names_and_a_jsonl_workload(tmp_path):
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps({"prompt": f"q{i}"}) + "\n" for i in range(4)))
    path = _init(
        tmp_path, SIM_MODELS / "qwen3.6-27b", "rtx-pro-6000-blackwell", str(requests),
        sglang_version="0.5.10", slos=["median_ttft_ms <= 500"],
    )  # fmt: skip
    space = load_space(path)
    assert space.engine_version == "0.5.10"
    assert space.workload == {"kind": "jsonl", "file": str(requests), "seed": 0}
    assert [str(s) for s in space.slos] == ["median_ttft_ms <= 500"]
    assert "Passed as --mamba-scheduler-strategy to sglang 0.5.10." in path.read_text()


def test_first_errors_are_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(UserError) as missing:
        _init(tmp_path, "nobody/no-such-model", "h200")
    assert "no config.json for 'nobody/no-such-model'" in str(missing.value)
    assert "\n" not in str(missing.value)
    # A path is no repo id: nothing to download, the hint is about the path.
    for path in (str(tmp_path / "no-such-dir"), "./models/nope", "~/no/such/model"):
        with pytest.raises(UserError) as no_dir:
            _init(tmp_path, path, "h200")
        said = str(no_dir.value)
        assert f"--model-path {path!r}: no such directory" in said, said
        assert "huggingface-cli" not in said and "\n" not in said
    with pytest.raises(UserError) as unknown:
        _init(tmp_path, SIM_MODELS / "qwen3-8b", "tpu-v5")
    assert "H100 SXM" in str(unknown.value) and "h200, rtx-pro-6000-blackwell" in str(unknown.value)
    with pytest.raises(UserError) as too_big:  # 93 GB of weights on a 48 GB GPU
        _init(tmp_path, TEST_MODELS / "mixtral-8x7b", "L40S")
    assert "leave no room for a KV cache" in str(too_big.value)


def test_init_command_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["init", "--model-path", str(TEST_MODELS / "llama-3.1-8b"), "--gpu", "H100 SXM"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    written = tmp_path / "llama-3.1-8b-h100-sxm-chat.yaml"
    assert f"wrote {written.name}" in result.output
    space = load_space(written)
    # Real sglang unless the simulator is asked for: no sim: block to run it by mistake.
    assert space.engine.server == "real" and space.sim == {}
    assert "sim:" not in written.read_text()
    # Without sglang in this Python the file names the newest release, and init says what to do.
    lacks = installed_sglang() is None
    assert ("note: the trials run real sglang, which this Python lacks" in result.output) == lacks
    again = CliRunner().invoke(app, args)
    assert isinstance(again.exception, UserError) and "--force" in str(again.exception)
    simulated = CliRunner().invoke(app, [*args, "--engine", "sim", "-o", "sim.yaml"])
    assert simulated.exit_code == 0, simulated.output
    space = load_space(tmp_path / "sim.yaml")
    # The simulator has an H100 SXM profile: the space's simulator runs on that GPU.
    assert space.engine.server == "simulated"
    assert set(space.sim) == {"hardware", "time_scale"} and space.sim["hardware"] == "h100-sxm"


def test_a_gpu_the_spec_table_lacks_is_named_with_its_memory(tmp_path, monkeypatch):
    """`--gpu` names a GPU missing from the spec table (an A40): refused with the way out,
    then written with `--gpu-memory-gb` on a provisional row, as NVML's unknown GPUs are.
    The memory bounds the space: Mixtral's 93 GB of weights fit in 141 GB, not in 48."""
    with pytest.raises(UserError) as unknown:
        read_gpu("NVIDIA A40")
    assert "--gpu-memory-gb" in str(unknown.value) and "\n" not in str(unknown.value)
    gpu = read_gpu("NVIDIA A40", 48.0)
    assert gpu.spec.provisional and gpu.spec.name == "NVIDIA A40" and gpu.memory_gb == 48.0
    assert "not in the spec table" in gpu.source and gpu.sim_hardware is None
    # A known GPU keeps its spec row and takes the given memory (an H100 with 94 GB).
    h100 = read_gpu("H100 SXM", 94.0)
    assert not h100.spec.provisional and h100.memory_gb == 94.0
    assert h100.source.endswith("--gpu-memory-gb")
    with pytest.raises(UserError, match="above 0"):
        read_gpu("NVIDIA A40", 0.0)
    with pytest.raises(UserError) as too_big:
        _init(tmp_path, TEST_MODELS / "mixtral-8x7b", "NVIDIA A40", gpu_memory_gb=48.0)
    assert "leave no room for a KV cache" in str(too_big.value)
    monkeypatch.chdir(tmp_path)
    args = ["init", "--model-path", str(TEST_MODELS / "mixtral-8x7b"), "--gpu", "NVIDIA A40",
            "--gpu-memory-gb", "141", "--workload", "rag", "--host-ram-gb", "256"]  # fmt: skip
    result = CliRunner().invoke(app, [*args, "--engine", "sim"])
    assert result.exit_code == 0, result.output
    written = tmp_path / "mixtral-8x7b-nvidia-a40-rag.yaml"
    text = written.read_text()
    assert "# GPU: NVIDIA A40, 141 GB" in text
    space = load_space(written)
    assert "mem_fraction_static" in space.params
    # The simulator has no A40 profile: it is given this GPU's figures, so that a study on it
    # models (and prices) the A40 the space was written for, not the simulator's default GPU.
    run = resolve_run(StudyOptions(space_path=written, studies_dir=tmp_path / "studies"))
    assert run.options.engine == "sim"
    assert run.host.gpu_name == "NVIDIA A40"
    assert run.host.gpu_memory_gb == pytest.approx(141.0, abs=0.1)


def test_weights_above_90_percent_of_the_gpu_leave_the_top_fraction_alone(tmp_path):
    """Mixtral's 93 GB of weights on a 100 GB GPU: the weights' share plus 5 points (0.98) is
    above the range's top, so the written range is 0.95 alone (it was 0.98 to 0.95, and init
    refused its own file), while a 110 GB GPU keeps a range."""
    model = TEST_MODELS / "mixtral-8x7b"
    tight = load_space(_init(tmp_path / "a", model, "NVIDIA A40", gpu_memory_gb=100.0))
    memory = tight.params["mem_fraction_static"]
    assert memory.low == memory.high == 0.95
    roomy = load_space(_init(tmp_path / "b", model, "NVIDIA A40", gpu_memory_gb=110.0))
    assert roomy.params["mem_fraction_static"].low < 0.95


def test_a_hub_id_in_the_local_cache(tmp_path, monkeypatch):
    snapshot = tmp_path / "hub" / "models--mistralai--Mixtral-8x7B-v0.1" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(
        (TEST_MODELS / "mixtral-8x7b" / "config.json").read_text()
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    path = _init(tmp_path, "mistralai/Mixtral-8x7B-v0.1", "h200", "rag")
    space = load_space(path)
    assert space.model_path == "mistralai/Mixtral-8x7B-v0.1"  # what sglang loads
    assert space.sim["model"] == str(snapshot)  # the simulator builds the model from the cache
    # 46.7e9 parameters (8 experts of 3 x 4096 x 14336 per layer), bf16
    assert "93.4 GB of weights" in path.read_text()


def test_on_a_gpu_host_nvml_names_the_gpu_and_proc_meminfo_the_host_ram(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml())
    gpu = read_gpu(None)
    assert gpu.spec.name == "H100 SXM" and gpu.memory_gb == pytest.approx(85.52, abs=0.01)
    assert gpu.source == "NVML: NVIDIA H100 80GB HBM3" and gpu.sim_hardware is None
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       263856524 kB\nMemAvailable:   250000000 kB\n")
    assert meminfo_available_gb(meminfo) == pytest.approx(256.0)
    assert read_host(gpu).source == "/proc/meminfo MemAvailable on this host"


def test_a_gpu_the_spec_table_lacks_gets_its_memory_from_nvml(monkeypatch):
    unknown = FakePynvml(name=b"NVIDIA Engineering Sample 9000")
    monkeypatch.setitem(sys.modules, "pynvml", unknown)
    gpu = read_gpu(None)
    assert gpu.spec.provisional and gpu.spec.name == "NVIDIA Engineering Sample 9000"
    assert gpu.memory_gb == pytest.approx(85.52, abs=0.01)
    assert "not in the spec table" in gpu.source


def test_on_a_small_gpu_the_memory_range_ends_where_sglangs_plan_still_fits(tmp_path):
    """A 14.5 GB model on a 24 GB GPU: at 0.95 the activations' reserve (sglang's, with the
    4,096-token chunk and 48-batch graphs it picks on a GPU of that size) is short, lower it
    fits."""
    model = tmp_path / "mistral"
    model.mkdir()
    (model / "config.json").write_text(
        '{"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,'
        ' "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,'
        ' "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 32768,'
        ' "max_position_embeddings": 32768, "torch_dtype": "bfloat16"}'
    )
    text = _init(tmp_path, model, "L4").read_text()
    spec = yaml.safe_load(text)["params"]["mem_fraction_static"]
    assert spec["low"] < spec["high"] < 0.95
    assert "sglang's memory plan on this GPU" in text


PHI3 = {  # Phi-3-medium's shape: a 4096-token context, shorter than the RAG template's requests
    "architectures": ["Phi3ForCausalLM"],
    "model_type": "phi3",
    "hidden_size": 5120,
    "intermediate_size": 17920,
    "num_hidden_layers": 40,
    "num_attention_heads": 40,
    "num_key_value_heads": 10,
    "vocab_size": 32064,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}


def test_a_workload_is_shortened_to_fit_the_models_context(tmp_path):
    """A 4096-token document with its question and answer (4480 tokens) does not fit Phi-3's
    4096-token context: every request of the benchmark failed (24 of 24 trials). The document
    is shortened, the file says so, and a trial serves the benchmark."""
    model = tmp_path / "phi3"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(PHI3))
    path = _init(tmp_path, model, "l40s", "rag")
    space = load_space(path)
    assert space.workload["system_prompt_len"] == 3712  # 4096 - 128 - 256, on a 64 boundary
    assert "system_prompt_len 4096 -> 3712" in " ".join(path.read_text().split())
    data = yaml.safe_load(path.read_text())
    data["workload"] = {**data["workload"], "groups": 2, "prompts_per_group": 4}
    data["bench"] = {**data["bench"], "concurrency": 4, "stages": 1, "warmup_requests": 0}
    small = path.with_name("small.yaml")
    small.write_text(yaml.safe_dump(data, sort_keys=False))
    options = StudyOptions(trials=1, space_path=small, studies_dir=tmp_path / "studies", seed=0)
    run_study(resolve_run(options))
    study = optuna.load_study(
        study_name=space.name, storage=f"sqlite:///{tmp_path / 'studies' / space.name}.db"
    )
    assert [t.state for t in study.trials] == [TrialState.COMPLETE]
    # A context too small for any such workload is refused in one line.
    (model / "config.json").write_text(json.dumps({**PHI3, "max_position_embeddings": 384}))
    with pytest.raises(UserError, match="context \\(384 tokens"):
        _init(tmp_path / "tiny", model, "l40s", "rag")


def test_a_relative_model_directory_is_written_as_an_absolute_path(tmp_path, monkeypatch, caplog):
    """sglang and the simulator read --model-path from their working directory: a space that
    kept `models/x` would serve another model (the simulator: its default) when run elsewhere."""
    models = tmp_path / "models" / "mixtral-8x7b"
    models.mkdir(parents=True)
    (models / "config.json").write_text((TEST_MODELS / "mixtral-8x7b" / "config.json").read_text())
    monkeypatch.chdir(tmp_path)
    path = _init(tmp_path, "models/mixtral-8x7b", "h200", "rag")
    space = load_space(path)
    assert space.model_path == str(models.resolve())
    # Run from another directory, the simulator still serves Mixtral, not its default model.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    target = launch_target(space, StudyOptions(engine="sim"))
    with caplog.at_level(logging.WARNING):
        host = read_host_facts("sim", target.module, target.extra_args, space.model_path)
        assert host.model is not None and host.model.experts == 8
        assert not caplog.records
        # the relative path as such would not: the tuner says so
        default = read_host_facts("sim", target.module, target.extra_args, "models/mixtral-8x7b")
    assert default.model is not None and default.model.experts == 0
    assert "serves its default, qwen3.6-27b" in caplog.text
