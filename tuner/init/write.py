"""The search-space file `tuner init` writes: header, commented params, workload, goals.

    text = space_text(InitRequest(...), model, gpu, host, version, version_source)

The workload templates and their default SLOs (stated in the file):

    chat     multi-turn: 32 conversations x 4 turns, a 2048-token system prompt, 256-token user
             turns and answers; 16 clients; p99_ttft_ms <= 3000
    rag      shared-prefix: 16 documents of 4096 tokens x 16 questions of 128 tokens, 256-token
             answers; 32 clients; p99_ttft_ms <= 5000 (the first question on each document
             prefills all of it: 1 request in 16, the tail)
    random   200 requests of 1024 prompt and 256 output tokens; 32 clients; p99_ttft_ms <= 2000
    FILE     a JSONL file (one request a line: prompt or input_ids, optional output_len);
             16 clients; p99_ttft_ms <= 3000
    TRACE    a trace file (mooncake, azure, burstgpt, sharegpt, openai-chat; docs/traces.md):
             an open loop at its own times, or a closed loop of one client per conversation;
             an SLO from its prompt lengths (tuner/init/trace.py)

A template whose longest request does not fit the model's context has its system prompt,
document or input shortened until it does (`fit_context`): sglang rejects a longer prompt.
Objectives are always output tok/s (maximized) against median TPOT (minimized).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tuner.errors import UserError
from tuner.init.facts import GB, GpuFacts, HostFacts, ModelFacts

if TYPE_CHECKING:
    from tuner.init.params import Plan

# kind -> (workload, bench.concurrency, default SLO, what it models)
TEMPLATES: dict[str, tuple[dict[str, Any], int, str, str]] = {
    "chat": (
        {"kind": "multi-turn", "conversations": 32, "turns": 4, "system_prompt_len": 2048,
         "user_len": 256, "answer_len": 256, "seed": 0},
        16, "p99_ttft_ms <= 3000",
        "Chat sessions: a shared system prompt, then turns that each resend the whole history.",
    ),
    "rag": (
        {"kind": "shared-prefix", "groups": 16, "prompts_per_group": 16,
         "system_prompt_len": 4096, "question_len": 128, "output_len": 256, "seed": 0},
        32, "p99_ttft_ms <= 5000",
        "Retrieval-augmented questions: 16 documents, 16 questions on each (shared prefixes).",
    ),
    "random": (
        {"kind": "random", "requests": 200, "input_len": 1024, "output_len": 256, "seed": 0},
        32, "p99_ttft_ms <= 2000",
        "Independent requests of fixed length: no prefix is shared.",
    ),
}  # fmt: skip
JSONL_CONCURRENCY, JSONL_SLO = 16, "p99_ttft_ms <= 3000"
DEFAULT_TIME_SCALE = 200  # as the shipped spaces: modelled figures do not depend on it


@dataclass(frozen=True)
class InitRequest:
    model_path: str
    gpu: str | None = None
    gpu_memory_gb: float | None = None
    workload: str = "chat"
    slos: list[str] = field(default_factory=list)
    sglang_version: str | None = None
    draft_model: str | None = None
    host_ram_gb: float | None = None
    name: str | None = None
    tp_size: int = 1  # GPUs one server spans
    # --kv-cache-dtype: one is a fixed flag, several a choice of the space; none: sglang's auto
    kv_cache_dtypes: tuple[str, ...] = ()
    engine: str = "sglang"  # where the trials run: "sglang" (real) or "sim" (the simulator)
    engine_python: str | None = None  # the interpreter that runs sglang (None: the tuner's)
    device: str = "gpu"  # "cpu": sglang's CPU engine, no GPU (tuner/init/cpu.py)


@dataclass(frozen=True)
class WorkloadChoice:
    """The workload `--workload` names, the bench and SLO that go with it."""

    workload: dict[str, Any]
    concurrency: int | None  # bench.concurrency; None: an open-loop trace (no cap)
    slo: str  # the default SLO
    story: str  # the comment above `workload:`
    statement: tuple[str, ...] = ()  # what init prints about a trace file


def workload_template(choice: str) -> WorkloadChoice:
    from tuner.init.trace import read_trace_workload

    if choice in TEMPLATES:
        return WorkloadChoice(*TEMPLATES[choice])
    path = Path(choice)
    if path.is_file():
        trace = read_trace_workload(path)
        if trace is not None:
            story = " ".join(trace.story)
            return WorkloadChoice(
                trace.workload, trace.concurrency, trace.slo, story, tuple(trace.statement)
            )
    if choice.endswith(".jsonl"):
        if not path.is_file():
            raise UserError(f"--workload {choice}: no such file")
        return WorkloadChoice(
            {"kind": "jsonl", "file": str(path.resolve()), "seed": 0},
            JSONL_CONCURRENCY,
            JSONL_SLO,
            f"Requests replayed from {choice}.",
        )
    if path.is_file():
        raise UserError(
            f"--workload {choice}: not a trace in a known format (mooncake, azure, burstgpt, "
            "sharegpt, openai-chat: docs/traces.md) nor a JSONL of prompts (FILE.jsonl)"
        )
    raise UserError(
        f"--workload {choice!r}: one of {', '.join(TEMPLATES)}, a trace file or a FILE.jsonl"
    )


# The template's part that shrinks when a request would not fit in the model's context.
_SHRINKS = {"multi-turn": "system_prompt_len", "shared-prefix": "system_prompt_len",
            "random": "input_len"}  # fmt: skip


def fit_context(workload: dict[str, Any], context_length: int) -> tuple[dict[str, Any], str]:
    """The template with its longest request inside the model's context (sglang rejects a
    prompt that does not fit: every request of the benchmark would fail), and a note saying
    what was shortened ("" when nothing was)."""
    from tuner.bench.workload import WorkloadSpec, longest_request  # numpy: only when init runs

    if workload["kind"] not in _SHRINKS:
        return workload, ""  # a JSONL file: its requests are the user's own
    # The generator's own requests (tuner/bench/workload.py), not a formula that could drift.
    longest = longest_request(WorkloadSpec.from_dict(workload).make_conversations()) or 0
    if longest <= context_length:
        return workload, ""
    part = _SHRINKS[workload["kind"]]
    value = int(workload[part]) - (longest - context_length)
    if value < 128:
        raise UserError(
            f"the model's context ({context_length} tokens, max_position_embeddings in its "
            f"config.json) cannot hold this workload's longest request ({longest} tokens) even "
            f"with a {part} of 128; write the workload yourself (--workload FILE.jsonl)"
        )
    value -= value % 64
    note = (
        f"{part} {workload[part]} -> {value}: the longest request ({longest} tokens) did not "
        f"fit the model's context of {context_length}"
    )
    return {**workload, part: value}, note


def space_name(model: ModelFacts, gpu: GpuFacts, workload: str, choice: WorkloadChoice) -> str:
    base = model.model_path.rstrip("/").split("/")[-1]
    kind = workload if workload in TEMPLATES else str(choice.workload["kind"])
    gpus = gpu.spec.name if gpu.count == 1 else f"{gpu.count}x{gpu.spec.name}"
    text = f"{base}-{gpus}-{kind}".lower()
    return re.sub(r"[^a-z0-9._-]+", "-", text).strip("-.") or "my-model"


def space_text(
    request: InitRequest,
    model: ModelFacts,
    gpu: GpuFacts,
    host: HostFacts,
    version: str,
    version_source: str,
    sim_gpu_file: Path | None = None,
    choice: WorkloadChoice | None = None,
) -> str:
    """The space file's text. `sim_gpu_file`: with `--engine sim` for a GPU the simulator has no
    profile for, the file that tells it this GPU's figures (`sim_gpu_overrides`); `choice`: the
    workload `request.workload` names, when already read."""
    from tuner.init.params import kv_cache_dtypes_problem, plan_params  # numpy, optuna
    from tuner.init.trace import over_context_note

    choice = choice or workload_template(request.workload)
    concurrency, default_slo, story = choice.concurrency, choice.slo, choice.story
    workload, shortened = fit_context(choice.workload, model.context_length)
    if shortened:
        story += f" Shortened for this model: {shortened}."
    if workload["kind"] == "trace":
        story = " ".join(filter(None, (story, over_context_note(workload, model.context_length))))
    dtypes = request.kv_cache_dtypes
    problem = kv_cache_dtypes_problem(dtypes, version)
    if problem:
        raise UserError(f"--kv-cache-dtype {problem}")
    plan = plan_params(
        model, gpu, host, workload, concurrency, version, request.draft_model, dtypes
    )
    name = request.name or space_name(model, gpu, request.workload, choice)
    slos = list(request.slos) or [default_slo]
    lines = _header(request, model, gpu, host, version, version_source, plan)
    lines += [f"name: {name}", *_engine_lines(request, version)]
    lines += [
        f"model_path: {_scalar(model.model_path)}",
        "fixed_flags:",
        "  enable_metrics: true  # sglang's /metrics: queue and cache figures in the trial logs",
    ]
    if gpu.count > 1:
        lines.append(f"  tp_size: {gpu.count}  # tensor parallelism: each server spans {gpu.label}")
    if len(dtypes) == 1 and dtypes[0] != "auto":
        lines.append(f"  kv_cache_dtype: {dtypes[0]}  # as given to init: the KV pool's dtype")
    if request.engine == "sim":
        lines += _sim_lines(model, gpu, sim_gpu_file)
    lines += ["", "params:"]
    for param in plan.params:
        lines += [f"  # {part}" for part in textwrap.wrap(" ".join(param.why), 94)]
        lines.append(f"  {param.name}: {_flow(param.spec)}")
    lines += ["", *(f"# {part}" for part in textwrap.wrap(story, 94)), "workload:"]
    lines += [f"  {key}: {_scalar(value)}" for key, value in workload.items()]
    loop = (
        "# A closed loop of `concurrency` clients; the stage pruner checks after each of 4 stages."
        if concurrency is not None
        else "# An open loop at the trace's times (no cap on requests in flight); the stage\n"
        "# pruner checks after each of 4 stages."
    )
    lines += [
        "",
        loop,
        "bench:",
        f"  concurrency: {_scalar(concurrency)}",
        "  request_rate: null",
        "  warmup_requests: 2",
        "  stages: 4",
        "  api: generate",
        "  timeout_s: 600",
        "",
        "# Defaults: the server's output tok/s (maximized) against the per-user speed, median",
        "# time per output token (minimized).",
        "objectives: {throughput: output_throughput, latency: median_tpot_ms}",
        "# " + ("Given with --slo." if request.slos else f"Default for this workload: {slos[0]}."),
        "slos:",
    ]
    lines += [f"  - {_scalar(slo)}" for slo in slos]
    return "\n".join(lines) + "\n"


def _header(
    request: InitRequest,
    model: ModelFacts,
    gpu: GpuFacts,
    host: HostFacts,
    version: str,
    version_source: str,
    plan: Plan,
) -> list[str]:
    kind = "hybrid (linear + full attention)" if model.hybrid else "full attention"
    if model.experts:
        kind += f", mixture of {model.experts} experts"
    ram = f"{host.ram_gb:.0f} GB ({host.source})" if host.ram_gb is not None else "unknown"
    lines = [
        f"Search space written by `tuner init` for {model.model_path}.",
        f"Model: {model.architecture}, {kind}, {model.weight_gb:.1f} GB of weights"
        + (f", {model.mtp_layers} MTP layer(s)" if model.mtp_layers else "")
        + f" (config.json in {model.config_dir}).",
        f"GPU: {gpu.spec.name}, {gpu.memory_gb:.0f} GB, {gpu.spec.bandwidth_gb_s:g} GB/s "
        f"({gpu.source})"
        + (f", {gpu.count} per server (tensor parallelism)" if gpu.count > 1 else "")
        + f". Host RAM: {ram}.",
        f"sglang {version} ({version_source}) decides the flag names.",
        *plan.notes,
        "",
        "Format: docs/writing-a-space.md. Every param below says why it is here and where its",
        "bounds come from; edit freely, `tuner optimize --space FILE --dry-run` shows the cost.",
    ]
    return [f"# {part}".rstrip() for line in lines for part in textwrap.wrap(line, 96) or [""]]


def _engine_lines(request: InitRequest, version: str) -> list[str]:
    """The `engine:` mapping and what it means: real sglang unless the simulator was asked for."""
    if request.engine == "sim":
        comment = (
            "Where the trials run: the simulated server (server: simulated), which speaks "
            f"sglang {version}'s flags; `tuner optimize --engine sglang` runs real sglang instead."
        )
        engine = f'{{name: sglang, version: "{version}", server: simulated}}'
    else:
        python = f", python: {_scalar(request.engine_python)}" if request.engine_python else ""
        started = (
            f", started with {request.engine_python}"
            if request.engine_python
            else " in the Python that runs the tuner (add python: PATH for another)"
        )
        comment = (
            f"Where the trials run: real sglang {version} (server: real){started}. The simulator "
            "is asked for, never assumed: `tuner init --engine sim` writes a space for it."
        )
        engine = f'{{name: sglang, version: "{version}", server: real{python}}}'
    return [*(f"# {part}" for part in textwrap.wrap(comment, 96)), f"engine: {engine}"]


def _sim_lines(model: ModelFacts, gpu: GpuFacts, gpu_file: Path | None) -> list[str]:
    hardware = gpu.sim_hardware
    parts = [f"hardware: {hardware}"] if hardware else []
    what = [f"the {hardware} hardware profile" if hardware else "its default hardware profile"]
    if gpu_file is not None:
        parts.append(f"profile_overrides: {_scalar(str(gpu_file.resolve()))}")
        what = [f"its default hardware profile with {gpu.spec.name}'s figures ({gpu_file.name})"]
    profile = _sim_model_profile(model)
    if profile:
        parts.append(f"model: {profile}")
        what.append(f"the {profile} model profile")
    elif Path(model.model_path).is_dir():
        what.append("a model built from this config.json (--model-path is its directory)")
    else:  # a hub id found in the local cache: point the simulator at the cached config.json
        parts.append(f"model: {_scalar(str(model.config_dir))}")
        what.append("a model built from the cached config.json")
    parts.append(f"time_scale: {DEFAULT_TIME_SCALE}")
    comment = f"The simulator's settings: {' and '.join(what)}, {DEFAULT_TIME_SCALE}x real time."
    return [*(f"# {part}" for part in textwrap.wrap(comment, 96)), f"sim: {{{', '.join(parts)}}}"]


def sim_gpu_overrides(gpu: GpuFacts, host: HostFacts) -> dict[str, Any]:
    """The simulator's hardware values for a GPU it has no profile for (`--sim-profile-overrides`):
    the GPU's memory, bandwidth, bf16 peak and host link from the spec table, so that a study on
    it is priced and modelled on this GPU, not on the simulator's default one. The modelling
    assumptions (efficiencies, step overheads) stay the default profile's."""
    spec = gpu.spec
    hardware: dict[str, Any] = {
        "name": re.sub(r"[^a-z0-9]+", "-", spec.name.lower()).strip("-"),
        # The simulator reports the text before the first comma as the GPU's NVML name.
        "description": f"{spec.name}, figures from tuner init's GPU table",
        "gpu_memory_gib": round(gpu.memory_gb * GB / 2**30, 2),
        "hbm_bandwidth_gb_s": spec.bandwidth_gb_s,
        "bf16_tflops": spec.bf16_tflops,
        "pcie_gb_s": spec.host_link_gb_s,
    }
    if host.ram_gb is not None:
        hardware["host_ram_gib"] = round(host.ram_gb * GB / 2**30, 1)
    return {"hardware": hardware}


def _sim_model_profile(model: ModelFacts) -> str | None:
    """The simulator's model profile when config.json is one it ships (profiles/model/<name>/)."""
    parts = model.config_dir.resolve().parts
    if len(parts) >= 3 and parts[-3:-1] == ("profiles", "model") and "sim" in parts:
        return parts[-1]
    return None


def _flow(spec: dict[str, Any]) -> str:
    return yaml.safe_dump(spec, default_flow_style=True, sort_keys=False, width=1000).strip()


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return text.removesuffix("...").strip()
