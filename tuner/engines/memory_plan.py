"""How sglang splits the memory left after the weights between state slots and KV, per release.

Pure functions over byte counts; docs/sglang-memory.md has the rules with the sglang file and line
each follows. Two planners exist for hybrid (Mamba / linear-attention) models:

- ``"0.5.10"`` (0.5.10 and 0.5.11): with speculative decoding, an intermediate-state reserve of
  state bytes x max_running_requests x draft tokens comes off first; the remainder is split
  state : KV by ``--mamba-full-memory-ratio``.
- ``"0.5.23"``: the state slots K and the speculative reserve are solved jointly inside the state
  budget, and the reserve is for min(max_running_requests, K // slot ratio) + 1 requests only.

    >>> plan = plan_pools(
    ...     34.85 * GIB, kv_bytes_per_token=65536, state_bytes_per_request=153944064,
    ...     draft_tokens=4, max_running_requests=48, slot_ratio=5, version="0.5.23")
    >>> plan.mamba_slots, plan.max_running_requests
    (61, 12)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GIB = 1024**3
# Releases from this one on size the Mamba pool and the speculative reserve jointly. 0.5.10 and
# 0.5.11 were read and use the older rule; releases in between were not checked.
JOINT_SOLVE_SINCE = (0, 5, 23)
# With speculative decoding and no --max-running-requests, sglang sets 48 before sizing memory.
SPEC_DEFAULT_MAX_RUNNING = 48
# sglang 0.5.23's defaults by GPU memory in GiB (`arg_groups/memory_hook.py`,
# `_handle_gpu_memory_settings`): (below this many GiB, prefill chunk, decode graph limit at
# tp < 4, at tp >= 4); 16,384 and 512 above the last.
_GPU_DEFAULTS = (
    (20, 2048, 8, 8),
    (35, 4096, 48, 160),
    (60, 4096, 32, 160),
    (90, 8192, 256, 512),
    (160, 8192, 256, 512),
)
# How far from a bucket's edge the GPU's reported memory must be to trust the bucket.
_EDGE = 0.03
# Requests the request-to-token pool of a plain model holds at most.
MAX_REQ_POOL = 4096

NOT_ENOUGH_MEMORY = "not_enough_memory"


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", str(version))[:3])


def planner_for(version: str) -> str:
    """``"0.5.23"`` (joint solve) or ``"0.5.10"`` (reserve first), the planner a release uses."""
    return "0.5.23" if version_tuple(version) >= JOINT_SOLVE_SINCE else "0.5.10"


def mamba_slot_ratio(*, radix_cache: bool, strategy: str | None, overlap: bool) -> int:
    """State slots per running request: 1 without the radix cache, else 3 (+2 with extra_buffer
    and overlap scheduling, +1 with extra_buffer without overlap or extra_buffer_lazy)."""
    if not radix_cache:
        return 1
    ratio = 3
    if strategy == "extra_buffer":
        ratio += 2 if overlap else 1
    elif strategy == "extra_buffer_lazy":
        ratio += 1
    return ratio


@dataclass(frozen=True)
class PoolPlan:
    planner: str
    rest_bytes: float  # static pool left after weights and draft weights
    spec_reserve_bytes: float  # intermediate (speculative) state
    mamba_slots: int  # max_mamba_cache_size; 0 for plain models
    slot_ratio: int
    state_pool_bytes: float  # (slots + padding) x state bytes
    kv_pool_bytes: float
    kv_tokens: int
    max_running_requests: int
    failure: str | None = None  # a failure class when sglang would refuse to start
    reason: str = ""

    @property
    def fits(self) -> bool:
        return self.failure is None


def plan_pools(
    rest_bytes: float,
    *,
    kv_bytes_per_token: float,
    state_bytes_per_request: float = 0.0,
    draft_tokens: int = 0,
    max_running_requests: int | None = None,
    max_mamba_cache_size: int | None = None,
    mamba_full_memory_ratio: float = 0.9,
    slot_ratio: int = 3,
    radix_cache: bool = True,
    page_size: int = 1,
    max_total_tokens: int | None = None,
    version: str = "0.5.23",
) -> PoolPlan:
    """Size the state and KV pools from the bytes left after the weights.

    ``draft_tokens`` is 0 without speculative decoding. ``max_running_requests`` is the resolved
    flag (48 when speculating and unset: pass ``SPEC_DEFAULT_MAX_RUNNING``).
    """
    planner = planner_for(version)
    hybrid = state_bytes_per_request > 0
    spec = draft_tokens > 0
    per_req = float(state_bytes_per_request)
    reserve = 0.0
    slots = 0
    state_pool = 0.0
    rest = float(rest_bytes)

    def failed(reason: str) -> PoolPlan:
        return PoolPlan(
            planner, rest_bytes, reserve, slots, slot_ratio, state_pool, 0.0, 0, 0,
            NOT_ENOUGH_MEMORY, reason,
        )  # fmt: skip

    if rest <= 0:
        return failed("the weights leave no GPU memory for the KV cache")
    running_flag = max_running_requests
    if spec and running_flag is None:
        running_flag = SPEC_DEFAULT_MAX_RUNNING
    if hybrid:
        fixed_slots = max_mamba_cache_size
        if fixed_slots is None and not radix_cache and max_running_requests is not None:
            fixed_slots = max_running_requests
        if planner == "0.5.10":
            # model_runner_kv_cache_mixin.py (0.5.10) lines 185-238
            if spec:
                reserve = per_req * (running_flag or 0) * draft_tokens
                rest -= reserve
            if fixed_slots is not None:
                slots = fixed_slots
            else:
                budget = rest * mamba_full_memory_ratio / (1 + mamba_full_memory_ratio)
                slots = int(budget // per_req) if budget > 0 else 0
            state_pool = slots * per_req
        else:
            # kv_cache_configurator.py (0.5.23) lines 3229-3410, _handle_max_mamba_cache
            if fixed_slots is not None:
                slots = fixed_slots
                if spec:
                    capped = min(max(1, running_flag or 1), slots // slot_ratio)
                    if max_mamba_cache_size is None:  # sized from max_running_requests
                        capped = slots
                    reserve = per_req * (capped + 1) * draft_tokens
            else:
                budget = rest * mamba_full_memory_ratio / (1 + mamba_full_memory_ratio)
                if spec:
                    d = draft_tokens
                    slots = int((budget - per_req * (1 + d)) // (per_req * (1 + d / slot_ratio)))
                    capped = min(max(1, running_flag or 1), slots // slot_ratio)
                    reserve = per_req * (capped + 1) * d
                else:
                    slots = int((budget - per_req) // per_req)
            rest -= reserve
            if slots <= 0:
                return failed(
                    "Not enough GPU memory for hybrid (mamba/linear-attention) state cache"
                )
            # +1: the pool's padding slot
            state_pool = (slots + 1) * per_req
        rest -= state_pool
    kv_tokens = int(max(rest, 0.0) // kv_bytes_per_token) // page_size * page_size
    if max_total_tokens is not None:
        kv_tokens = min(kv_tokens, max_total_tokens // page_size * page_size)
    if kv_tokens <= 0:
        return failed("no KV cache would fit")
    if hybrid:
        running = slots // slot_ratio
        if max_running_requests is not None or spec:
            running = min(running, running_flag or running)
        if running < 1:
            return failed(
                "Hybrid (mamba/linear-attention) state cache is too small to serve any requests"
            )
    else:
        running = min(MAX_REQ_POOL, max(kv_tokens // 2, 1))
        if running_flag is not None:
            running = min(running, running_flag)
    return PoolPlan(
        planner, rest_bytes, reserve, slots, slot_ratio, state_pool, max(rest, 0.0), kv_tokens,
        running,
    )  # fmt: skip


def gpu_defaults(gpu_memory_gb: float, tp_size: int = 1) -> tuple[int, int]:
    """(chunked_prefill_size, decode CUDA-graph limit) sglang 0.5.23 picks when they are unset,
    by one GPU's memory in GB (1e9 bytes, as the tuner reads it; sglang compares MiB)."""
    gib = gpu_memory_gb * 1e9 / GIB
    for edge, chunk, small, large in _GPU_DEFAULTS:
        if gib < edge:
            return chunk, small if tp_size < 4 else large
    return 16384, 512


# Bytes a K or V element takes in sglang 0.5.23's KV pool by --kv-cache-dtype ("auto": the
# model's dtype): the dtype's element size (srt/mem_cache/kv_cache_dtype.py 49-90), mxfp8's
# block scales (one byte per 32 elements, srt/model_executor/pool_configurator.py 526-530),
# and the fp4 recipes' half byte plus one fp8 scale per 16 elements
# (srt/layers/quantization/fp4_kv_cache_quant_method.py, `compute_cell_size`: the linear
# scales only, so a lower bound where a backend keeps both layouts).
KV_ELEMENT_BYTES = {
    "fp8_e5m2": 1.0,
    "fp8_e4m3": 1.0,
    "mxfp8": 1.0 + 1 / 32,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "nvfp4": 0.5 + 1 / 16,
    "fp4_mx_block16": 0.5 + 1 / 16,
}


def kv_element_bytes(kv_cache_dtype: str | None, model_dtype_bytes: float) -> float:
    """Bytes of one K or V element in the KV pool under `--kv-cache-dtype` (None or "auto":
    the model's own, `model_dtype_bytes`)."""
    return KV_ELEMENT_BYTES.get(str(kv_cache_dtype or "auto"), float(model_dtype_bytes))


def default_graph_limit(gpu_memory_gb: float | None, tp_size: int) -> int | None:
    """sglang's decode graph limit when unset; None when the memory is unknown or too close to
    a bucket's edge to trust the bucket."""
    if gpu_memory_gb is None:
        return None
    gib = gpu_memory_gb * 1e9 / GIB
    if any(abs(gib - edge) <= _EDGE * edge for edge, *_ in _GPU_DEFAULTS):
        return None
    return gpu_defaults(gpu_memory_gb, tp_size)[1]
