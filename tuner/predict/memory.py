"""The memory a configuration needs, from sglang's own sizing rules, before any launch.

A launch that cannot fit costs minutes of GPU time (weights load before sglang finds out), so
`estimate_memory` applies sglang's sizing rules (docs/sglang-memory.md) to the model's shape and
the GPU's memory. It rejects only what clearly cannot fit (no KV tokens left, or far too little
room for activations); borderline cases are left to the launch and to the learned crash model
(tuner/trial/crash_model.py).

    memory = estimate_memory(flags, ModelMemory.from_hf_config(cfg), gpu_memory_gb=96,
                             version="0.5.23")
    if not memory.fits: ...
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.engines.memory_plan import gpu_defaults, mamba_slot_ratio, plan_pools
from tuner.engines.model_config import ModelMemory

__all__ = ["MemoryEstimate", "ModelMemory", "estimate_memory"]

GB = 1e9
MB = 1e6
# Memory already in use outside the static pool when sglang measures it (CUDA context, library
# workspaces): an assumption, since only a launch can measure it.
RUNTIME_OVERHEAD_GB = 1.0 * 2**30 / GB


@dataclass(frozen=True)
class MemoryEstimate:
    fits: bool
    failure_class: str | None  # "not_enough_memory" | "out_of_memory" | None
    reason: str
    mem_fraction_static: float
    kv_tokens: int
    state_slots: int
    activation_room_gb: float
    activation_need_gb: float
    max_running_requests: int = 0  # the cap sglang would settle on (0 when it would not start)


def tensor_parallel(flags: Mapping[str, Any]) -> int:
    """GPUs one server spans (`--tp-size`; 1 when unset)."""
    return max(1, int(flags.get("tp_size") or 1))


def _derived_mem_fraction(
    gpu_bytes: float, chunked_prefill: int, graph_bs: int, spec: bool, tp: int = 1
) -> float:
    # sglang's rule when --mem-fraction-static is unset (docs/sglang-memory.md); with tensor
    # parallelism 0.5.23 reserves tp / 8 GiB more (arg_groups/memory_hook.py).
    reserved = 512 * MB + 1.5 * MB * max(chunked_prefill, 2048) + 2 * MB * graph_bs
    if tp > 1:
        reserved += tp / 8 * 1024 * MB
    if gpu_bytes > 60 * GB:
        reserved = max(reserved, 10 * GB)
    if spec:
        reserved += 4 * GB
    return (gpu_bytes - reserved) / gpu_bytes


def estimate_memory(
    flags: Mapping[str, Any],
    model: ModelMemory,
    gpu_memory_gb: float,
    *,
    activation_safety: float = 0.25,
    version: str = "0.5.23",
    runtime_overhead_gb: float = RUNTIME_OVERHEAD_GB,
) -> MemoryEstimate:
    """Pure estimate of whether `flags` can start; rejects only clear failures.

    `activation_safety` scales the activation need before comparing it with the room left: 0.25
    means "reject only when less than a quarter of sglang's own reserve is left", because the exact
    need depends on kernels and CUDA graphs that only a launch can measure.
    """
    gpu = gpu_memory_gb * GB
    tp = tensor_parallel(flags)
    problem = model.tensor_parallel_problem(tp)
    if problem:
        return MemoryEstimate(False, "startup_rule", problem, 0.0, 0, 0, 0.0, 0.0)
    # one GPU's share, its KV as --kv-cache-dtype stores it: every figure below is per GPU
    model = model.sharded(tp).with_kv_cache_dtype(flags.get("kv_cache_dtype"))
    spec = bool(flags.get("speculative_algorithm"))
    # sglang's own choices when unset, by the GPU's memory and the tensor-parallel size
    default_chunk, default_graph_bs = gpu_defaults(gpu_memory_gb, tp)
    chunked = int(flags.get("chunked_prefill_size") or default_chunk)
    if chunked < 0:
        chunked = default_chunk
    graph_bs = int(
        flags.get("cuda_graph_max_bs_decode") or flags.get("cuda_graph_max_bs") or default_graph_bs
    )
    mfs_flag = flags.get("mem_fraction_static")
    mfs = (
        float(mfs_flag)
        if mfs_flag is not None
        else _derived_mem_fraction(gpu, chunked, graph_bs, spec, tp)
    )
    need = (512 * MB + 1.5 * MB * max(chunked, 2048) + 2 * MB * graph_bs) * activation_safety
    room = gpu * (1.0 - mfs)
    plan = plan_pools(
        gpu * mfs
        - runtime_overhead_gb * GB
        - model.weight_bytes
        - (model.draft_bytes if spec else 0),
        **_pool_inputs(flags, model, spec),
        version=version,
    )
    kv_tokens, slots = plan.kv_tokens, plan.mamba_slots

    def result(fits: bool, failure: str | None, reason: str) -> MemoryEstimate:
        return MemoryEstimate(
            fits, failure, reason, mfs, kv_tokens, slots, room / GB, need / GB,
            plan.max_running_requests,
        )  # fmt: skip

    if not plan.fits:
        reserve = (
            f" and {plan.spec_reserve_bytes / GB:.1f} GB of speculative state"
            if plan.spec_reserve_bytes
            else ""
        )
        return result(
            False,
            "not_enough_memory",
            f"mem_fraction_static {mfs:.2f} leaves {max(plan.rest_bytes, 0) / GB:.1f} GB after "
            f"{model.weight_bytes / GB:.1f} GB of weights{reserve}, as sglang {version} plans "
            f"memory: {plan.reason}",
        )
    widest = _widest_adaptive_draft(flags) if spec and model.state_bytes_per_request else 0
    draft = int(flags.get("speculative_num_draft_tokens") or 4) if spec else 0
    excess = 0.0
    if widest > draft:
        # Adaptive steps: sglang 0.5.23 allocates the Mamba intermediate states for the widest
        # candidate draft (srt/speculative/spec_info.py resolve_max_speculative_num_draft_tokens,
        # passed to the pool at srt/mem_cache/kv_cache_configurator.py:1718-1734) but budgets
        # the pool for the starting draft (:3361-3376): the rest comes out of this room.
        running = max(plan.max_running_requests, 1)
        excess = model.state_bytes_per_request * (running + 1) * (widest - draft)
    if room < need + excess:
        widen = f" and {excess / GB:.1f} GB of adaptive draft states" if excess else ""
        return result(
            False,
            "out_of_memory",
            f"mem_fraction_static {mfs:.2f} leaves {room / GB:.1f} GB for activations and CUDA "
            f"graphs{widen}, below {(need + excess) / GB:.1f} GB",
        )
    return result(
        True,
        None,
        f"{kv_tokens} KV tokens, {slots} state slots, {plan.max_running_requests} running, "
        f"{room / GB:.1f} GB free",
    )


# The largest candidate step count of sglang 0.5.23's default adaptive tiers
# (srt/speculative/adaptive_spec_params.py: 1 / 3 / 5 / 7 from batch 1).
ADAPTIVE_MAX_STEPS = 7


def _widest_adaptive_draft(flags: Mapping[str, Any]) -> int:
    """Draft tokens the widest adaptive step count needs (0 without adaptive speculation): the
    largest candidate + 1 (topk 1), from --speculative-adaptive-config when it can be read."""
    if not flags.get("speculative_adaptive"):
        return 0
    steps = ADAPTIVE_MAX_STEPS
    path = flags.get("speculative_adaptive_config")
    if path:
        try:
            tiers = json.loads(Path(str(path)).read_text())
            found = [int(x) for tier in tiers.values() if isinstance(tier, dict)
                     for x in tier.get("candidate_steps", ())]  # fmt: skip
            steps = max(found) if found else steps
        except (OSError, ValueError, AttributeError, TypeError):
            pass  # unreadable here: sglang's default tiers
    return steps + 1


def _pool_inputs(flags: Mapping[str, Any], model: ModelMemory, spec: bool) -> dict[str, Any]:
    """plan_pools' keyword arguments from the trial's flags (sglang's defaults when unset)."""
    page = int(flags.get("page_size") or 1)
    radix = not flags.get("disable_radix_cache")
    overlap = not flags.get("disable_overlap_schedule")
    strategy = flags.get("mamba_radix_cache_strategy") or flags.get("mamba_scheduler_strategy")
    if strategy in (None, "auto"):
        strategy = "extra_buffer" if (overlap or page > 1) else "no_buffer"
    if strategy == "no_buffer":
        overlap = False  # sglang switches overlap scheduling off for no_buffer
    draft_tokens = int(flags.get("speculative_num_draft_tokens") or 4) if spec else 0
    own_draft = bool(flags.get("speculative_draft_model_path"))
    uses_mtp = spec and not own_draft and flags.get("speculative_algorithm") in ("NEXTN", "EAGLE")
    running = flags.get("max_running_requests")
    mamba = flags.get("max_mamba_cache_size")
    total = flags.get("max_total_tokens")
    return {
        "kv_bytes_per_token": model.kv_bytes_per_token
        + (model.draft_kv_bytes_per_token if uses_mtp else 0.0),
        "state_bytes_per_request": model.state_bytes_per_request,
        "draft_tokens": draft_tokens,
        "max_running_requests": int(running) if running else None,
        "max_mamba_cache_size": int(mamba) if mamba else None,
        "mamba_full_memory_ratio": float(flags.get("mamba_full_memory_ratio") or 0.9),
        "slot_ratio": mamba_slot_ratio(radix_cache=radix, strategy=strategy, overlap=overlap),
        "radix_cache": radix,
        "page_size": page,
        "max_total_tokens": int(total) if total else None,
    }
