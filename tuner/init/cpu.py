"""The space `tuner init --device cpu` writes: real sglang on its CPU engine, no GPU.

    text = cpu_space_text(InitRequest(..., device="cpu"), model, version, version_source)

The CPU engine is how the tuner's real path runs on a machine without a GPU
(docs/real-sglang-cpu.md, search_spaces/tiny-llama-cpu.yaml): the same launch, logs,
/server_info, failures and clean-up as on a GPU, at a CPU's pace. So the space differs from a
GPU's in three ways, each stated in the file:

- sglang 0.5.23 takes its CPU path only with SGLANG_USE_CPU_ENGINE=1 in the server's environment;
  OpenMP is pinned to one core (a busy neighbour otherwise slows every step many times), and with
  that binding sglang cannot size its KV pool from host memory: `max_total_tokens` is fixed.
- the GPU questions (memory fraction, CUDA graphs, HiCache, speculation) do not exist; the
  scheduler's do: batch size, prefill chunk, queue order, decode steps between scheduling rounds.
- the workload template keeps its shape (multi-turn, shared prefixes, random) at a size a CPU
  serves in about a minute a trial.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

from tuner.init.facts import ModelFacts
from tuner.init.write import InitRequest, _flow, _scalar, fit_context, workload_template

# The server's environment on the CPU (the values of tests/support/real_sglang.py's CPU_ENV).
CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1", "SGLANG_CPU_OMP_THREADS_BIND": "0"}
CPU_KV_TOKENS = 8192  # the pool sglang cannot size itself with OpenMP pinned
CPU_CONCURRENCY = 8
# A template's counts and lengths are cut to these (never raised) on a CPU.
CPU_CUTS = {
    "conversations": 8, "turns": 2, "system_prompt_len": 512, "user_len": 64, "answer_len": 32,
    "groups": 4, "prompts_per_group": 4, "question_len": 64, "output_len": 32,
    "requests": 32, "input_len": 256,
}  # fmt: skip


def cpu_workload(workload: dict[str, Any]) -> dict[str, Any]:
    """The template's workload cut to a CPU's size (a JSONL file is the user's own: kept)."""
    if workload["kind"] == "jsonl":
        return workload
    return {
        key: min(value, CPU_CUTS[key]) if key in CPU_CUTS else value
        for key, value in workload.items()
    }


def cpu_space_name(model: ModelFacts, workload: str) -> str:
    base = model.model_path.rstrip("/").split("/")[-1]
    kind = workload if not workload.endswith(".jsonl") else "jsonl"
    return re.sub(r"[^a-z0-9._-]+", "-", f"{base}-cpu-{kind}".lower()).strip("-.") or "my-model"


def _size(size_bytes: float) -> str:
    """1.6 MB or 16.1 GB: a CPU's test models are small."""
    return f"{size_bytes / 1e9:.1f} GB" if size_bytes >= 1e9 else f"{size_bytes / 1e6:.1f} MB"


def _params(concurrency: int) -> list[tuple[str, str, str]]:
    """(flag, spec, why) of the scheduler's questions on a CPU."""
    return [
        ("max_running_requests", "{low: 1, high: concurrency, log: true}",
         f"Requests batched at once: up to the {concurrency} clients of the closed loop; a "
         "larger batch raises tok/s and every user's time per token."),
        ("chunked_prefill_size", "{choices: [null, 256, 1024]}",
         "Prefill chunk in tokens (null: sglang's own, 4096 on a CPU): a smaller one lets "
         "running decodes step between a long prompt's chunks."),
        ("schedule_policy", "{choices: [fcfs, lpm]}",
         "Queue order: arrival, or the longest cached prefix first (the workload's shared "
         "prompts are reused)."),
        ("num_continuous_decode_steps", "{choices: [1, 2, 4]}",
         "Decode steps between scheduling rounds: fewer rounds, later admission of new "
         "requests."),
    ]  # fmt: skip


def cpu_space_text(
    request: InitRequest, model: ModelFacts, version: str, version_source: str
) -> str:
    """The space file's text for real sglang on this machine's CPU."""
    choice = workload_template(request.workload)
    template, default_slo, story = choice.workload, choice.slo, choice.story
    workload = cpu_workload(template)
    if workload != template:
        story += " Cut to a CPU's size (a GPU space: `tuner init` without --device cpu)."
    workload, shortened = fit_context(workload, model.context_length)
    if shortened:
        story += f" Shortened for this model: {shortened}."
    name = request.name or cpu_space_name(model, request.workload)
    slos = list(request.slos) or [default_slo]
    header = [
        f"Search space written by `tuner init --device cpu` for {model.model_path}.",
        f"Model: {model.architecture}, {_size(model.memory.weight_bytes)} of weights "
        f"(config.json in {model.config_dir}).",
        "Device: this machine's CPU through sglang's CPU engine (docs/real-sglang-cpu.md): the "
        "real server at a CPU's pace. The GPU questions (memory fraction, CUDA graphs, HiCache, "
        "speculation) do not exist here; the scheduler's do.",
        f"sglang {version} ({version_source}) decides the flag names.",
        "",
        "Format: docs/writing-a-space.md; `tuner optimize --space FILE --dry-run` shows the cost.",
    ]
    lines = [f"# {part}".rstrip() for line in header for part in textwrap.wrap(line, 96) or [""]]
    python = f"  python: {_scalar(request.engine_python)}" if request.engine_python else None
    lines += [
        f"name: {name}",
        "# Where the trials run: real sglang on the CPU (server: real)"
        + (", started with the Python below." if python else ", in the tuner's Python."),
        "engine:",
        "  name: sglang",
        f'  version: "{version}"',
        "  server: real",
        *([python] if python else []),
        "  env:",
        "    # sglang takes its CPU path only with this set (srt/utils/common.py, is_cpu).",
        f'    SGLANG_USE_CPU_ENGINE: "{CPU_ENV["SGLANG_USE_CPU_ENGINE"]}"',
        "    # OpenMP on one core: with its default binding a busy neighbour process slows",
        "    # decoding many times over.",
        f'    SGLANG_CPU_OMP_THREADS_BIND: "{CPU_ENV["SGLANG_CPU_OMP_THREADS_BIND"]}"',
        f"model_path: {_scalar(model.model_path)}",
        "fixed_flags:",
        "  device: cpu",
        "  # The idle scheduler sleeps instead of spinning a core between requests.",
        "  sleep_on_idle: true",
        "  # With OpenMP pinned sglang cannot size the KV pool from host memory: fixed here.",
        f"  max_total_tokens: {CPU_KV_TOKENS}",
        "",
        "params:",
    ]
    for flag, spec, why in _params(CPU_CONCURRENCY):
        lines += [f"  # {part}" for part in textwrap.wrap(why, 94)]
        lines.append(f"  {flag}: {spec}")
    lines += ["", *(f"# {part}" for part in textwrap.wrap(story, 94)), "workload:"]
    lines += [f"  {key}: {_scalar(value)}" for key, value in workload.items()]
    lines += [
        "",
        "# A closed loop of `concurrency` clients; the stage pruner checks after each of 2 stages.",
        "bench:",
        f"  concurrency: {CPU_CONCURRENCY}",
        "  request_rate: null",
        "  warmup_requests: 1",
        "  stages: 2",
        "  api: generate",
        "  timeout_s: 120",
        "",
        "# The server's output tok/s (maximized) against median time per output token (minimized).",
        f"objectives: {_flow({'throughput': 'output_throughput', 'latency': 'median_tpot_ms'})}",
        "# " + ("Given with --slo." if request.slos else f"Default for this workload: {slos[0]}."),
        "slos:",
        *(f"  - {_scalar(slo)}" for slo in slos),
    ]
    return "\n".join(lines) + "\n"
