"""An open loop's capacity: the highest request rate at which a TTFT tail stays within its limit.

A closed loop's throughput says how fast a full server works; an open loop (Poisson arrivals,
`--goal capacity`) breaks its TTFT limit well before that, when arrivals bunch and a request
waits. The estimate (estimate.py) gives the parts, this module the queueing:

    load = OpenLoopLoad(slots=19, prefill_s=0.3, base_s=0.1, decode_s=lambda n: 12 + 0.05 * n)
    sustained_rate(load, limit_s=3.0, quantile=0.99)      # req/s

At rate r a request waits for two things before its first token:

- the GPU's prefill queue: sglang runs a waiting prefill before the next decode step, so the
  prefills form a single-server queue with utilisation rho = r x prefill_s, and every decode
  step is stretched by 1 / (1 - rho);
- a free running slot: the server runs at most `slots` requests at once (sglang's
  max_running_requests), each for its whole output, E2E = base + decode_s(n) / (1 - rho) at n
  requests running, n = r x E2E by Little's law; the slots form a c-server queue (Erlang C).

Each queue's wait is taken as exponential past the chance of waiting at all, with the
heavy-traffic mean of a G/G/c queue (Allen-Cunneen: the M/M/c wait x (Ca^2 + Cs^2) / 2, Ca^2 =
1 for Poisson arrivals; Cs^2 = 0 for the fixed lengths of a benchmark's service), and the chance
that the first token takes longer than the limit is the sum of the two tails (a union bound:
conservative where both queues are busy). The rate is searched by bisection: the tail grows with
the rate, so the rate where it reaches 1 - quantile is the capacity.

Nothing here is fitted or taken from any server: queueing formulas over the estimate's parts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

# Bisection steps of the rate search: the bracket narrows by 2**-20 of its width.
_SEARCH_STEPS = 20
# Fixed-point rounds for the running batch at a rate (E2E depends on the batch it runs in).
_ROUNDS = 6


@dataclass(frozen=True)
class OpenLoopLoad:
    """What one request costs the server, from the estimate."""

    slots: int  # requests the server runs at once
    prefill_s: float  # GPU time of one request's prefill (its uncached prompt tokens)
    base_s: float  # TTFT with no queue: the decode step under way, then the prefill
    decode_s: Callable[[float], float]  # GPU time of one request's decode at n running
    service_cv2: float = 0.0  # squared coefficient of variation of a request's service time

    def latencies(self, rate: float) -> tuple[float, float, float]:
        """(prefill utilisation, requests running, E2E seconds) at `rate` req/s."""
        rho = rate * self.prefill_s
        if rho >= 1.0:
            return rho, float(self.slots), math.inf
        running = 1.0
        e2e = self.base_s + self.decode_s(running) / (1.0 - rho)
        for _ in range(_ROUNDS):
            running = min(max(rate * e2e, 1.0), float(self.slots))
            e2e = self.base_s + self.decode_s(running) / (1.0 - rho)
        return rho, running, e2e

    def ttft_tail(self, rate: float, limit_s: float) -> float:
        """The chance that a request's first token takes longer than `limit_s` at `rate`."""
        if limit_s <= self.base_s:
            return 1.0
        rho, _running, e2e = self.latencies(rate)
        if not math.isfinite(e2e):
            return 1.0
        spare = limit_s - self.base_s
        variability = (1.0 + self.service_cv2) / 2.0
        tail = 0.0
        if rho > 0:  # M/G/1: waits with chance rho, mean prefill_s x variability / (1 - rho)
            tail += rho * math.exp(-spare * (1.0 - rho) / (self.prefill_s * variability))
        offered = rate * e2e
        if offered >= self.slots:
            return 1.0
        waits = erlang_c(self.slots, offered)
        drain = (self.slots - offered) / e2e  # the rate at which waiting requests get a slot
        tail += waits * math.exp(-spare * drain / variability)
        return min(tail, 1.0)


def erlang_c(servers: int, offered: float) -> float:
    """The chance an arrival waits in an M/M/c queue with `servers` and `offered` load (Erlangs).

    Erlang B by its recurrence (stable for large c), then C = B / (1 - a/c (1 - B))."""
    if offered <= 0:
        return 0.0
    if offered >= servers:
        return 1.0
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = offered * blocking / (k + offered * blocking)
    utilisation = offered / servers
    return blocking / (1.0 - utilisation * (1.0 - blocking))


def sustained_rate(load: OpenLoopLoad, limit_s: float, quantile: float) -> float:
    """The highest rate (req/s) at which the TTFT at `quantile` stays within `limit_s`."""
    allowed = 1.0 - quantile
    if load.slots < 1 or load.ttft_tail(0.0, limit_s) > allowed:
        return 0.0
    # No rate beyond the prefill queue's saturation or the slots' service rate is sustainable.
    ceiling = 1.0 / load.prefill_s if load.prefill_s > 0 else math.inf
    ceiling = min(ceiling, load.slots / max(load.base_s + load.decode_s(load.slots), 1e-9))
    low, high = 0.0, ceiling
    for _ in range(_SEARCH_STEPS):
        middle = (low + high) / 2
        if load.ttft_tail(middle, limit_s) <= allowed:
            low = middle
        else:
            high = middle
    return low
