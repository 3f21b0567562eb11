"""A performance estimate from public facts, recalibrated by the study's own measurements.

What it knows: the model's shape (config.json, tuner/engines/model_config.py), the GPU's
spec-sheet memory, bandwidth, bf16 peak and host link (tuner/predict/gpu_specs.py), sglang's
memory rules (tuner/predict/memory.py over tuner/engines/memory_plan.py), and the workload and
benchmark of the space. What it does not know starts at a published measurement
(tuner/predict/priors.py, sources in docs/estimate.md) and is fitted to the trials measured so
far:

- `bandwidth_fraction`: the share of peak memory bandwidth a decode step reaches;
- `prefill_fraction`: the share of the bf16 peak a prefill reaches;
- `step_overhead_s`: a decode step's fixed time (graph replay, scheduler), once trials tell it
  apart from bandwidth;
- `accept_rate` and `accept_decay`: the chance draft position i is accepted, p x decay^(i-1),
  from the accept length sglang reports for every speculative run (`accept_length`);
- `prefix_reuse`: the share of the modelled prefix-cache hits that happen, from the cache hit
  rate the benchmark reports (the tokens sglang says it served from cache), when it reports any;
- `state_need`: on a hybrid model, the spare state slots its prefix cache needs to keep what it
  can reuse, once the measured hit rates differ between trials (docs/estimate.md);
- a correction per categorical value (e.g. a Mamba cache strategy, HiCache on) and for batches
  beyond the captured CUDA graphs, learned from the residuals of the measured trials, for what
  the formulas below leave out.

The model (a closed loop of C clients; `running` requests decode together, the others queue):

    step      = max(bytes read / (bandwidth x fraction), flops / (peak x fraction)) + overhead
    bytes     = weights + running x context x KV bytes per token (+ the draft's per draft step)
                (a mixture of experts: the experts its tokens are routed to, `weights_read`)
    accepted  = 1 + p1 + p1 p2 + ... over the draft steps (speculation)
    prefill   = uncached prompt tokens x 2 x params / (peak x prefill fraction), per request,
                + hits beyond the device pool loaded from host memory (HiCache)
    tensor    = with `tp_size` N, each GPU's share of weights, KV and state, and two all-reduces
                a layer per forward (`communication`)
    cycle     = running x prefill + output / accepted x step       (GPU time for `running` requests)
    output/s  = running x output / cycle;  TPOT = cycle / output
    TTFT      = the step under way + prefill, + ceil(waiting / running) x cycle for a request that
                finds no free slot (the clients start together, so slots free up in waves); a
                tail TTFT is at least the opening burst's: every client's uncached first prompt

The prefix cache: the share of a prompt that earlier requests already sent (a shared system
prompt, a conversation's history), scaled down when the cache (KV pool, plus host memory with
HiCache) holds less than the working set. It never reads the simulator: a real GPU host gives the
same inputs (NVML's device name and memory, the checkpoint's config.json).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tuner.engines.memory_plan import gpu_defaults
from tuner.engines.model_config import ModelMemory
from tuner.predict.gpu_specs import GpuSpec, provisional_span
from tuner.predict.memory import MemoryEstimate, estimate_memory, tensor_parallel
from tuner.predict.open_loop import OpenLoopLoad, sustained_rate
from tuner.predict.priors import PRIORS, accept_length, accept_prior, fit_acceptance
from tuner.predict.workload_shape import WorkloadShape
from tuner.results.goals import is_capacity
from tuner.space.model import SearchSpace

GB = 1e9
# Fixed-point rounds for an open-loop trace's requests in flight (they depend on the latency
# they are in flight for).
_OPEN_LOOP_ROUNDS = 6
# An EAGLE / STANDALONE draft whose size config.json does not give: one decoder layer of a
# 40-layer model, an assumption (MTP heads are read from config.json).
UNKNOWN_DRAFT_SHARE = 1 / 40
# The grids `fit` searches, geometric, around the spec sheet's figures (x 1 = the spec).
_FRACTIONS = tuple(0.15 * 1.12**i for i in range(26))  # 0.15 .. 2.5
_OVERHEADS_S = (0.0, *(0.0002 * 1.5**i for i in range(10)))  # 0, 0.2 ms .. 7.7 ms
_QUANTILES = {"median": 0.5, "p90": 0.9, "p95": 0.95, "p99": 0.99}
# One all-reduce's fixed time: sglang's custom all-reduce on H100 at 512 bytes measured 3.7 /
# 4.8 / 5.9 us over 2 / 4 / 8 GPUs (sglang PR #2904); its bytes move at the GPU link's spec.
ALLREDUCE_LATENCY_S = 5e-6


# State limits are tried in turn, no limit first: one replaces the one held so far only when it
# leaves at most this share of that one's squared error of the hit rates. Candidates come from
# trials whose hit rate fell this far below the best measured.
_STATE_FIT_GAIN = 0.5
_STATE_SHORTFALL = 0.03


def _spare_states(flags: Mapping[str, Any], slots: int, running: int) -> float:
    """The state slots the running requests leave to a hybrid model's prefix cache; with
    HiCache the host pool's share too (`hicache_ratio` x the device pool, sglang's default 2)."""
    spare = float(max(slots - running, 0))
    if flags.get("enable_hierarchical_cache"):
        spare *= 1.0 + float(flags.get("hicache_ratio") or 2.0)
    return spare


def weights_read(model: ModelMemory, tokens: float) -> float:
    """Weight bytes a forward of `tokens` tokens streams: all of a dense model's; of a mixture
    of experts, the experts its tokens are routed to besides the rest. With routing uniform
    over E experts, k per token, n tokens leave an expert unused with probability
    (1 - k / E)^n, so they touch E (1 - (1 - k / E)^n) experts per layer in expectation."""
    if not model.experts:
        return model.weight_bytes
    experts, per_token = model.experts, model.experts_per_token
    touched = experts * (1.0 - (1.0 - per_token / experts) ** max(tokens, 1.0))
    return model.weight_bytes - (experts - touched) * model.expert_bytes


@functools.cache
def communication(model: ModelMemory, gpu: GpuSpec, tp: int, tokens: float) -> float:
    """The all-reduces of one forward of `tokens` tokens over `tp` GPUs: two a layer, each
    ALLREDUCE_LATENCY_S + a ring's 2 (tp - 1) / tp of the activations at the GPU link's spec
    rate (NVLink where the card has it, else PCIe); 0 on one GPU."""
    if tp <= 1 or not model.layers:
        return 0.0
    ring = 2 * (tp - 1) / tp * tokens * model.hidden_bytes / (gpu.link_gb_s * GB)
    return 2 * model.layers * (ALLREDUCE_LATENCY_S + ring)


def _wide_fractions() -> tuple[float, ...]:
    """The fit's grid for a GPU the spec table lacks (its figures are the table's means):
    the usual one widened by how far any row of the table lies from those means."""
    span = provisional_span()
    low, high = _FRACTIONS[0] / span, _FRACTIONS[-1] * span
    return tuple(low * 1.12**i for i in range(int(math.log(high / low) / math.log(1.12)) + 2))


@dataclass(frozen=True)
class Calibration:
    """The estimate's unknowns, starting at published figures (tuner/predict/priors.py);
    `fit` moves them to match measured trials."""

    bandwidth_fraction: float = PRIORS.bandwidth_fraction
    prefill_fraction: float = PRIORS.prefill_fraction
    # Acceptance of draft position 1 and its decay with depth; None: the algorithm's prior.
    accept_rate: float | None = None
    accept_decay: float | None = None
    # Share of the modelled prefix-cache hits that happen (0: the estimate ignores the prefix
    # cache, as robustness runs start); refit to the cache hit rate the benchmark measures.
    prefix_reuse: float = 1.0
    # Fixed time of one decode step (graph replay, scheduler work). The bandwidth prior was
    # measured with it included, so it starts at 0 and is fitted when trials tell it apart.
    step_overhead_s: float = 0.0
    # Spare state slots (the state pool less the running requests; with HiCache the host pool's
    # too) a hybrid model's prefix cache needs to keep what it can reuse; 0: not a limit.
    # Fitted to the measured cache hit rates once they differ between trials
    # (`_fit_prefix_reuse`).
    state_need: float = 0.0


@dataclass(frozen=True)
class Prediction:
    fits: bool
    throughput: float  # output tok/s
    tpot_ms: float
    ttft_ms: float  # a request that finds a free slot
    running: int
    accept_length: float
    queued_ttft_ms: float = 0.0  # a request that waits for a slot (closed loop, clients > cap)
    queued_share: float = 0.0  # share of requests that wait
    burst_ttft_ms: float = 0.0  # the last of the clients' opening burst to get a first token
    hit_rate: float = 0.0  # share of prompt tokens served from the prefix cache
    burst_share: float = 0.0  # share of the benchmark's requests in the opening burst
    # What one request costs an open loop (Poisson arrivals, no client count): its running
    # slots, prefill and decode (tuner/predict/open_loop.py); None when it does not fit or the
    # study is not a capacity study.
    load: OpenLoopLoad | None = field(default=None, compare=False)

    def ttft_at(self, quantile: float) -> float:
        """TTFT at a quantile: the waiting requests' when more than 1 - quantile of them wait;
        at least the opening burst's at that quantile when the burst holds more than 1 -
        quantile of the requests (its k-th request waits for the prefill of the k - 1 before)."""
        tail = 1.0 - quantile
        burst = 0.0
        if self.burst_share > tail:
            burst = self.burst_ttft_ms * (1.0 - tail / self.burst_share)
        if self.queued_share > tail:
            return max(self.queued_ttft_ms, burst)
        return max(self.ttft_ms, burst)


@dataclass(frozen=True)
class Observation:
    """One measured trial: its flags and what it gave."""

    flags: Mapping[str, Any]
    throughput: float
    tpot_ms: float
    running: int | None
    accept_length: float | None
    params: Mapping[str, Any] | None = None  # the trial's sampled params (categoricals learned)
    metrics: Mapping[str, Any] | None = None  # the benchmark summary (SLO metrics learned)
    # A capacity study's figure: the highest request rate every SLO held at; `tpot_ms` is
    # then the step's at that rate (tuner/trial/capacity.py).
    sustained_rate: float | None = None


class Estimator:
    """Predicts (throughput, TPOT, TTFT) of a configuration; refit with `fit`."""

    # The sglang flags `predict` reads (any other flag is seen only through the learned
    # per-choice corrections): the local search measures moves of the others early, since
    # the estimate cannot rank them (tuner/study/local_search.py, `blind`).
    MODELLED: frozenset[str] = frozenset(
        {
            "speculative_algorithm",
            "speculative_num_steps",
            "speculative_num_draft_tokens",
            "speculative_eagle_topk",
            "max_running_requests",
            "mem_fraction_static",
            "enable_hierarchical_cache",
            "hicache_ratio",
            "disable_radix_cache",
            "mamba_radix_cache_strategy",
            "chunked_prefill_size",
            "disable_overlap_schedule",
            "cuda_graph_max_bs_decode",
            "cuda_graph_max_bs",
            "kv_cache_dtype",
        }
    )

    def __init__(
        self,
        space: SearchSpace,
        model: ModelMemory,
        gpu: GpuSpec,
        gpu_memory_gb: float,
        calibration: Calibration | None = None,
        fixed: Calibration | None = None,
    ) -> None:
        self.space = space
        self.model = model
        self.gpu = gpu
        self.gpu_memory_gb = gpu_memory_gb
        self.calibration = calibration or Calibration()
        # A deliberately wrong estimate (robustness runs) scales the fitted values by these.
        self.bias = fixed or Calibration(1.0, 1.0, 1.0, 1.0)
        self.clients = int(space.bench.concurrency or 64)
        self.shape = WorkloadShape.of(space.workload, self.clients)
        # The parameters one token's forward multiplies by (bf16 weights: bytes / 2); of a
        # mixture of experts, its experts_per_token routed experts and the rest.
        self.params = weights_read(model, 1) / 2.0
        self._memory_cache: dict[tuple[Any, ...], Any] = {}
        # Learned per categorical value: log of measured / predicted throughput, shrunk to 0.
        self.corrections: dict[tuple[str, str], float] = {}
        # Learned per SLO metric: measured / predicted (TTFT tails depend on arrival bursts and
        # prefill queueing the formulas only bound).
        self.slo_scale: dict[str, float] = {}
        # A capacity study (--goal capacity) ranks by the open loop's sustained request rate.
        self.capacity = is_capacity(space.objectives.throughput)
        if space.bench.concurrency is None and self.shape.arrival_rate:
            self.clients = self._open_loop_clients(self.shape.arrival_rate)
            self.shape = WorkloadShape.of(space.workload, self.clients)

    def _open_loop_clients(self, rate: float) -> int:
        """The requests an open loop at `rate` req/s (a trace's times) keeps in flight: the
        rate times how long one takes at sglang's defaults (Little's law), which is the client
        count of the closed loop the model below stands for; at most the trace's requests."""
        flags = {"model_path": self.space.model_path, **self.space.fixed_flags}
        clients = 1
        for _ in range(_OPEN_LOOP_ROUNDS):
            self.clients = clients
            prediction = self.predict(flags)
            if not prediction.fits:
                break
            e2e_s = (prediction.ttft_ms + prediction.tpot_ms * self.shape.output) / 1000
            found = max(1, min(self.shape.requests, math.ceil(rate * e2e_s)))
            if found == clients:
                break
            clients = found
        return clients

    # -- prediction ---------------------------------------------------------------------------

    def _defaults(self, flags: Mapping[str, Any]) -> tuple[int, int]:
        """sglang's prefill chunk and decode graph limit when the flags leave them unset."""
        return gpu_defaults(self.gpu_memory_gb, tensor_parallel(flags))

    def _memory(self, flags: Mapping[str, Any]) -> MemoryEstimate:
        """sglang's memory plan for these flags, computed once per configuration."""
        key = tuple(sorted((k, str(v)) for k, v in flags.items()))
        memory = self._memory_cache.get(key)
        if memory is None:
            memory = estimate_memory(
                flags, self.model, self.gpu_memory_gb, version=self.space.engine_version
            )
            self._memory_cache[key] = memory
        return memory

    def predict(self, flags: Mapping[str, Any]) -> Prediction:
        cal = self.calibration
        bias = self.bias
        bw = self.gpu.bandwidth_gb_s * GB * cal.bandwidth_fraction * bias.bandwidth_fraction
        peak = self.gpu.bf16_tflops * 1e12 * cal.prefill_fraction * bias.prefill_fraction
        memory = self._memory(flags)
        if not memory.fits:
            return Prediction(False, 0.0, math.inf, math.inf, 0, 1.0)
        spec = bool(flags.get("speculative_algorithm"))
        tp = tensor_parallel(flags)
        # one GPU's share (the GPUs run in step), its KV as --kv-cache-dtype stores it: fewer
        # bytes a token for the pool, the decode step's reads and HiCache's copies alike
        model = self.model.sharded(tp).with_kv_cache_dtype(flags.get("kv_cache_dtype"))
        params = self.params / tp

        def talk(tokens: float) -> float:
            """A forward's all-reduces over the tp GPUs: two a layer (alpha-beta, ring)."""
            return communication(self.model, self.gpu, tp, tokens)

        # sglang's choice when the three speculative flags are unset: 3 steps, topk 1, 4 tokens.
        steps = int(flags.get("speculative_num_steps") or 3) if spec else 0
        draft = int(flags.get("speculative_num_draft_tokens") or steps + 1) if spec else 1
        accepted = 1.0
        if spec:
            p, decay = self.acceptance(flags.get("speculative_algorithm"))
            accepted = accept_length(p * (bias.accept_rate or 1.0), decay, steps)

        shape = self.shape
        context = shape.prompt + shape.output / 2
        cap = flags.get("max_running_requests")
        running = min(self.clients, memory.max_running_requests or self.clients)
        if cap:
            running = min(running, int(cap))
        running = max(1, min(running, int(memory.kv_tokens // max(context, 1)) or 1))

        # The prefix cache: how much of the shareable prompt the pools keep.
        hit_tokens, kept, capacity = 0.0, 0.0, 0.0
        reuse = max(cal.prefix_reuse, 0.0)
        hicache = bool(flags.get("enable_hierarchical_cache"))
        if reuse > 0 and not flags.get("disable_radix_cache") and shape.shareable > 0:
            capacity = float(memory.kv_tokens)
            if hicache:  # sglang's default host pool: 2 x the device pool (--hicache-ratio)
                capacity *= 1.0 + float(flags.get("hicache_ratio") or 2.0)
            kept = min(1.0, capacity / max(shape.working_set, 1.0)) * reuse
            if self.capacity:
                kept *= self._states_kept(flags, memory.state_slots, memory.max_running_requests)
            else:
                kept *= self._states_fitted(flags, memory.state_slots, running)
            hit_tokens = min(shape.shareable * kept, shape.prompt)
            if model.hybrid and flags.get("mamba_radix_cache_strategy") == "no_buffer":
                # The recurrent state is kept only where a request ended, so a prefix shared
                # mid-prompt (a system prompt) is not found again; a conversation's history is.
                hit_tokens = min(hit_tokens, shape.request_end_shareable * kept)
        new_tokens = max(shape.prompt - hit_tokens, 1.0)
        chunk = float(flags.get("chunked_prefill_size") or self._defaults(flags)[0])
        chunks = math.ceil(new_tokens / chunk)
        weights = model.weight_bytes
        chunk_weights = weights_read(model, min(new_tokens, chunk))
        overhead = cal.step_overhead_s * (bias.step_overhead_s or 1.0)
        prefill_s = max(new_tokens * 2 * params / peak, chunks * chunk_weights / bw) + (
            chunks * (overhead + talk(min(new_tokens, chunk)))
        )
        if hicache and hit_tokens > 0:
            # Hits beyond what the device pool alone keeps come back from host memory over the
            # host link (its spec-sheet rate; a HiCache correction is learned from the trials).
            device_kept = min(1.0, float(memory.kv_tokens) / max(shape.working_set, 1.0))
            total_kept = min(1.0, capacity / max(shape.working_set, 1.0))
            from_host = max(0.0, 1.0 - device_kept / total_kept)
            host_rate = self.gpu.host_link_gb_s * GB
            prefill_s += hit_tokens * from_host * model.kv_bytes_per_token / host_rate

        if flags.get("disable_overlap_schedule"):
            overhead *= 2  # the scheduler's work is no longer hidden behind the GPU's
        kv_per_request = context * model.kv_bytes_per_token
        draft_s = 0.0
        if spec:
            draft_bytes = model.draft_bytes or weights * UNKNOWN_DRAFT_SHARE
            # sglang captures the draft's steps in one CUDA graph: one fixed cost for them all.
            draft_s = steps * draft_bytes / bw + overhead

        def step_at(batch: float) -> float:
            """One decode step with `batch` requests running (the draft's part is fixed)."""
            flops = batch * draft * 2 * params
            read = weights_read(model, batch * draft) + batch * kv_per_request
            return max(read / bw, flops / peak) + overhead + draft_s + talk(batch * draft)

        step_s = step_at(running)
        decode_s = shape.output / accepted * step_s
        cycle = running * prefill_s + decode_s
        load = None
        if self.capacity:  # only a capacity study reads it; `predict` is the hill climb's
            # An open loop is bounded by the running slots sglang sets, not by a client count.
            slots = memory.max_running_requests or running
            if cap:
                slots = min(slots, int(cap))
            slots = max(1, min(slots, int(memory.kv_tokens // max(context, 1)) or 1))
            load = OpenLoopLoad(
                slots=slots,
                prefill_s=prefill_s,
                base_s=prefill_s + step_at(slots),
                decode_s=lambda batch: shape.output / accepted * step_at(batch),
            )
        throughput = running * shape.output / cycle
        tpot_ms = 1000 * cycle / shape.output
        waiting = max(self.clients - running, 0)
        # A request that finds a free slot waits for the decode step under way, then its prefill.
        ttft_ms = 1000 * (prefill_s + step_s)
        burst_tokens = self._burst_tokens(flags, running, kept, chunk)
        burst_ms = 1000 * max(
            burst_tokens * 2 * params / peak,
            math.ceil(burst_tokens / chunk) * weights_read(model, chunk) / bw,
        )
        # The clients start together, so the running requests finish in waves: a request that
        # finds every slot taken waits for whole turns of the running batch, not a share of one.
        queued_ms = ttft_ms + 1000 * math.ceil(waiting / running) * cycle
        return Prediction(
            True, throughput, tpot_ms, ttft_ms, running, accepted, queued_ms,
            waiting / self.clients, burst_ms, hit_tokens / max(shape.prompt, 1.0),
            min(1.0, running / max(shape.requests, 1)), load,
        )  # fmt: skip

    def _states_kept(self, flags: Mapping[str, Any], slots: int, running: int) -> float:
        """The share of the working set a hybrid model's prefix cache can resume from.

        A cached prefix of a Mamba-style model is usable only where a recurrent state was saved
        with it, and those states live in the state pool's slots that running requests do not
        hold; with `extra_buffer` sglang saves one every `--mamba-track-interval` tokens (256;
        schedule_batch.py tracks `seq_lens % mamba_track_interval`). An open loop at its
        capacity keeps every running slot busy, so the rest is what the cache holds. Applied
        to capacity studies, where it was measured to decide the ranking; closed-loop studies
        keep the model their quality figures were measured with."""
        if not self.model.hybrid or not slots:
            return 1.0
        if flags.get("mamba_radix_cache_strategy") == "no_buffer":
            return 1.0  # one state per finished request: limited by request ends already
        interval = int(flags.get("mamba_track_interval") or 256)
        needed = self.shape.working_set / max(interval, 1)
        spare = max(slots - running, 0)
        return min(1.0, spare / max(needed, 1.0))

    def _states_fitted(self, flags: Mapping[str, Any], slots: int, running: int) -> float:
        """The share of a closed loop's reusable prefixes a hybrid model's cache keeps, as the
        study's measured hit rates say: the spare state slots over `state_need` (fitted). A
        cached prefix resumes only from a saved recurrent state, and the running requests hold
        their own slots, so more draft steps or a smaller pool (fewer slots) keep fewer; with
        HiCache the host pool holds states too (sglang's `HiMambaRadixCache`), `hicache_ratio`
        times the device pool's (docs/sglang-memory.md)."""
        need = self.calibration.state_need
        if need <= 0 or not self.model.hybrid or not slots:
            return 1.0
        if flags.get("mamba_radix_cache_strategy") == "no_buffer":
            return 1.0  # one state per finished request: limited by request ends already
        return min(1.0, _spare_states(flags, slots, running) / need)

    def _burst_tokens(
        self, flags: Mapping[str, Any], running: int, kept: float, chunk: float
    ) -> float:
        """Prompt tokens prefilled before the last of the opening burst's requests (one per
        running slot) gets its first token. A prefix is cached once a prefill ends, so the
        requests prefilled in the same chunk as a prefix's first, and every request when the
        cache keeps a hybrid model's state only at request ends (no_buffer), send it again."""
        shape = self.shape
        shared = min(shape.first_shared * kept, shape.first_prompt)
        if self.model.hybrid and flags.get("mamba_radix_cache_strategy") == "no_buffer":
            shared = 0.0
        together = max(1, int(chunk // max(shape.first_prompt, 1.0)))
        repeats = min(running, max(shape.prefixes, together))
        return running * (shape.first_prompt - shared) + repeats * shared

    def _features(
        self,
        params: Mapping[str, Any],
        prediction: Prediction,
        flags: Mapping[str, Any] | None = None,
    ) -> list[tuple[str, str]]:
        """What a correction is learned for: each categorical choice, and whether the running
        batch (x draft tokens) is beyond sglang's captured decode CUDA graphs, where it runs
        eagerly at a cost no spec sheet gives."""
        flags = params if flags is None else flags
        out = []
        for name, value in params.items():
            spec = self.space.params.get(name)
            if spec is not None and spec.kind == "categorical":
                out.append((name, repr(value)))
        graph_bs = int(
            flags.get("cuda_graph_max_bs_decode")
            or flags.get("cuda_graph_max_bs")
            or self._defaults(flags)[1]
        )
        out.append(("beyond_cuda_graphs", repr(prediction.running > graph_bs)))
        return out

    def sustained_rate(self, prediction: Prediction) -> float:
        """The open loop's capacity: the highest request rate (req/s) at which each TTFT SLO
        of the space holds (tuner/predict/open_loop.py); without one, the rate a full server
        completes requests at."""
        if not prediction.fits or prediction.load is None:
            return 0.0
        rate = math.inf
        for slo in self.space.slos:
            stat, _, quantity = slo.metric.partition("_")
            if quantity == "ttft_ms" and slo.op in ("<=", "<") and stat in _QUANTILES:
                found = sustained_rate(prediction.load, slo.limit / 1000, _QUANTILES[stat])
                rate = min(rate, found)
        if math.isinf(rate):
            return prediction.throughput / max(self.shape.output, 1.0)
        return rate

    def tpot_at_rate(self, prediction: Prediction, rate: float) -> float:
        """TPOT (ms) of an open loop at `rate` req/s: its decode at the batch that rate keeps
        running, stretched by the prefills in between."""
        if prediction.load is None:
            return math.inf
        _rho, _running, e2e = prediction.load.latencies(rate)
        return 1000 * (e2e - prediction.load.base_s) / max(self.shape.output, 1.0)

    def score(self, flags: Mapping[str, Any]) -> float:
        """Predicted throughput within the space's SLOs (TTFT and TPOT limits), else a penalty
        that grows with the predicted violation; in a capacity study the sustained rate."""
        prediction = self.predict(flags)
        if not prediction.fits:
            return -1.0
        correction = math.exp(
            sum(self.corrections.get(key, 0.0) for key in self._features(flags, prediction))
        )
        if self.capacity:
            return self.sustained_rate(prediction) * correction
        values = self.slo_values(prediction)
        for slo in self.space.slos:
            value = values.get(slo.metric)
            if value is not None and slo.op == "<=" and value > slo.limit:
                # Below any configuration within the SLOs, and lower the further out it is, so
                # that a search over the estimate is led back inside.
                return prediction.throughput * correction * 0.05 * slo.limit / value
        return prediction.throughput * correction

    def expected(self, flags: Mapping[str, Any]) -> tuple[float, dict[str, float]] | None:
        """(throughput with the learned corrections, the SLO metrics it models: p99 TTFT and
        TPOT, scaled as fitted); None when the configuration does not fit in memory."""
        prediction = self.predict(flags)
        if not prediction.fits:
            return None
        correction = math.exp(
            sum(self.corrections.get(key, 0.0) for key in self._features(flags, prediction))
        )
        return prediction.throughput * correction, self.slo_values(prediction)

    def slo_values(self, prediction: Prediction) -> dict[str, float]:
        """The space's latency SLO metrics as predicted (TTFT at its quantile, TPOT), times
        the scale fitted to the measured ones."""
        out = {}
        for slo in self.space.slos:
            stat, _, quantity = slo.metric.partition("_")
            quantile = _QUANTILES.get(stat, 0.5)
            value = {"ttft_ms": prediction.ttft_at(quantile), "tpot_ms": prediction.tpot_ms}.get(
                quantity
            )
            if value is not None:
                out[slo.metric] = value * self.slo_scale.get(slo.metric, 1.0)
        return out

    # -- calibration --------------------------------------------------------------------------

    def acceptance(self, algorithm: object) -> tuple[float, float]:
        """(p, decay) of draft acceptance: fitted to this study's accept lengths when it
        measured any, else the published figures' for the algorithm (tuner/predict/priors.py)."""
        prior_p, prior_decay = accept_prior(str(algorithm or ""))
        cal = self.calibration
        p = cal.accept_rate if cal.accept_rate is not None else prior_p
        return p, cal.accept_decay if cal.accept_decay is not None else prior_decay

    def fit(self, observations: Sequence[Observation]) -> None:
        """Fit the unknowns to what was measured: log-error least squares, one coordinate at a
        time over geometric grids around the spec sheet's figures."""
        if self.capacity:
            plain = [o for o in observations if (o.sustained_rate or 0.0) > 0]
        else:
            plain = [o for o in observations if o.throughput > 0]
        if not plain:
            return
        cal = self._fit_acceptance(plain, self.calibration)
        cal = self._fit_prefix_reuse(plain, cal)
        self.calibration = cal
        best = self._error(plain)
        fractions = _wide_fractions() if self.gpu.provisional else _FRACTIONS
        grids = {
            "bandwidth_fraction": fractions,
            "prefill_fraction": fractions,
            "step_overhead_s": _OVERHEADS_S,
        }
        for _ in range(3):
            moved = False
            for name, grid in grids.items():
                for value in grid:
                    trial_cal = replace(self.calibration, **{name: value})
                    previous, self.calibration = self.calibration, trial_cal
                    error = self._error(plain)
                    if error < best - 1e-12:
                        best, moved = error, True
                    else:
                        self.calibration = previous
            if not moved:
                break
        self._learn_corrections(plain)
        self._learn_slo_scale(plain)

    def _error(self, observations: Sequence[Observation]) -> float:
        error = 0.0
        for o in observations:
            pred = self.predict(o.flags)
            if not pred.fits:
                continue
            tpot_ms = pred.tpot_ms
            if self.capacity and o.sustained_rate:
                rate = self.sustained_rate(pred)
                error += math.log(max(rate, 1e-9) / o.sustained_rate) ** 2
                tpot_ms = self.tpot_at_rate(pred, o.sustained_rate)
            else:
                error += math.log(pred.throughput / o.throughput) ** 2
            if math.isfinite(o.tpot_ms) and o.tpot_ms > 0 and math.isfinite(tpot_ms):
                error += 0.5 * math.log(tpot_ms / o.tpot_ms) ** 2
        return error

    def _fit_acceptance(self, observations: Sequence[Observation], cal: Calibration) -> Calibration:
        """Acceptance from the accept lengths sglang reported: p alone from one step count
        (the decay stays the prior's), p and its decay from two or more."""
        accepts = [
            (int(o.flags.get("speculative_num_steps") or 3), float(o.accept_length))
            for o in observations
            if o.flags.get("speculative_algorithm") and o.accept_length
        ]
        if not accepts:
            return cal
        algorithm = next(
            o.flags.get("speculative_algorithm")
            for o in observations
            if o.flags.get("speculative_algorithm")
        )
        prior_decay = accept_prior(str(algorithm))[1]
        distinct = len({steps for steps, _ in accepts})
        p, decay = fit_acceptance(accepts, None if distinct >= 2 else prior_decay)
        return replace(cal, accept_rate=p / (self.bias.accept_rate or 1.0), accept_decay=decay)

    def _fit_prefix_reuse(
        self, observations: Sequence[Observation], cal: Calibration
    ) -> Calibration:
        """Measured over modelled (at full reuse) cache hit rate, when the benchmark reports
        hits at all (a server that reports no cached tokens says nothing about its cache)."""
        measured = [float((o.metrics or {}).get("cache_hit_rate") or 0.0) for o in observations]
        if max(measured, default=0.0) <= 0.01:
            return cal
        best: tuple[float, Calibration] | None = None
        for need in self._state_needs(observations, measured):
            self.calibration = replace(cal, prefix_reuse=1.0, state_need=need)
            modelled = [self.predict(o.flags) for o in observations]
            pairs = [(m, p.hit_rate) for m, p in zip(measured, modelled, strict=True) if p.fits]
            total = sum(p for _, p in pairs)
            if total <= 0:
                continue
            reuse = min(sum(m for m, _ in pairs) / total, 1.5)
            error = sum((reuse * p - m) ** 2 for m, p in pairs)
            # Each limit must explain the hit rates clearly better than the one held (none first).
            if best is None or error < _STATE_FIT_GAIN * best[0] - 1e-9:
                best = (error, replace(cal, prefix_reuse=reuse, state_need=need))
        self.calibration = cal
        return best[1] if best is not None else cal

    def _state_needs(
        self, observations: Sequence[Observation], measured: Sequence[float]
    ) -> list[float]:
        """`state_need` values to try: 0 (no limit), and for a hybrid model's trials whose hit
        rate fell short of the highest measured, the spare slots that explain that shortfall."""
        if not self.model.hybrid or self.capacity:
            return [0.0]
        top = max(measured)
        needs = [0.0]
        for o, m in zip(observations, measured, strict=True):
            if not 0.01 < m < (1 - _STATE_SHORTFALL) * top:
                continue
            if o.flags.get("mamba_radix_cache_strategy") == "no_buffer":
                continue  # its hits are bounded by request ends, not by state slots
            prediction = self.predict(o.flags)
            if not prediction.fits:
                continue
            spare = _spare_states(o.flags, self._memory(o.flags).state_slots, prediction.running)
            if spare > 0:
                needs.append(spare * top / m)
        return needs

    def _learn_slo_scale(self, observations: Sequence[Observation]) -> None:
        """Median of measured / predicted for each latency SLO metric, from 2 trials on."""
        self.slo_scale = {}
        if self.capacity:  # the sustained rate is where the SLO is met: nothing to scale
            return
        for slo in self.space.slos:
            stat, _, quantity = slo.metric.partition("_")
            quantile = _QUANTILES.get(stat, 0.5)
            ratios = []
            for o in observations:
                measured = (o.metrics or {}).get(slo.metric)
                pred = self.predict(o.flags)
                if not measured or not pred.fits:
                    continue
                predicted = {"ttft_ms": pred.ttft_at(quantile), "tpot_ms": pred.tpot_ms}.get(
                    quantity
                )
                if predicted and math.isfinite(predicted) and predicted > 0:
                    ratios.append(float(measured) / predicted)
            if len(ratios) >= 2:
                ratios.sort()
                self.slo_scale[slo.metric] = ratios[len(ratios) // 2]

    def _learn_corrections(self, observations: Sequence[Observation]) -> None:
        """What the model misses about a categorical choice (e.g. a cache strategy's effect on
        prefix reuse): the mean log residual of the trials with that value, shrunk towards 0
        by n / (n + 2), relative to the mean over all trials."""
        residuals: list[tuple[list[tuple[str, str]], float]] = []
        for o in observations:
            pred = self.predict(o.flags)
            measured, predicted = o.throughput, pred.throughput
            if self.capacity:
                measured, predicted = o.sustained_rate or 0.0, self.sustained_rate(pred)
            if pred.fits and predicted > 0 and measured > 0:
                features = self._features(o.params or o.flags, pred, o.flags)
                residuals.append((features, math.log(measured / predicted)))
        self.corrections = {}
        if len(residuals) < 3:
            return
        overall = sum(r for _, r in residuals) / len(residuals)
        groups: dict[tuple[str, str], list[float]] = {}
        for features, r in residuals:
            for key in features:
                groups.setdefault(key, []).append(r - overall)
        for key, values in groups.items():
            n = len(values)
            self.corrections[key] = sum(values) / n * n / (n + 2)
