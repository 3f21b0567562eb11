"""The start-up memory plan: weights, Mamba state pool, KV pool, activations, HiCache host pool.

A pure function of the resolved configuration, shared by the server (which prints it and serves
within it) and the oracle (which predicts from it). It follows sglang's sizing, per release
(docs/sglang-memory.md has the rules with the sglang file and line of each):

- the static pool is ``mem_fraction_static`` of the GPU; what is left of it after the weights
  (and the draft head) is the "rest" for state and KV pools;
- hybrid models, as 0.5.10 / 0.5.11: with speculative decoding an intermediate-state reserve of
  (state bytes per request) x max_running_requests x draft tokens comes off first
  (max_running_requests is 48 when unset); the remainder is split between recurrent-state slots
  and the KV pool by ``--mamba-full-memory-ratio`` (state : KV), unless
  ``--max-mamba-cache-size`` fixes the slot count;
- hybrid models, as 0.5.23: the slots and the reserve are solved jointly inside the state
  share, the reserve covering min(max_running_requests, slots // ratio) + 1 requests;
- ``max_running_requests`` <= slots // ratio (3, +2 with extra_buffer and overlap, +1 without
  overlap; 1 with the radix cache disabled);
- what is outside the static pool must hold the CUDA graphs and the activations, else sglang dies
  with a CUDA graph capture failure or a torch out-of-memory error.

    >>> from tuner.sim.args import parse_args
    >>> from tuner.sim.config import resolve
    >>> plan_memory(resolve(parse_args([]))).max_running_requests
    19
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from tuner.sim.args import version_tuple
from tuner.sim.config import SPEC_DEFAULT_MAX_RUNNING, SimConfig
from tuner.sim.failures import (
    cuda_graph_failed,
    cuda_oom,
    mamba_state_too_small,
    not_enough_memory,
    rule,
    state_cache_too_small,
    weights_leave_no_kv,
)

GIB = 1024**3
# sglang releases from this one size the Mamba pool and the speculative reserve jointly.
JOINT_SOLVE_SINCE = (0, 5, 23)
# Requests the non-hybrid request pool holds at most (sglang's req_to_token pool bound).
MAX_REQ_POOL = 4096
# Allocator workspace outside the pools that every forward pass needs (cuBLAS, attention).
WORKSPACE_GIB = 0.5


@dataclass(frozen=True)
class MemoryPlan:
    gpu_total_gib: float
    mem_fraction_static: float
    weight_gib: float
    draft_weight_gib: float
    runtime_overhead_gib: float
    rest_gib: float  # static pool left after weights, for state and KV pools
    spec_reserve_gib: float  # intermediate-state reserve taken before sizing the Mamba pool
    mamba_slots: int  # max_mamba_cache_size (0 for plain-attention models)
    mamba_slot_ratio: int  # slots per running request
    state_bytes_per_request: int
    conv_state_gib: float
    ssm_state_gib: float
    intermediate_ssm_gib: float
    intermediate_conv_gib: float
    kv_bytes_per_token: int
    max_total_num_tokens: int
    kv_k_gib: float
    kv_v_gib: float
    max_running_requests: int
    chunked_prefill_size: int
    max_prefill_tokens: int
    context_len: int
    max_req_input_len: int
    available_gpu_mem_gib: float  # free after pools and CUDA graphs, as sglang logs it
    cuda_graph_gib: float
    activation_gib: float
    hicache_host_tokens: int
    hicache_host_gib: float
    mamba_host_slots: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def capture_sizes(max_bs: int, speculative: bool, pool: int) -> tuple[int, ...]:
    """The decode batch sizes sglang captures CUDA graphs for (0.5.23
    ``arg_groups/cuda_graph_hook.py`` lines 500-531), clamped to the request pool
    (``model_executor/runner/base_cuda_graph_runner.py`` lines 92-102: a pool smaller than the
    largest size is captured itself). Empty when CUDA graphs are off."""
    if max_bs <= 0:
        return ()
    if speculative:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8)]
        sizes += list(range(272, max_bs + 1, 16))
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16)]
        sizes += list(range(512, max_bs + 1, 32))
    sizes = [b for b in sizes if b <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    pool = max(pool, 1)
    if max(sizes) > pool:
        sizes.append(pool)
    return tuple(sorted({b for b in sizes if b <= pool}))


def mamba_slot_ratio(config: SimConfig) -> int:
    """State slots each running request accounts for (the rest hold the prefix cache's states)."""
    if not config.radix_cache:
        return 1
    ratio = 3
    if config.mamba_strategy in ("extra_buffer", "extra_buffer_lazy"):
        ratio += 2 if config.overlap_schedule else 1
    return ratio


def _mamba_pool(
    config: SimConfig,
    rest_bytes: float,
    per_req: int,
    cap: int | None,
    draft_tokens: int,
    ratio: int,
) -> tuple[int, float, float]:
    """(state slots, speculative reserve bytes, state bytes kept out of the KV pool).

    sglang 0.5.10 / 0.5.11 (model_runner_kv_cache_mixin.py, handle_max_mamba_cache): the reserve
    for max_running_requests x draft tokens comes off first; the slots take their share of the
    rest and K x state bytes leave the KV pool. 0.5.23 (kv_cache_configurator.py,
    _handle_max_mamba_cache): K and the reserve are solved together inside the state share, the
    reserve is for min(max_running_requests, K // ratio) + 1 requests, and (K + 1) x state bytes
    (the padding slot included) leave the KV pool.
    """
    args = config.args
    spec = config.spec is not None
    share = args.mamba_full_memory_ratio / (1.0 + args.mamba_full_memory_ratio)
    fixed = args.max_mamba_cache_size
    if fixed is None and not config.radix_cache and args.max_running_requests is not None:
        fixed = args.max_running_requests
    if version_tuple(args.sglang_version) < JOINT_SOLVE_SINCE:
        reserve = per_req * (cap or 0) * draft_tokens if spec else 0.0
        avail = rest_bytes - reserve
        slots = fixed if fixed is not None else (int(avail * share // per_req) if avail > 0 else 0)
        if slots <= 0:
            raise not_enough_memory()
        return slots, reserve, slots * per_req
    reserve = 0.0
    if fixed is not None:
        slots = fixed
        if spec:
            capped = slots if args.max_mamba_cache_size is None else min(cap or 1, slots // ratio)
            reserve = per_req * (capped + 1) * draft_tokens
    else:
        budget = rest_bytes * share
        if spec:
            d = draft_tokens
            slots = int((budget - per_req * (1 + d)) // (per_req * (1 + d / ratio)))
            reserve = per_req * (min(cap or 1, max(slots, 0) // ratio) + 1) * d
        else:
            slots = int((budget - per_req) // per_req)
    if slots <= 0:
        raise mamba_state_too_small(slots, (rest_bytes - reserve) / GIB, per_req)
    return slots, reserve, (slots + 1) * per_req


def _graph_gib(config: SimConfig, max_running: int) -> float:
    """Decode CUDA-graph memory: buffers per batch size up to ``--cuda-graph-max-bs``, plus a
    fixed cost per captured graph (``effects.GraphMemory``). With speculation the draft and
    verify graphs add a quarter per draft step. Adaptive speculation captures a set of graphs
    per candidate step count (sglang's ``AdaptiveController.init_states``), each for the batch
    sizes whose tier can choose that count: the initial count's set as static speculation does,
    every other set with buffers up to the largest size it captures."""
    model, spec = config.model, config.spec
    graph_bs = config.cuda_graph_max_bs_decode
    if graph_bs <= 0:
        return 0.0
    fixed = model.effects.graph_memory.bytes_per_graph * model.effects.graph_memory.strength
    sizes = capture_sizes(graph_bs, spec is not None, max_running)

    def one_set(steps: int, buffer_bs: int, graphs: int) -> float:
        factor = 1.0 + 0.25 * steps if spec is not None and steps > 0 else 1.0
        per_graph = fixed * (2 if spec is not None and steps > 0 else 1)
        return buffer_bs * model.cuda_graph_bytes_per_bs * factor + per_graph * graphs

    if spec is None:
        return one_set(0, graph_bs, len(sizes)) / GIB
    if spec.adaptive is None:
        return one_set(spec.num_steps, graph_bs, len(sizes)) / GIB
    total = one_set(spec.num_steps, graph_bs, len(sizes))
    for steps in spec.adaptive.candidate_steps:
        reach = [b for b in sizes if steps in spec.adaptive.tier_for(b).candidate_steps]
        if reach and steps != spec.num_steps:
            total += one_set(steps, max(reach), len(reach))
    return total / GIB


def _page_floor(tokens: float, page: int) -> int:
    return int(tokens // page) * page


def plan_memory(config: SimConfig) -> MemoryPlan:
    """Size every pool for this configuration; raise StartupFailure as sglang would fail."""
    hw, model, args, spec = config.hardware, config.model, config.args, config.spec
    total = hw.gpu_memory_gib
    weights = model.weight_bytes / GIB
    draft = 0.0
    if spec is not None:
        if spec.uses_mtp_head and model.mtp is not None:
            draft = model.mtp.head_bytes / GIB
        elif spec.algorithm in ("EAGLE", "EAGLE3"):
            draft = (
                0.6 * model.hidden_size * model.hidden_size * 12 * 2 / GIB / config.tp_size + 0.5
            )
        elif spec.algorithm == "STANDALONE":
            draft = weights * 0.1
    static = config.mem_fraction_static * total
    rest = static - hw.runtime_overhead_gib - weights - draft
    if rest <= 0:
        if version_tuple(args.sglang_version) >= JOINT_SOLVE_SINCE:
            raise weights_leave_no_kv(config.mem_fraction_static, (total - weights - draft) / total)
        raise not_enough_memory()

    kv_per_token = model.kv_bytes_per_token(config.kv_dtype_bytes)
    if spec is not None and spec.uses_mtp_head and model.mtp is not None:
        # the MTP layer keeps its own KV in the same pool layout
        kv_per_token += int(
            model.mtp.layers * 2 * model.num_kv_heads * model.head_dim * config.kv_dtype_bytes
        )
    state = model.state_bytes_per_request(config.ssm_dtype_bytes) if model.hybrid else 0
    ssm_one = model.ssm_state_bytes(config.ssm_dtype_bytes) if model.hybrid else 0
    conv_one = model.conv_state_bytes() if model.hybrid else 0
    draft_tokens = spec.num_draft_tokens if spec is not None else 0
    explicit_cap = args.max_running_requests
    cap = explicit_cap
    if spec is not None and cap is None:
        cap = SPEC_DEFAULT_MAX_RUNNING

    reserve = 0.0
    slots = 0
    ratio = 1
    max_running = 0  # hybrid: from the state slots below; otherwise from the token pool
    state_gib = conv_gib = ssm_gib = 0.0
    if model.hybrid:
        ratio = mamba_slot_ratio(config)
        slots, reserve_bytes, kept_bytes = _mamba_pool(
            config, rest * GIB, state, cap, draft_tokens, ratio
        )
        reserve = reserve_bytes / GIB
        # the pool has one padding slot more than it hands out
        conv_gib = (slots + 1) * conv_one / GIB
        ssm_gib = (slots + 1) * ssm_one / GIB
        state_gib = conv_gib + ssm_gib
        kv_gib = rest - reserve - kept_bytes / GIB
        max_running = slots // ratio
        if cap is not None:
            max_running = min(max_running, cap)
        if max_running < 1:
            raise state_cache_too_small(slots, ratio, version_tuple(args.sglang_version))
    else:
        kv_gib = rest
    tokens = _page_floor(max(kv_gib, 0.0) * GIB / kv_per_token, config.page_size)
    if args.max_total_tokens is not None:
        tokens = min(tokens, _page_floor(args.max_total_tokens, config.page_size))
    if tokens <= 0:
        raise not_enough_memory()
    if not model.hybrid:
        max_running = min(MAX_REQ_POOL, max(tokens // 2, 1))
        if cap is not None:
            max_running = min(max_running, cap)

    inter_ssm = inter_conv = 0.0
    if model.hybrid and spec is not None:
        # The intermediate states are allocated for the widest draft the run may use: with
        # adaptive steps the largest candidate + 1 (sglang 0.5.23 srt/speculative/spec_info.py
        # resolve_max_speculative_num_draft_tokens, passed to the pool at
        # srt/mem_cache/kv_cache_configurator.py:1718-1734), while the Mamba budget above
        # reserves for the starting draft only (kv_cache_configurator.py:3361-3376): the excess
        # comes out of the memory outside the pools.
        widest = draft_tokens
        if spec.adaptive is not None:
            widest = max(draft_tokens, max(spec.adaptive.candidate_steps) + 1)
        inter_ssm = (max_running + 1) * widest * ssm_one / GIB
        inter_conv = (max_running + 1) * widest * conv_one / GIB
    kv_used_gib = tokens * kv_per_token / GIB

    # Outside the pools: CUDA graphs are captured first, then the first prefill needs activations.
    pools = weights + draft + kv_used_gib + state_gib + inter_ssm + inter_conv
    free = total - hw.runtime_overhead_gib - pools
    graph_bs = config.cuda_graph_max_bs_decode
    graph_gib = _graph_gib(config, max_running)
    graph_gib += config.cuda_graph_max_bs_prefill * model.cuda_graph_bytes_per_bs * 4 / GIB
    chunk = (
        config.chunked_prefill_size
        if config.chunked_prefill_size > 0
        else (config.max_prefill_tokens)
    )
    logits = max_running * max(draft_tokens, 1) * model.vocab_size * 4
    act_gib = (chunk * model.activation_bytes_per_token + logits) / GIB
    if graph_bs and free < WORKSPACE_GIB + graph_gib:
        raise cuda_graph_failed(graph_gib / 4, total, free - WORKSPACE_GIB)
    if free < WORKSPACE_GIB + graph_gib + act_gib:
        raise cuda_oom(act_gib, total, free - WORKSPACE_GIB - graph_gib)

    host_tokens = 0
    host_gib = 0.0
    host_slots = 0
    if config.hicache:
        # mem_cache/memory_pool_host.py (0.5.10 lines 173-185): --hicache-size is in GB (1e9
        # bytes); 0.5.10 then rounds the host pool up to whole pages plus one and asserts it is
        # larger than the device pool, so only a ratio below 1 fails there.
        old_host = version_tuple(args.sglang_version) < JOINT_SOLVE_SINCE
        if args.hicache_size > 0:
            host_tokens = int(args.hicache_size * 1e9 // kv_per_token)
        else:
            host_tokens = int(tokens * args.hicache_ratio)
        if old_host:
            host_tokens = (host_tokens // config.page_size + 1) * config.page_size
        else:
            host_tokens = _page_floor(host_tokens, config.page_size)
        if model.hybrid:
            host_slots = int(
                slots
                * (args.hicache_ratio if args.hicache_size == 0 else host_tokens / max(tokens, 1))
            )
        host_gib = (host_tokens * kv_per_token + host_slots * state) / GIB
        if host_tokens <= tokens and old_host:
            raise rule(
                "The host memory should be larger than the device memory with the current "
                f"protocol: host pool {host_tokens} tokens <= device pool {tokens} tokens",
                "AssertionError",
            )
        if host_gib * GIB > config.host_ram_gib * GIB:
            raise rule(
                f"Not enough host memory available. Requesting {host_gib * GIB / 1e9:.2f} GB but "
                f"only have {config.host_ram_gib * GIB / 1e9:.2f} GB free. Please reduce the "
                "size of the hierarchical cache."
            )

    context = config.context_length
    return MemoryPlan(
        gpu_total_gib=total,
        mem_fraction_static=config.mem_fraction_static,
        weight_gib=weights,
        draft_weight_gib=draft,
        runtime_overhead_gib=hw.runtime_overhead_gib,
        rest_gib=rest,
        spec_reserve_gib=reserve,
        mamba_slots=slots,
        mamba_slot_ratio=ratio,
        state_bytes_per_request=state,
        conv_state_gib=conv_gib,
        ssm_state_gib=ssm_gib,
        intermediate_ssm_gib=inter_ssm,
        intermediate_conv_gib=inter_conv,
        kv_bytes_per_token=kv_per_token,
        max_total_num_tokens=tokens,
        kv_k_gib=kv_used_gib / 2,
        kv_v_gib=kv_used_gib / 2,
        max_running_requests=max_running,
        chunked_prefill_size=config.chunked_prefill_size,
        max_prefill_tokens=config.max_prefill_tokens,
        context_len=context,
        max_req_input_len=min(context - 1, tokens - 1),
        available_gpu_mem_gib=free - graph_gib,
        cuda_graph_gib=graph_gib,
        activation_gib=act_gib,
        hicache_host_tokens=host_tokens,
        hicache_host_gib=host_gib,
        mamba_host_slots=host_slots,
    )
