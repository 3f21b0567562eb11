"""Configurations whose flags differ but whose run cannot: one launch answers for both.

    rules = SameRunRules.of(space, model_memory)
    reason = rules.repeats(proposal_flags, measured_flags)   # None: they may differ

Exactly one rule is applied; docs/same-run.md gives the sglang source for it, and for the rules
considered and rejected (a chunked-prefill size above the longest prompt, radix cache, HiCache and
Mamba-cache choices without prefix reuse: each changes memory, batching or the work done).

The running cap above a closed loop's client count. With C clients and no request rate, at most
C requests are ever in the server, so a `--max-running-requests` of C or more never refuses one.
What the cap still changes in sglang 0.5.23, and why the rule holds anyway:

- the KV pool: on a model whose layers are all full attention, sglang sizes it from the memory
  budget before it resolves the cap, which then only bounds the request slots (so the pool, and
  with it the KV tokens, do not depend on it). Models with linear-attention state, sliding-window
  or compressed (MLA) KV size pools from the cap: the rule needs `full_attention_only`, and no
  speculative decoding (its reserves are sized per running request);
- the CUDA graphs: decode graphs are captured for sglang's batch-size list clamped to the request
  slots, with the slot count itself added when the list goes beyond it. A batch of b <= C requests
  is padded to the smallest captured size >= b; when both caps reach the smallest listed size >= C,
  every such batch pads alike. With CUDA graphs off there is nothing to pad;
- memory outside the pools: more graphs and a larger request table for the larger cap. A
  proposal is a repeat only of a measured trial whose cap was at least as large and whose launch
  worked, so the repeat never needs more of that memory than a launch that started.

Everything but the cap must be equal. The repeat's `max_running_requests` is the smaller of what
the measured server reported and its own cap (sglang takes the smaller of the cap and half the KV
tokens, and the KV tokens are the same).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuner.engines.model_config import ModelMemory
from tuner.space.model import SearchSpace

CAP = "max_running_requests"


def decode_graph_sizes_from(clients: int) -> int:
    """The smallest batch size sglang 0.5.23 lists for decode CUDA graphs (without speculation)
    that is >= `clients`: 1, 2, 4, 8, 12, then 16..256 by 8, 272..496 by 16, 512 up by 32."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16)]
    for size in sizes:
        if size >= clients:
            return size
    return 512 + -(-(clients - 512) // 32) * 32


@dataclass(frozen=True)
class SameRunRules:
    """The rules for one study: its closed loop's client count and what the model is."""

    clients: int | None  # closed loop: the benchmark's clients; None: an open loop
    full_attention_only: bool

    @classmethod
    def of(cls, space: SearchSpace, model: ModelMemory | None) -> SameRunRules:
        bench = space.bench
        closed = bench.request_rate is None and bench.concurrency is not None
        return cls(
            clients=int(bench.concurrency) if closed and bench.concurrency else None,
            full_attention_only=model is not None and model.full_attention_only,
        )

    def cap_floor(self, flags: Mapping[str, Any]) -> int | None:
        """The cap from which on every cap is the same run, for these flags; None: no rule."""
        if self.clients is None or not self.full_attention_only:
            return None
        if flags.get("speculative_algorithm") is not None:
            return None
        if int(flags.get("dp_size") or 1) > 1:
            return None  # the cap is split between data-parallel workers
        if flags.get("disable_cuda_graph") or flags.get("disable_cuda_graph_padding"):
            return self.clients  # no padding to captured sizes (or every size captured)
        return decode_graph_sizes_from(self.clients)

    def repeats(self, proposal: Mapping[str, Any], measured: Mapping[str, Any]) -> str | None:
        """Why a launch of `proposal` would be the run `measured` (whose launch worked) already
        measured; None when it may differ."""
        new, old = proposal.get(CAP), measured.get(CAP)
        if new is None or old is None or new == old:
            return None
        rest = {k: v for k, v in proposal.items() if k != CAP}
        if rest != {k: v for k, v in measured.items() if k != CAP}:
            return None
        floor = self.cap_floor(proposal)
        if floor is None or not old >= new >= floor:
            return None
        return (
            f"running cap {new} vs {old}: {self.clients} clients never fill either, both reach "
            f"the CUDA-graph size {floor}, and the pools do not depend on it"
        )


def repeat_capacity(capacity: Mapping[str, Any], flags: Mapping[str, Any]) -> dict[str, Any]:
    """What the repeat's server would report: the measured capacity, its cap applied."""
    out = dict(capacity)
    cap, reported = flags.get(CAP), out.get(CAP)
    if cap is not None and isinstance(reported, int | float):
        out[CAP] = min(int(reported), int(cap))
    return out
