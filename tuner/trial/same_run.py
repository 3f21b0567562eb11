"""Configurations whose flags differ but whose run cannot: one launch answers for both.

    rules = SameRunRules.of(space, model_memory, gpu_memory_gb)
    reason = rules.repeats(proposal_flags, measured_flags, measured_capacity)  # None: may differ

docs/same-run.md gives the sglang 0.5.23 source for every step, and the rules considered and
rejected (a chunked-prefill size above the longest prompt, radix cache, HiCache and Mamba-cache
choices without prefix reuse: each changes memory, batching or the work done).

Four flags may differ: the running cap, the memory fraction, the decode CUDA-graph batch limit
and the HiCache host ratio. The rule applies to a closed loop of C clients (at most C requests
are ever in the server), a model whose layers are all full attention with a plain KV (its pool
is sized from the memory budget alone), no speculative decoding and no data parallelism. Two
launches are then the same run when:

- the proposal needs no more memory of any kind than a launch that started, the measured one
  or another: the same flags but those that size memory (and the queue order), each of those
  at least the proposal's (cap, fraction, HiCache ratio, chunk size, decode graphs captured);
- both KV pools hold every token the run can ever put in them (`resident_token_bound`) when
  the pools or HiCache's host pools differ: nothing is evicted, no admission waits for memory
  and no request is retracted, so a pool's size is never read. The proposal's pool is the
  measured one less what the smaller fraction takes away; with the fraction unset the graph
  limits must be equal (sglang's reserve for them sets the fraction);
- both run as many requests at once: all C clients, or the same number of request slots
  (sglang's min(cap, tokens / 2)) with the other clients queued alike;
- every decode batch of up to that many requests pads to the same captured CUDA graph in both,
  from sglang's batch-size list cut at the graph limit and at the request slots.

The repeat's recorded capacity is the measured one with its own cap applied and its own pool
when that differs.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.bench.workload import WorkloadSpec, longest_request
from tuner.engines.memory_plan import default_graph_limit, kv_element_bytes
from tuner.engines.model_config import ModelMemory
from tuner.errors import UserError
from tuner.predict.memory import tensor_parallel
from tuner.space.model import SearchSpace

CAP = "max_running_requests"
MEM = "mem_fraction_static"
GRAPH = "cuda_graph_max_bs_decode"
HOST = "hicache_ratio"
CHUNK = "chunked_prefill_size"
MAY_DIFFER = (CAP, MEM, GRAPH, HOST)
# A trial whose launch worked: its number, flags and what its server reported.
Launched = tuple[int, Mapping[str, Any], Mapping[str, Any] | None]
_LABELS = {
    CAP: "running cap",
    MEM: "memory fraction",
    GRAPH: "decode CUDA-graph limit",
    HOST: "HiCache host ratio",
}
GIB = 1024**3
# Graph and activation reserve per unit of decode graph limit, with the fraction unset (MiB).
_GRAPH_RESERVE_MIB = 2
# Slack on the token bound: page rounding and what the bound may miss.
_BOUND_SLACK = 1.1


def decode_graph_list(max_bs: int) -> list[int]:
    """The decode batch sizes sglang 0.5.23 captures for a graph limit (no speculation, padding
    on): 1, 2, 4, 8, 12, 16..256 by 8, 272..496 by 16, 512 up by 32, cut at the limit, plus the
    limit itself."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    sizes = [s for s in sizes if s <= max_bs]
    return sizes if max_bs in sizes else [*sizes, max_bs]


def decode_graph_sizes_from(clients: int) -> int:
    """The smallest listed batch size >= `clients` (what a limit must reach for batches of up to
    `clients` to pad as under any larger limit)."""
    return next(s for s in decode_graph_list(max(clients, 1) + 512) if s >= clients)


def resident_token_bound(workload: WorkloadSpec, warmup: int, clients: int) -> int | None:
    """At most how many tokens a run of this workload ever holds in the KV pool: every distinct
    prompt token of the workload and its warm-up once (a shared system prompt once), every
    answer twice (the generated one and the stand-in the next turn may send instead), and a full
    copy of the longest request for each client (requests in flight that share a prefix not yet
    cached each compute it until it is inserted). None for text prompts (no exact count)."""
    conversations = workload.make_conversations() + workload.make_warmup(warmup)
    longest = longest_request(conversations)
    if longest is None:
        return None
    systems: set[tuple[Any, ...]] = set()
    total = 0
    for conversation in conversations:
        system = tuple(conversation.system)
        if system not in systems:
            systems.add(system)
            total += len(system)
        for turn in conversation.turns:
            total += len(turn.user) + turn.output_len + len(turn.synthetic_answer)
    return total + clients * longest


@functools.lru_cache(maxsize=8)
def _workload_bound(workload: str, warmup: int, clients: int) -> int | None:
    """`resident_token_bound` of a space's `workload:` mapping (as JSON), once per process: the
    objective and the guide both ask at start-up, and building a workload reads its file."""
    try:
        spec = WorkloadSpec.from_dict(json.loads(workload))
        return resident_token_bound(spec, warmup, clients)
    except (UserError, OSError):
        return None  # a JSONL file not there yet: the bench says so when it runs


@dataclass(frozen=True)
class Launch:
    """What sglang resolves for one set of flags, as far as the rule reads it."""

    cap: int | None
    fraction: float | None
    graph_limit: int | None  # None: unknown
    graphs: bool  # CUDA graphs on, with padding

    @classmethod
    def of(cls, flags: Mapping[str, Any], gpu_memory_gb: float | None) -> Launch:
        cap = flags.get(CAP)
        limit = flags.get(GRAPH)
        if limit is None:
            limit = default_graph_limit(gpu_memory_gb, int(flags.get("tp_size") or 1))
            if limit is not None and cap is not None:
                limit = min(limit, int(cap))  # sglang clamps its own default to the cap
        fraction = flags.get(MEM)
        return cls(
            cap=None if cap is None else int(cap),
            fraction=None if fraction is None else float(fraction),
            graph_limit=None if limit is None else int(limit),
            graphs=not (flags.get("disable_cuda_graph") or flags.get("disable_cuda_graph_padding")),
        )

    def padded(self, slots: int, running: int) -> tuple[int, ...] | None:
        """The captured size each decode batch of 1..running requests runs as (0: no graph);
        None when the graph limit is unknown."""
        if not self.graphs:
            return tuple(0 for _ in range(running))
        if self.graph_limit is None:
            return None
        sizes = [s for s in decode_graph_list(self.graph_limit) if s <= slots]
        if self.graph_limit > slots:
            sizes.append(slots)
        sizes.sort()
        return tuple(next((s for s in sizes if s >= b), 0) for b in range(1, running + 1))


@dataclass(frozen=True)
class SameRunRules:
    """The rules for one study: its closed loop's client count and what the model is."""

    clients: int | None  # closed loop: the benchmark's clients; None: an open loop
    full_attention_only: bool
    gpu_memory_gb: float | None = None
    kv_bytes_per_token: float = 0.0  # one GPU's, at the model's dtype
    resident_tokens: int | None = None  # resident_token_bound of the workload; None: unknown
    kv_element_bytes: float = 2.0  # the element size kv_bytes_per_token counts

    @classmethod
    def of(
        cls, space: SearchSpace, model: ModelMemory | None, gpu_memory_gb: float | None = None
    ) -> SameRunRules:
        bench = space.bench
        closed = bench.request_rate is None and bench.concurrency is not None
        clients = int(bench.concurrency) if closed and bench.concurrency else None
        bound = None
        if clients is not None and bench.api != "chat":
            workload = json.dumps(space.workload, sort_keys=True, default=str)
            bound = _workload_bound(workload, bench.warmup_requests, clients)
        return cls(
            clients=clients,
            full_attention_only=model is not None and model.full_attention_only,
            gpu_memory_gb=gpu_memory_gb,
            kv_bytes_per_token=(
                model.sharded(tensor_parallel(space.fixed_flags)).kv_bytes_per_token
                if model is not None
                else 0.0
            ),
            resident_tokens=bound,
            kv_element_bytes=model.kv_element_bytes if model is not None else 2.0,
        )

    def _kv_bytes(self, flags: Mapping[str, Any]) -> float:
        """One token's KV bytes on one GPU under the flags' --kv-cache-dtype."""
        width = kv_element_bytes(flags.get("kv_cache_dtype"), self.kv_element_bytes)
        return self.kv_bytes_per_token * width / self.kv_element_bytes

    def _applies(self, flags: Mapping[str, Any]) -> bool:
        return (
            self.clients is not None
            and self.full_attention_only
            and flags.get("speculative_algorithm") is None
            and int(flags.get("dp_size") or 1) <= 1  # the cap is split between DP workers
        )

    def _pool_change(self, new: Launch, old: Launch, kv_bytes: float) -> tuple[float, bool] | None:
        """How many tokens smaller the proposal's pool can be than the measured one, and whether
        the two pools can differ at all; None when that cannot be told."""
        if new.fraction is not None and old.fraction is not None:
            if new.fraction == old.fraction:
                return 0.0, False
            if not self.gpu_memory_gb or kv_bytes <= 0:
                return None
            # The pool is what is free after the weights less (1 - fraction) of what was free
            # before them, which is at most the GPU's memory.
            gone = (old.fraction - new.fraction) * self.gpu_memory_gb * GIB
            return gone / kv_bytes, True
        if new.fraction is None and old.fraction is None:
            # sglang derives the fraction from a reserve that grows with the configured graph
            # limit: a smaller limit buys pool with memory the graphs may still need, so the
            # two launches' memory cannot be compared.
            if new.graphs and new.graph_limit != old.graph_limit:
                return None
            return 0.0, False
        return None

    def repeats(
        self,
        proposal: Mapping[str, Any],
        measured: Mapping[str, Any],
        capacity: Mapping[str, Any] | None = None,
        launched: Sequence[Launched] = (),
    ) -> str | None:
        """Why a launch of `proposal` would be the run `measured` (whose launch worked, whose
        server reported `capacity`) already measured; None when it may differ. `launched`:
        (number, flags, capacity) of trials whose launch worked, any of which may show that the
        proposal's memory starts when the measured launch had less."""
        keys = set(proposal) | set(measured)
        differ = {k for k in keys if proposal.get(k) != measured.get(k)}
        if not differ or not differ <= set(MAY_DIFFER) or not self._applies(proposal):
            return None
        assert self.clients is not None
        new, old = Launch.of(proposal, self.gpu_memory_gb), Launch.of(measured, self.gpu_memory_gb)
        pool_old = int((capacity or {}).get("max_total_num_tokens") or 0)
        change = self._pool_change(new, old, self._kv_bytes(proposal))
        if change is None:
            return None
        drop, pools_differ = change
        pool_new = pool_old - drop
        # A smaller host pool (HiCache's is the device pool x the ratio) is never read either
        # when the device pool holds everything: nothing is evicted to it or loaded from it.
        pools_differ = pools_differ or HOST in differ
        if pools_differ and (
            self.resident_tokens is None
            or not pool_old
            or min(pool_new, pool_old) < _BOUND_SLACK * self.resident_tokens
        ):
            return None
        slots = []
        for launch, pool in ((new, pool_new), (old, pool_old)):
            slot = _request_slots(launch, int(pool))
            if slot is None:
                return None
            slots.append(slot)
        # As many requests run at once in both: all the clients, or the same number of slots
        # with the rest queued alike.
        running = min(self.clients, slots[0])
        if running != min(self.clients, slots[1]):
            return None
        padded_new = new.padded(slots[0], running)
        if padded_new is None or padded_new != old.padded(slots[1], running):
            return None
        # No more memory of any kind than a launch that started: the measured one, or another.
        starts = None
        if self._needs_no_more(proposal, slots[0], measured, slots[1]):
            starts = -1
        for number, flags, reported in launched:
            slot = (reported or {}).get(CAP)
            if (
                starts is None
                and isinstance(slot, int | float)
                and self._needs_no_more(proposal, slots[0], flags, int(slot))
            ):
                starts = number
        if starts is None:
            return None
        return self._reason(differ, proposal, measured, pools_differ, running, starts)

    def _needs_no_more(
        self, proposal: Mapping[str, Any], slots: int, other: Mapping[str, Any], other_slots: int
    ) -> bool:
        """Does the proposal need no more GPU or host memory than `other` did? The same flags
        but those that size memory (and the queue order, which sizes nothing), each of those at
        most the other's: the cap, the fraction, the HiCache ratio, the chunk size (activations)
        and the decode graphs captured (the limit cut at the request slots)."""
        sized = (CAP, MEM, HOST, CHUNK)
        keys = (set(proposal) | set(other)) - {*sized, GRAPH, "schedule_policy"}
        if any(proposal.get(k) != other.get(k) for k in keys):
            return False
        for name in sized:
            mine, theirs = proposal.get(name), other.get(name)
            if (mine is None) != (theirs is None) or (mine is not None and mine > theirs):
                return False
        new, old = Launch.of(proposal, self.gpu_memory_gb), Launch.of(other, self.gpu_memory_gb)
        if not new.graphs:
            return True
        if new.graph_limit is None or old.graph_limit is None:
            return False
        return min(new.graph_limit, slots) <= min(old.graph_limit, other_slots)

    def _reason(
        self,
        differ: set[str],
        new: Mapping[str, Any],
        old: Mapping[str, Any],
        pools_differ: bool,
        running: int,
        starts: int,
    ) -> str:
        said = ", ".join(
            f"{_LABELS[k]} {_value(new.get(k))} vs {_value(old.get(k))}"
            for k in MAY_DIFFER
            if k in differ
        )
        if running == self.clients:
            why = [f"{self.clients} clients run at once under both"]
        else:
            why = [f"{running} of {self.clients} clients run at once under both, the rest queue"]
        if GRAPH in differ or CAP in differ:
            why.append("their decode batches pad to the same CUDA graphs")
        if pools_differ:
            why.append(
                f"both KV pools hold the {self.resident_tokens:,} tokens the workload can ever "
                "put in them (nothing is evicted)"
            )
        else:
            why.append("the pools do not depend on it")
        if starts >= 0:
            why.append(f"trial {starts} started with at least as much memory")
        return f"{said}: {', '.join(why)}"

    def capacity(
        self, capacity: Mapping[str, Any], flags: Mapping[str, Any], measured: Mapping[str, Any]
    ) -> dict[str, Any]:
        """What the repeat's server would report: the measured capacity with the repeat's
        smaller pool, when its flags make one, and its own cap applied (sglang's
        min(cap, tokens / 2))."""
        out = dict(capacity)
        pool = out.get("max_total_num_tokens")
        change = self._pool_change(
            Launch.of(flags, self.gpu_memory_gb),
            Launch.of(measured, self.gpu_memory_gb),
            self._kv_bytes(flags),
        )
        if isinstance(pool, int | float) and change and change[0]:
            pool = int(pool - change[0])
            out["max_total_num_tokens"] = pool
        cap, reported = flags.get(CAP), out.get(CAP)
        if cap is not None and isinstance(reported, int | float):
            out[CAP] = min(int(reported), int(cap))
        return out


def _value(value: Any) -> str:
    return "unset" if value is None else str(value)


def _request_slots(launch: Launch, pool: int) -> int | None:
    """The request slots sglang 0.5.23 resolves for a full-attention model: min(cap, tokens //
    2); without a cap min(its estimate of at least 2048, tokens // 2), of which only that lower
    bound is known here, so it is returned only when the graph list is not cut by it (the one
    place the rule reads the exact count). None when it cannot be told."""
    if launch.cap is not None:
        return min(launch.cap, pool // 2) if pool else launch.cap
    if not pool:
        return None
    floor = min(2048, pool // 2)
    if launch.graphs and (launch.graph_limit is None or floor < launch.graph_limit):
        return None
    return floor
