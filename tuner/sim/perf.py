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

Pure functions of the configuration, so the scheduler and the oracle agree by construction.
"""

from __future__ import annotations

from dataclasses import dataclass

from tuner.sim.config import SimConfig
from tuner.sim.memory import MemoryPlan

# Fraction of the smaller of memory / compute time that does not overlap with the larger.
OVERLAP_RESIDUE = 0.3
# Acceptance of drafts that do not come from the model's own MTP head.
DRAFT_MODEL_ACCEPTANCE = {"EAGLE": 0.75, "EAGLE3": 0.78, "STANDALONE": 0.7, "NGRAM": 0.35}
# Share of a host->device load that is not hidden behind the layer-by-layer prefill.
HICACHE_LOAD_EXPOSED = 0.7
# Share of host writes' PCIe time that slows the forward passes (separate CUDA stream).
HICACHE_WRITE_EXPOSED = {"write_through": 0.15, "write_back": 0.1, "write_through_selective": 0.1}
IO_BACKEND_FACTOR = {"kernel": 1.0, "direct": 1.25}
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

    @property
    def speculative(self) -> bool:
        return self.spec_draft_tokens > 0

    def _forward(self, tokens: int, requests: int, bytes_read: float, flops: float) -> float:
        mem = bytes_read / self.bandwidth
        comp = flops / self.flops
        graph = 0 < requests <= self.graph_max_bs
        fixed = self.graph_overhead if graph else self.eager_overhead
        return (
            max(mem, comp)
            + OVERLAP_RESIDUE * min(mem, comp)
            + fixed
            + requests * self.per_request
            + self.sched_overhead
        )

    def decode_step(self, batch: int, context_tokens: int) -> float:
        """One plain decode step for ``batch`` requests holding ``context_tokens`` in total."""
        bytes_read = (
            self.decode_weight_bytes
            + batch * self.state_rw_bytes
            + context_tokens * self.kv_bytes_per_token
        )
        flops = batch * self.flops_per_token + self.attn_flops_coeff * context_tokens
        return self._forward(batch, batch, bytes_read, flops)

    def spec_iteration(self, batch: int, context_tokens: int) -> float:
        """Draft + verify for ``batch`` requests: one speculative decoding iteration."""
        d = self.spec_draft_tokens
        verify_bytes = (
            self.decode_weight_bytes
            + batch * self.state_rw_bytes
            + batch * d * self.intermediate_bytes_per_token
            + context_tokens * self.kv_bytes_per_token
        )
        verify_flops = batch * d * self.flops_per_token + self.attn_flops_coeff * context_tokens * d
        verify = self._forward(batch * d, batch, verify_bytes, verify_flops)
        draft_one = (
            self.draft_step_bytes / self.bandwidth
            + batch * self.spec_topk * self.draft_flops_per_token / self.flops
            + self.graph_overhead * 0.5
        )
        return verify + (self.spec_steps + 1) * draft_one + batch * self.spec_per_request

    def mixed_decode_extra(self, batch: int, context_tokens: int) -> float:
        """What ``batch`` decoding requests add to a prefill batch they ride in (mixed chunk):
        their KV and state traffic and their FLOPs; the weights are read once anyway."""
        bytes_read = batch * self.state_rw_bytes + context_tokens * self.kv_bytes_per_token
        flops = batch * self.flops_per_token + self.attn_flops_coeff * context_tokens
        return bytes_read / self.bandwidth + flops / self.flops + batch * self.per_request

    def step(self, batch: int, context_tokens: int) -> float:
        if self.speculative:
            return self.spec_iteration(batch, context_tokens)
        return self.decode_step(batch, context_tokens)

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
            self.decode_weight_bytes
            + new_tokens * self.kv_bytes_per_token
            + requests * self.state_rw_bytes
        )
        flops = new_tokens * self.flops_per_token + self.attn_flops_coeff * attn_pairs
        if self.speculative:
            flops += new_tokens * self.draft_flops_per_token
            bytes_read += self.draft_step_bytes
        t = self._forward(new_tokens, 0, bytes_read, flops) + requests * self.per_request
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
        return HICACHE_LOAD_EXPOSED * load + write

    def accept_pmf(self) -> list[float]:
        """P(tokens produced by one iteration = i + 1), i = 0 .. accepted drafts."""
        if not self.speculative:
            return [1.0]
        depth = min(self.spec_steps, self.spec_draft_tokens - 1)
        alpha = self.spec_acceptance
        pmf = [alpha**j * (1.0 - alpha) for j in range(depth)]
        pmf.append(alpha**depth)
        return pmf


def effective_acceptance(config: SimConfig) -> float:
    """Per-token acceptance of the draft chain, widened by a tree when topk > 1."""
    spec = config.spec
    if spec is None:
        return 0.0
    if spec.uses_mtp_head and config.model.mtp is not None:
        alpha = config.model.mtp.acceptance
    else:
        alpha = DRAFT_MODEL_ACCEPTANCE.get(spec.algorithm, 0.7)
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
        lm_head = model.vocab_size * model.hidden_size * model.dtype_bytes
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
        spec_acceptance=effective_acceptance(config),
        draft_step_bytes=draft_step_bytes,
        draft_flops_per_token=draft_flops,
        pcie=hw.pcie_bytes_per_s,
        hicache_load_factor=IO_BACKEND_FACTOR[args.hicache_io_backend]
        * MEM_LAYOUT_FACTOR.get(args.hicache_mem_layout, 1.0),
        hicache_write_exposed=HICACHE_WRITE_EXPOSED[args.hicache_write_policy],
        prefix_state_bytes=float(ssm_one + conv_one),
    )
