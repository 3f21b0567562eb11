"""The log lines sglang prints while it starts, with its wording, from a memory plan.

The tuner's launcher parses these lines (capacity) and greps the failure lines, so the wording
follows sglang exactly; the figures are modelled (GiB printed as "GB", as sglang does).
"""

from __future__ import annotations

import sys
import time
from dataclasses import fields

from tuner.sim.args import ServerArgs
from tuner.sim.config import SimConfig
from tuner.sim.failures import StartupFailure
from tuner.sim.memory import MemoryPlan

READY_LINE = "The server is fired up and ready to roll!"


def emit(message: str, prefix: str = "") -> None:
    """One log line in sglang's format, on stderr (where Python logging writes)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    sys.stderr.write(f"[{stamp}{prefix}] {message}\n")
    sys.stderr.flush()


def server_args_line(args: ServerArgs) -> str:
    shown = []
    for f in fields(args):
        if f.name in ("argv", "old_flag_names") or f.name.startswith("sim_"):
            continue
        value = getattr(args, f.name)
        if f.name == "api_key" and value:
            value = "***"
        shown.append(f"{f.name}={value!r}")
    return "server_args=ServerArgs(" + ", ".join(shown) + ")"


def load_begin_line(config: SimConfig) -> str:
    hw = config.hardware
    return f"Load weight begin. avail mem={hw.gpu_memory_gib - hw.runtime_overhead_gib:.2f} GB"


def load_end_line(config: SimConfig, elapsed_s: float) -> str:
    hw, model = config.hardware, config.model
    weights = model.weight_bytes / 1024**3
    avail = hw.gpu_memory_gib - hw.runtime_overhead_gib - weights
    return (
        f"Load weight end. elapsed={elapsed_s:.2f} s, type={model.architecture}, "
        f"avail mem={avail:.2f} GB, mem usage={weights:.2f} GB."
    )


def pool_lines(config: SimConfig, plan: MemoryPlan) -> list[str]:
    lines = []
    if config.model.hybrid:
        line = (
            f"Mamba Cache is allocated. max_mamba_cache_size: {plan.mamba_slots}, "
            f"conv_state size: {plan.conv_state_gib:.2f}GB, "
            f"ssm_state size: {plan.ssm_state_gib:.2f}GB"
        )
        if config.spec is not None:
            line += (
                f" intermediate_ssm_state_cache size: {plan.intermediate_ssm_gib:.2f}GB"
                f" intermediate_conv_window_cache size: {plan.intermediate_conv_gib:.2f}GB"
            )
        lines.append(line)
    dtype = "torch.float8_e4m3fn" if config.kv_dtype_bytes == 1 else "torch.bfloat16"
    lines.append(
        f"KV Cache is allocated. dtype: {dtype}, #tokens: {plan.max_total_num_tokens}, "
        f"K size: {plan.kv_k_gib:.2f} GB, V size: {plan.kv_v_gib:.2f} GB"
    )
    if config.hicache:
        lines.append(
            f"Allocating {plan.hicache_host_gib:.2f} GB host memory for hierarchical "
            f"KV cache: {plan.hicache_host_tokens} tokens"
        )
    free_before_graphs = plan.available_gpu_mem_gib + plan.cuda_graph_gib
    lines.append(f"Memory pool end. avail mem={free_before_graphs:.2f} GB")
    return lines


def graph_lines(config: SimConfig, plan: MemoryPlan, elapsed_s: float) -> list[str]:
    if config.cuda_graph_max_bs_decode == 0:
        return []
    free_before = plan.available_gpu_mem_gib + plan.cuda_graph_gib
    return [
        "Capture cuda graph begin. This can take up to several minutes. "
        f"avail mem={free_before:.2f} GB",
        f"Capture cuda graph end. Time elapsed: {elapsed_s:.2f} s. "
        f"mem usage={plan.cuda_graph_gib:.2f} GB. avail mem={plan.available_gpu_mem_gib:.2f} GB.",
    ]


def capacity_line(plan: MemoryPlan) -> str:
    return (
        f"max_total_num_tokens={plan.max_total_num_tokens}, "
        f"chunked_prefill_size={plan.chunked_prefill_size}, "
        f"max_prefill_tokens={plan.max_prefill_tokens}, "
        f"max_running_requests={plan.max_running_requests}, "
        f"context_len={plan.context_len}, "
        f"available_gpu_mem={plan.available_gpu_mem_gib:.2f} GB"
    )


def failure_lines(failure: StartupFailure, in_scheduler: bool) -> list[str]:
    """A traceback ending in sglang's exception line (the launcher greps that last line)."""
    head = "Scheduler hit an exception: " if in_scheduler else ""
    where = (
        ("sglang/srt/managers/scheduler.py", "run_scheduler_process")
        if in_scheduler
        else ("sglang/srt/server_args.py", "__post_init__")
    )
    return [
        f"{head}Traceback (most recent call last):",
        f'  File "{where[0]}", line 1, in {where[1]}',
        *failure.line.splitlines(),
    ]
