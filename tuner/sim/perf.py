"""The performance model: how long one forward pass takes on the modelled GPU (modelled seconds).

- Decode steps are memory-bound: every step streams the weights, each running request's
  recurrent state (read and written) and its KV cache over HBM; compute matters only at large
  batches. ``max(memory, compute) + 0.3 x min(...)`` stands for partial overlap of the two.
- Prefill (chunked) is compute-bound: 2 x active parameters FLOPs per token plus attention over
  the prefix.
- Speculative decoding: each iteration runs the draft head ``num_steps + 1`` times (draft steps
  and the extend over accepted tokens) and verifies ``num_draft_tokens`` per request in one
  target forward; a chain of drafts is accepted token by token with probability ``acceptance``.
- HiCache: prefix hits found in host memory are loaded over PCIe before their prefill; writes to
  host share PCIe and slow the forward passes a little, by write policy.
- Effects of real sglang (``tuner.sim.effects``, each with a strength in the profiles): CUDA-graph
  padding to the captured batch sizes, GEMM efficiency by shape, KV and state kernel
  efficiency, the scheduler's CPU time per round, HiCache transfer efficiency by I/O backend and
  page size, acceptance by draft position with a per-request spread. At strength 0 each
  computes what the model computed without it.

Pure functions of the configuration, so the scheduler and the oracle agree by construction.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from tuner.sim.config import SimConfig
from tuner.sim.effects import (
    AllReduce,
    ExpertRouting,
    GemmEfficiency,
    HicacheTransfer,
    SchedulerCpu,
    anchored_first,
    request_pmf,
)
from tuner.sim.memory import MemoryPlan, capture_sizes

# Fraction of the smaller of memory / compute time that does not overlap with the larger.
OVERLAP_RESIDUE = 0.3
# Acceptance of drafts that do not come from the model's own MTP head.
DRAFT_MODEL_ACCEPTANCE = {"EAGLE": 0.75, "EAGLE3": 0.78, "STANDALONE": 0.7, "NGRAM": 0.35}
# Share of a host->device load that is not hidden behind the layer-by-layer prefill.
HICACHE_LOAD_EXPOSED = 0.7
# Share of host writes' PCIe time that slows the forward passes (separate CUDA stream).
HICACHE_WRITE_EXPOSED = {"write_through": 0.15, "write_back": 0.1, "write_through_selective": 0.1}
MEM_LAYOUT_FACTOR = {
    "layer_first": 1.1,
    "page_first": 1.0,
    "page_first_direct": 0.95,
    "page_head": 1.0,
}


@dataclass(frozen=True)
class PerfModel:
    """Per-configuration constants, precomputed once; methods return modelled seconds."""

    bandwidth: float
    flops: float
    decode_weight_bytes: float
    flops_per_token: float
    attn_flops_coeff: float  # FLOPs per (query token x context token)
    kv_bytes_per_token: float
    state_rw_bytes: float  # recurrent state read + written per request per forward
    intermediate_bytes_per_token: float  # speculative intermediate state written per draft token
    graph_overhead: float
    eager_overhead: float
    graph_max_bs: int
    per_request: float
    spec_per_request: float  # speculative bookkeeping per request per iteration
    sched_overhead: float
    spec_steps: int
    spec_topk: int
    spec_draft_tokens: int
    spec_acceptance: float
    draft_step_bytes: float
    draft_flops_per_token: float
    pcie: float
    hicache_load_factor: float
    hicache_write_exposed: float
    prefix_state_bytes: float  # recurrent state loaded with a host prefix hit
    # effects (tuner.sim.effects): all off gives the model without them
    capture_bs: tuple[int, ...]  # CUDA-graph batch sizes captured (empty: no graphs)
    padding_strength: float
    gemm: GemmEfficiency
    kv_efficiency: float  # share of the weights' bandwidth the KV reads reach
    state_efficiency: float  # and the recurrent-state reads
    scheduler_cpu: SchedulerCpu
    overlap: bool
    hicache_transfer: HicacheTransfer
    hicache_io_backend: str
    page_size: int
    accept_first: float  # acceptance of the first draft position (anchored, see effects)
    accept_decay: float
    accept_spread: float
    # mixture of experts (0 experts: a dense model): a forward reads the experts its tokens touch
    experts: int = 0
    experts_per_token: int = 0
    expert_bytes: float = 0.0
    routing: ExpertRouting = field(default_factory=ExpertRouting)
    # tensor parallelism: every layer's attention and MLP end in an all-reduce of the forward's
    # activations over the tp GPUs (one GPU: none)
    tp: int = 1
    allreduce_bytes_per_token: float = 0.0  # hidden x 2 bytes
    allreduces_per_forward: int = 0  # 2 per layer
    allreduce: AllReduce = field(default_factory=AllReduce)

    def communication(self, tokens: float, allreduces: int | None = None) -> float:
        """The all-reduces of a forward of ``tokens`` tokens (``allreduces``: the model's)."""
        if self.tp <= 1:
            return 0.0
        count = self.allreduces_per_forward if allreduces is None else allreduces
        return count * self.allreduce.seconds(tokens * self.allreduce_bytes_per_token, self.tp)

    @property
    def speculative(self) -> bool:
        return self.spec_draft_tokens > 0

    def weights_read(self, tokens: float) -> float:
        """Weight bytes a forward of ``tokens`` tokens streams: all of a dense model's; of a
        mixture of experts, the experts its tokens are routed to (ExpertRouting) instead of the
        ``experts_per_token`` that decode_weight_bytes counts."""
        if not self.experts:
            return self.decode_weight_bytes
        touched = self.routing.touched(self.experts, self.experts_per_token, tokens)
        return self.decode_weight_bytes + (touched - self.experts_per_token) * self.expert_bytes

    def padded(self, batch: int) -> float:
        """Rows a batch of ``batch`` requests costs in the GEMMs: padded to the next captured
        CUDA-graph size (by the padding strength); eager batches are not padded."""
        if not self.capture_bs or not 0 < batch <= self.graph_max_bs or not self.padding_strength:
            return float(batch)
        i = bisect.bisect_left(self.capture_bs, batch)
        size = self.capture_bs[i] if i < len(self.capture_bs) else batch
        return batch + (size - batch) * self.padding_strength

    def _token_flops(self, rows: float, flops_per_row: float) -> float:
        """Dense FLOPs of ``rows`` rows, inflated where the shape keeps GEMMs inefficient."""
        return rows * flops_per_row / self.gemm.share(rows)

    def _forward(
        self,
        tokens: int,
        requests: int,
        bytes_read: float,
        flops: float,
        prefill: bool = False,
        ideal_flops: float | None = None,
    ) -> float:
        """``flops``: as the kernels run them (padding, shape); ``ideal_flops``: the work
        itself, which is what overlaps with the memory traffic (default: ``flops``)."""
        mem = bytes_read / self.bandwidth
        comp = flops / self.flops
        ideal = comp if ideal_flops is None else ideal_flops / self.flops
        graph = 0 < requests <= self.graph_max_bs
        fixed = self.graph_overhead if graph else self.eager_overhead
        return (
            max(mem, comp)
            + OVERLAP_RESIDUE * min(mem, ideal)
            + self.communication(tokens)
            + fixed
            + requests * self.per_request
            + self.sched_overhead
            + self.scheduler_cpu.exposed_s(requests, self.overlap, prefill)
        )

    def _per_request_bytes(self, batch: int, context_tokens: int) -> float:
        """State and KV bytes a decode forward reads, at the bandwidth their kernels reach."""
        return (
            batch * self.state_rw_bytes / self.state_efficiency
            + context_tokens * self.kv_bytes_per_token / self.kv_efficiency
        )

    def decode_step(self, batch: int, context_tokens: int) -> float:
        """One plain decode step for ``batch`` requests holding ``context_tokens`` in total."""
        bytes_read = (
            self.weights_read(batch)
            + batch * self.state_rw_bytes / self.state_efficiency
            + context_tokens * self.kv_bytes_per_token / self.kv_efficiency
        )
        attn = self.attn_flops_coeff * context_tokens
        flops = self._token_flops(self.padded(batch), self.flops_per_token) + attn
        ideal = batch * self.flops_per_token + attn
        return self._forward(batch, batch, bytes_read, flops, ideal_flops=ideal)

    def spec_iteration(self, batch: int, context_tokens: int, steps: int | None = None) -> float:
        """Draft + verify for ``batch`` requests: one speculative decoding iteration
        (``steps``: draft steps of a chain, for adaptive speculation; the configured ones else)."""
        if steps is None:
            n_steps, d = self.spec_steps, self.spec_draft_tokens
        else:
            n_steps, d = steps, steps + 1
        verify_bytes = (
            self.weights_read(batch * d)
            + batch * self.state_rw_bytes / self.state_efficiency
            + batch * d * self.intermediate_bytes_per_token / self.state_efficiency
            + context_tokens * self.kv_bytes_per_token / self.kv_efficiency
        )
        rows = self.padded(batch)
        attn = self.attn_flops_coeff * context_tokens * d
        verify_flops = self._token_flops(rows * d, self.flops_per_token) + attn
        ideal = batch * d * self.flops_per_token + attn
        verify = self._forward(batch * d, batch, verify_bytes, verify_flops, ideal_flops=ideal)
        draft_one = (
            self.draft_step_bytes / self.bandwidth
            + self._token_flops(rows * self.spec_topk, self.draft_flops_per_token) / self.flops
            + self.communication(rows * self.spec_topk, 2)  # one draft layer
            + self.graph_overhead * 0.5
        )
        return verify + (n_steps + 1) * draft_one + batch * self.spec_per_request

    def mixed_decode_extra(self, batch: int, context_tokens: int) -> float:
        """What ``batch`` decoding requests add to a prefill batch they ride in (mixed chunk):
        their KV and state traffic and their FLOPs; the weights are read once anyway."""
        bytes_read = self._per_request_bytes(batch, context_tokens)
        flops = batch * self.flops_per_token + self.attn_flops_coeff * context_tokens
        return bytes_read / self.bandwidth + flops / self.flops + batch * self.per_request

    def step(self, batch: int, context_tokens: int, steps: int | None = None) -> float:
        """One decode round's step: a speculative iteration (of ``steps`` draft steps when
        adaptive speculation chose them; 0 is a plain step) or a plain decode step."""
        if steps == 0 or not self.speculative:
            return self.decode_step(batch, context_tokens)
        return self.spec_iteration(batch, context_tokens, steps)

    def prefill(
        self,
        new_tokens: int,
        requests: int,
        attn_pairs: float,
        host_loaded_tokens: int = 0,
        host_written_tokens: int = 0,
        host_loaded_states: int = 0,
    ) -> float:
        """A prefill forward of ``new_tokens`` over ``requests`` requests.

        ``attn_pairs``: sum over requests of (new x prefix + new^2 / 2), the attention work.
        """
        bytes_read = (
            self.weights_read(new_tokens)
            + new_tokens * self.kv_bytes_per_token
            + requests * self.state_rw_bytes
        )
        flops = (
            self._token_flops(new_tokens, self.flops_per_token) + self.attn_flops_coeff * attn_pairs
        )
        if self.speculative:
            flops += self._token_flops(new_tokens, self.draft_flops_per_token)
            bytes_read += self.draft_step_bytes
        t = self._forward(new_tokens, 0, bytes_read, flops, prefill=True)
        t += requests * self.per_request
        return t + self.hicache_cost(host_loaded_tokens, host_written_tokens, host_loaded_states)

    def hicache_cost(
        self, loaded_tokens: int, written_tokens: int, loaded_states: int = 0
    ) -> float:
        load = (
            (loaded_tokens * self.kv_bytes_per_token + loaded_states * self.prefix_state_bytes)
            / self.pcie
            * self.hicache_load_factor
        )
        write = written_tokens * self.kv_bytes_per_token / self.pcie * self.hicache_write_exposed
        if write:
            # the write path moves pages through the same backend as the loads
            old = 1.0 if self.hicache_io_backend == "kernel" else 1.25
            write *= self.hicache_transfer.slowdown(self.hicache_io_backend, self.page_size) / old
        return HICACHE_LOAD_EXPOSED * load + write

    def depth(self, steps: int | None = None) -> int:
        """Drafts a verify step can accept (a chain of ``steps``; the configured tree else)."""
        if steps is not None:
            return steps
        return min(self.spec_steps, self.spec_draft_tokens - 1) if self.speculative else 0

    def accept_pmf(self, steps: int | None = None) -> list[float]:
        """P(tokens produced by one iteration = i + 1), i = 0 .. accepted drafts, for a request
        of the median text (spread draw 0)."""
        if not self.speculative or steps == 0:
            return [1.0]
        depth = self.depth(steps)
        if self.accept_decay == 1.0 and self.accept_spread == 0.0:
            alpha = self.spec_acceptance
            pmf = [alpha**j * (1.0 - alpha) for j in range(depth)]
            pmf.append(alpha**depth)
            return pmf
        return request_pmf(self.accept_first, self.accept_decay, 0.0, 0.0, depth).tolist()

    def request_pmf(self, z: float, steps: int | None = None) -> np.ndarray:
        """The accept-length pmf of a request whose text draws ``z`` (per-request spread)."""
        return request_pmf(
            self.accept_first, self.accept_decay, self.accept_spread, z, self.depth(steps)
        )


def effective_acceptance(config: SimConfig) -> float:
    """Per-token acceptance of the draft chain, widened by a tree when topk > 1."""
    spec = config.spec
    if spec is None:
        return 0.0
    if spec.uses_mtp_head and config.model.mtp is not None:
        alpha = config.model.mtp.acceptance
    else:
        fallback = DRAFT_MODEL_ACCEPTANCE.get(spec.algorithm, 0.7)
        alpha = config.model.draft_acceptance.get(spec.algorithm, fallback)
    if spec.topk > 1:
        branches = max(1.0, min(float(spec.topk), (spec.num_draft_tokens - 1) / spec.num_steps))
        alpha = 1.0 - (1.0 - alpha) ** branches
    return alpha


def build_perf_model(config: SimConfig, plan: MemoryPlan) -> PerfModel:
    hw, model, spec = config.hardware, config.model, config.spec
    layer_scale = model.num_layers / 64.0
    draft_step_bytes = 0.0
    draft_flops = 0.0
    if spec is not None:
        # one GPU's share of the LM head (vocabulary-parallel; `model` is already sharded)
        lm_head = model.vocab_size * model.hidden_size * model.dtype_bytes / config.tp_size
        if spec.uses_mtp_head and model.mtp is not None:
            draft_step_bytes = model.mtp.step_read_bytes
            draft_flops = (model.mtp.head_bytes + lm_head) / model.dtype_bytes * 2
        elif spec.algorithm != "NGRAM":  # NGRAM drafts from a token table: no draft forward
            draft_bytes = plan.draft_weight_gib * 1024**3
            draft_step_bytes = draft_bytes + lm_head
            draft_flops = draft_step_bytes / model.dtype_bytes * 2
    ssm_one = model.ssm_state_bytes(config.ssm_dtype_bytes) if model.hybrid else 0
    conv_one = model.conv_state_bytes() if model.hybrid else 0
    sched = 0.0 if config.overlap_schedule else hw.no_overlap_overhead_ms / 1000
    args = config.args
    fx = hw.effects
    shape = model.effects.acceptance
    alpha = effective_acceptance(config)
    graph_bs = config.cuda_graph_max_bs_decode
    capture = capture_sizes(graph_bs, spec is not None, plan.max_running_requests)
    return PerfModel(
        bandwidth=hw.effective_bandwidth,
        flops=hw.effective_flops,
        decode_weight_bytes=model.decode_weight_bytes,
        flops_per_token=model.flops_per_token,
        attn_flops_coeff=model.attention_flops_per_token(1.0),
        kv_bytes_per_token=plan.kv_bytes_per_token,
        state_rw_bytes=2.0 * (ssm_one + conv_one),
        intermediate_bytes_per_token=float(ssm_one + conv_one),
        graph_overhead=hw.step_overhead_ms / 1000,
        eager_overhead=hw.eager_overhead_ms / 1000 * layer_scale,
        graph_max_bs=config.cuda_graph_max_bs_decode,
        per_request=hw.per_request_overhead_ms / 1000,
        spec_per_request=hw.spec_per_request_overhead_ms / 1000,
        sched_overhead=sched,
        spec_steps=spec.num_steps if spec else 0,
        spec_topk=spec.topk if spec else 1,
        spec_draft_tokens=spec.num_draft_tokens if spec else 0,
        spec_acceptance=alpha,
        draft_step_bytes=draft_step_bytes,
        draft_flops_per_token=draft_flops,
        pcie=hw.pcie_bytes_per_s,
        hicache_load_factor=fx.hicache_transfer.slowdown(args.hicache_io_backend, config.page_size)
        * MEM_LAYOUT_FACTOR.get(args.hicache_mem_layout, 1.0),
        hicache_write_exposed=HICACHE_WRITE_EXPOSED[args.hicache_write_policy],
        prefix_state_bytes=float(ssm_one + conv_one),
        capture_bs=capture,
        padding_strength=fx.graph_padding.strength,
        gemm=fx.gemm_efficiency,
        kv_efficiency=fx.kv_kernel.effective
        * (fx.kv_quantized.effective if config.kv_dtype_bytes < model.dtype_bytes else 1.0),
        state_efficiency=fx.state_kernel.effective,
        scheduler_cpu=fx.scheduler_cpu,
        overlap=config.overlap_schedule,
        hicache_transfer=fx.hicache_transfer,
        hicache_io_backend=args.hicache_io_backend,
        page_size=config.page_size,
        accept_first=anchored_first(alpha, shape) if spec is not None else 0.0,
        accept_decay=shape.effective_decay,
        accept_spread=shape.effective_spread,
        experts=model.experts,
        experts_per_token=model.experts_per_token,
        expert_bytes=model.expert_bytes,
        routing=model.effects.expert_routing,
        tp=config.tp_size,
        allreduce_bytes_per_token=float(model.hidden_size * model.dtype_bytes),
        allreduces_per_forward=2 * model.num_layers,
        allreduce=fx.allreduce,
    )
