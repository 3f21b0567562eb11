"""The effects of real sglang the performance model can switch on, each a profile field.

A hardware profile's ``effects:`` mapping holds the GPU's (``HardwareEffects``), a model
profile's ``effects:`` the model's (``ModelEffects``). Every effect has a ``strength``: 1 is the
calibrated effect, 0 switches it off (the simulator then computes what it computed before the
effect existed), values in between or above scale it. A world for the quality benchmark is a
profile with other strengths: ``profiles.load_overrides`` reads them from a YAML file
(``--sim-profile-overrides FILE``, docs/sim-effects.md).

Each default names the public figure it is calibrated to (docs/reality.md has the table);
where no public figure exists, the default is chosen to leave the seed's figures unchanged and
says so.

    >>> HardwareEffects().graph_padding.strength
    1.0
    >>> off = AcceptanceShape(strength=0.0)
    >>> off.effective_decay, off.effective_spread
    (1.0, 0.0)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np


class EffectError(ValueError):
    """An ``effects:`` mapping with an unknown key or a value out of range."""


def _scaled(value: float, strength: float, off: float) -> float:
    """``value`` moved from its ``off`` value by ``strength`` (1: value, 0: off)."""
    return off + (value - off) * strength


@dataclass(frozen=True)
class GraphPadding:
    """A decode (or verify) batch runs in the CUDA graph of the next captured batch size, and
    its padded rows cost GEMM work and per-row overhead as real ones do.

    Captured sizes: sglang 0.5.23 ``arg_groups/cuda_graph_hook.py`` lines 500-531 (without
    speculation 1, 2, 4, 8, 12, then steps of 8 to 256, 16 to 512, 32 beyond; with speculation
    1-8, steps of 2 to 32, 4 to 64, 8 to 256, 16 beyond; the largest is always captured), clamped
    to the request pool (``model_executor/runner/base_cuda_graph_runner.py`` lines 77-102). A
    verify graph holds batch x draft tokens. ``strength``: share of the padded rows' cost.
    """

    strength: float = 1.0


@dataclass(frozen=True)
class GemmEfficiency:
    """Dense GEMMs reach their large-shape efficiency only with enough rows: the share is
    n / (n + half_tokens) for n tokens in the forward (a decode step of 1 request: 1 row).

    half_tokens 16 keeps the seed's decode figures (memory-bound below ~64 rows) and gives
    Qwen3-8B at 4 clients on an H100 7.4 ms per output token against GPUStack's 7.19 ms
    (docs/reality.md). ``strength`` scales half_tokens (0: every shape at full efficiency).
    """

    half_tokens: float = 16.0
    strength: float = 1.0

    def share(self, tokens: float) -> float:
        half = self.half_tokens * self.strength
        if half <= 0 or tokens <= 0:
            return 1.0
        return tokens / (tokens + half)


@dataclass(frozen=True)
class KernelEfficiency:
    """Bandwidth a kernel reading per-request memory reaches, as a multiple of the weights'
    streaming bandwidth (``hbm_efficiency``): paged attention over the KV cache, the
    recurrent-state update kernels.

    KV 1.2 (0.96 of peak at the profiles' 0.8): the one public figure that depends on it,
    Llama-3.1-8B on an H100 at random 4096 / 2048 with 500 prompts (sglang's CI floor of 3,800
    output tok/s, ``test/srt/test_bench_serving.py``), comes out at 3,851 with it and at 3,570
    with the weights' bandwidth (docs/reality.md); the seed's short contexts barely read KV.
    State 0.85: no public figure isolates it; the seed's 4-request MTP total holds with it.
    ``strength`` 0: everything reads at the weights' bandwidth.
    """

    efficiency: float = 1.2
    strength: float = 1.0

    @property
    def effective(self) -> float:
        return max(1e-3, _scaled(self.efficiency, self.strength, 1.0))


def _state_kernel() -> KernelEfficiency:
    return KernelEfficiency(efficiency=0.85)


def _kv_quantized() -> KernelEfficiency:
    """The KV reads of a pool stored below the model's dtype (``--kv-cache-dtype fp8_e4m3``),
    as a multiple of the same kernel's bandwidth at the model's dtype: they read fewer bytes
    but dequantize them. 0.93: vLLM's FP8 KV-cache study (vllm.ai blog "The State of FP8
    KV-Cache and Attention Quantization in vLLM") puts Llama-3.1-8B's per-KV-token decode cost
    at 54% of bf16's in the best case, half the bytes at 0.5 / 0.54 of the rate."""
    return KernelEfficiency(efficiency=0.93)


@dataclass(frozen=True)
class SchedulerCpu:
    """CPU time of the scheduler per round (batch building, sampling bookkeeping), and how much
    of it shows: with overlap scheduling it runs behind the GPU's forward except a bubble
    share; without overlap all of it shows (the profile's ``no_overlap_overhead_ms`` stays the
    measured extra of that mode). A prefill round breaks the overlap: its CPU time all shows.

    round_ms 0.4 + 0.01 per request, bubble 0.15: no public figure isolates them; chosen small
    enough that the seed's figures hold (they move by under 1%). ``strength`` scales them.
    """

    round_ms: float = 0.4
    per_request_ms: float = 0.01
    overlap_bubble: float = 0.15
    strength: float = 1.0

    def exposed_s(self, requests: int, overlap: bool, prefill: bool) -> float:
        cpu = (self.round_ms + self.per_request_ms * requests) / 1000.0 * self.strength
        return cpu if (prefill or not overlap) else cpu * self.overlap_bubble


@dataclass(frozen=True)
class HicacheTransfer:
    """Host <-> device transfer efficiency of HiCache by I/O backend and page size.

    ``kernel``: a gather kernel moves any page size at ``kernel_efficiency`` of PCIe; ``direct``:
    one copy per page, so small pages waste the link: page / (page + direct_half_tokens) of it.
    The ratios follow sglang's own choice of ``kernel`` as the default backend
    (``--hicache-io-backend``); no public figure gives the curve, so half_tokens 16 is a choice.
    ``strength`` 0: both backends at the old fixed factors (kernel 1.0, direct 1 / 1.25).
    """

    kernel_efficiency: float = 1.0
    direct_half_tokens: float = 16.0
    strength: float = 1.0

    def slowdown(self, backend: str, page_size: int) -> float:
        """Factor on the PCIe time of a transfer (1: at the profile's PCIe bandwidth)."""
        old = 1.0 if backend == "kernel" else 1.25
        if backend == "kernel":
            new = 1.0 / max(self.kernel_efficiency, 1e-3)
        else:
            page = max(page_size, 1)
            new = (page + self.direct_half_tokens) / page
        return _scaled(new, self.strength, old)


@dataclass(frozen=True)
class AllReduce:
    """With tensor parallelism (``--tp-size`` N > 1) each layer ends its attention and its MLP
    with an all-reduce of the forward's activations (tokens x hidden x 2 bytes) over the N GPUs:
    ``latency_us`` + the bytes up to ``switch_mb`` at ``small_gb_s`` + the ring's 2 (N - 1) / N
    of the rest at ``large_gb_s``.

    Defaults: sglang's custom all-reduce on H100 as sglang PR #2904 measured it (tp 2 / 4 / 8,
    without CUDA graphs): 3.7-5.9 us at 512 bytes and 19.9-33.8 us at 1 MB, which latency 4.5 us
    and 45 GB/s give within 30% (4.5 us and 27.8 us). Past 1 MB sglang hands the reduce to NCCL;
    no figure in docs/reality.md gives its rate, so ``large_gb_s`` is NVLink 4's 450 GB/s a
    direction at 0.8, a choice. ``strength`` scales the time (0: free communication; one GPU
    never communicates).
    """

    latency_us: float = 4.5
    small_gb_s: float = 45.0
    switch_mb: float = 1.0
    large_gb_s: float = 360.0
    strength: float = 1.0

    def seconds(self, nbytes: float, tp: int) -> float:
        """One all-reduce of ``nbytes`` over ``tp`` GPUs."""
        if tp <= 1 or not self.strength:
            return 0.0
        switch = self.switch_mb * 1e6
        small = min(nbytes, switch) / (max(self.small_gb_s, 1e-3) * 1e9)
        ring = 2 * (tp - 1) / tp
        large = max(nbytes - switch, 0.0) * ring / (max(self.large_gb_s, 1e-3) * 1e9)
        return (self.latency_us * 1e-6 + small + large) * self.strength


@dataclass(frozen=True)
class HardwareEffects:
    graph_padding: GraphPadding = field(default_factory=GraphPadding)
    gemm_efficiency: GemmEfficiency = field(default_factory=GemmEfficiency)
    kv_kernel: KernelEfficiency = field(default_factory=KernelEfficiency)
    state_kernel: KernelEfficiency = field(default_factory=_state_kernel)
    kv_quantized: KernelEfficiency = field(default_factory=_kv_quantized)
    scheduler_cpu: SchedulerCpu = field(default_factory=SchedulerCpu)
    hicache_transfer: HicacheTransfer = field(default_factory=HicacheTransfer)
    allreduce: AllReduce = field(default_factory=AllReduce)


@dataclass(frozen=True)
class AcceptanceShape:
    """Acceptance by draft position, with a per-request spread (the text matters).

    Draft j of request r is accepted, given drafts 1..j-1 were, with probability
    a_r x position_decay^(j-1), where logit(a_r) = logit(a_1) + spread x z_r and z_r ~ N(0, 1)
    is drawn once per request. a_1 is solved so that the mean accept length at
    ``reference_steps`` equals that of the profile's flat per-token ``acceptance`` (so the seed's
    calibrated MTP figures at 3 steps hold whatever the shape). Fitted to public accept lengths
    (steps 1 / 3 / 7, topk 1): EAGLE 2.00 / 3.88 / 6.25 (sglang PR #21599): decay 0.96, no
    spread; GLM-4.7 MTP 1.85 / 3.04 / 4.52 (sglang PR #23336): no decay, spread 0.25.
    ``strength`` 0: the flat chain (decay 1, spread 0).
    """

    position_decay: float = 1.0
    spread: float = 0.25
    reference_steps: int = 3
    strength: float = 1.0

    @property
    def effective_decay(self) -> float:
        return float(min(1.0, max(1e-6, self.position_decay**self.strength)))

    @property
    def effective_spread(self) -> float:
        return max(0.0, self.spread * self.strength)

    @property
    def flat(self) -> bool:
        return self.effective_decay == 1.0 and self.effective_spread == 0.0


@dataclass(frozen=True)
class GraphMemory:
    """Memory of each captured CUDA graph beyond the per-batch-size buffers (its private pool,
    the captured kernels' workspaces), counted per captured batch size.

    No public figure gives it per graph; 0.5 MB x 35 graphs is 17 MB at the seed's 256 (a few
    percent of its graph memory), which moves no seed figure. ``strength`` scales it.
    """

    bytes_per_graph: float = 0.5e6
    strength: float = 1.0


@dataclass(frozen=True)
class ExpertRouting:
    """A mixture-of-experts forward reads the weights of every expert one of its tokens is
    routed to, not of ``experts_per_token`` experts: one decode token reads k of E experts per
    layer, a batch of n tokens the union of theirs. With expert i chosen by a token with
    probability q_i = min(1, k x p_i), n independent tokens touch sum_i 1 - (1 - q_i)^n experts
    per layer in expectation (the coupon collector's count; at n = 1 it is k when p is uniform).

    ``skew``: expert popularity p_i proportional to (i + 1)^-skew (0: uniform routing, every
    expert as likely; a router trained with a load-balancing loss is near it, a skewed one
    touches fewer experts at the same batch). No public per-expert load curve is in
    docs/reality.md, so the default is uniform. ``strength`` 0: every forward reads exactly k
    experts per layer (the model before this effect).
    """

    skew: float = 0.0
    strength: float = 1.0

    def touched(self, experts: int, per_token: int, tokens: float) -> float:
        """Expected distinct experts a forward of ``tokens`` tokens reads, per MoE layer."""
        return _touched(self, experts, per_token, round(tokens))


@functools.lru_cache(maxsize=8192)
def _touched(routing: ExpertRouting, experts: int, per_token: int, tokens: int) -> float:
    if experts <= 0 or tokens <= 1:
        return float(min(per_token, experts))
    popularity = np.arange(1, experts + 1, dtype=float) ** -routing.skew
    chosen = np.minimum(1.0, per_token * popularity / popularity.sum())
    union = float(np.sum(1.0 - (1.0 - chosen) ** tokens))
    return _scaled(union, routing.strength, float(per_token))


@dataclass(frozen=True)
class ModelEffects:
    acceptance: AcceptanceShape = field(default_factory=AcceptanceShape)
    graph_memory: GraphMemory = field(default_factory=GraphMemory)
    expert_routing: ExpertRouting = field(default_factory=ExpertRouting)


_NESTED: dict[type, dict[str, type]] = {
    HardwareEffects: {
        "graph_padding": GraphPadding,
        "gemm_efficiency": GemmEfficiency,
        "kv_kernel": KernelEfficiency,
        "state_kernel": KernelEfficiency,
        "kv_quantized": KernelEfficiency,
        "scheduler_cpu": SchedulerCpu,
        "hicache_transfer": HicacheTransfer,
        "allreduce": AllReduce,
    },
    ModelEffects: {
        "acceptance": AcceptanceShape,
        "graph_memory": GraphMemory,
        "expert_routing": ExpertRouting,
    },
}


def build_effects(cls: type, data: Any, source: str) -> Any:
    """``HardwareEffects`` / ``ModelEffects`` from a profile's ``effects:`` mapping; missing
    effects and keys keep their defaults."""
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise EffectError(f"{source}: effects must be a mapping")
    nested = _NESTED[cls]
    unknown = sorted(set(data) - set(nested))
    if unknown:
        raise EffectError(f"{source}: unknown effects {unknown}; allowed: {sorted(nested)}")
    base = cls()
    built: dict[str, Any] = {}
    for name, kind in nested.items():
        values = data.get(name) or {}
        if not isinstance(values, dict):
            raise EffectError(f"{source}: effects.{name} must be a mapping")
        allowed = {f.name: f for f in fields(kind)}
        bad = sorted(set(values) - set(allowed))
        if bad:
            raise EffectError(
                f"{source}: effects.{name}: unknown keys {bad}; allowed: {sorted(allowed)}"
            )
        current = getattr(base, name)
        kwargs = {f: getattr(current, f) for f in allowed}
        for key, value in values.items():
            try:
                number = float(value)
            except (TypeError, ValueError) as exc:
                raise EffectError(f"{source}: effects.{name}.{key}: not a number") from exc
            if number < 0 or math.isnan(number):
                raise EffectError(f"{source}: effects.{name}.{key} must be >= 0, got {value}")
            kwargs[key] = int(number) if key == "reference_steps" else number
        built[name] = kind(**kwargs)
    return cls(**built)


# --------------------------------------------------------------- acceptance arithmetic
_Z, _W = np.polynomial.hermite_e.hermegauss(21)
_W = _W / _W.sum()


def _sigmoid(x: np.ndarray | float) -> Any:
    return 1.0 / (1.0 + np.exp(-x))


def _logit(p: float) -> float:
    p = min(max(p, 1e-9), 1 - 1e-9)
    return math.log(p / (1 - p))


def chain_accept_length(first: float, decay: float, spread: float, depth: int) -> float:
    """Mean tokens per verify step of a depth-``depth`` chain (bonus token included)."""
    k = np.arange(1, depth + 1)
    base = _sigmoid(_logit(first) + spread * _Z) if spread > 0 else np.array([first])
    weights = _W if spread > 0 else np.array([1.0])
    per_position = np.minimum(1.0, base[:, None] * decay ** (k - 1)[None, :])
    survive = np.cumprod(per_position, axis=1)
    return float(1.0 + (survive.sum(axis=1) * weights).sum())


def anchored_first(flat: float, shape: AcceptanceShape) -> float:
    """a_1 of ``shape`` whose accept length at its reference steps is the flat chain's."""
    if shape.flat:
        return flat
    depth = max(1, shape.reference_steps)
    target = chain_accept_length(flat, 1.0, 0.0, depth)
    decay, spread = shape.effective_decay, shape.effective_spread
    lo, hi = 1e-6, 1.0 - 1e-9
    for _ in range(60):
        mid = (lo + hi) / 2
        if chain_accept_length(mid, decay, spread, depth) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def request_pmf(first: float, decay: float, spread: float, z: float, depth: int) -> np.ndarray:
    """P(one verify step of a request with spread draw ``z`` yields i + 1 tokens)."""
    a = float(_sigmoid(_logit(first) + spread * z)) if spread > 0 else first
    per_position = np.minimum(1.0, a * decay ** np.arange(depth))
    survive = np.concatenate(([1.0], np.cumprod(per_position)))
    pmf = survive[:-1] * (1.0 - per_position)
    return np.append(pmf, survive[-1])
