"""Holds of modelled time: how a closed-loop client keeps the simulator from running ahead of it.

A request sent with ``hold`` keeps modelled time from moving past its finish until the client's
next request (which names it in ``after``) arrives, or the client releases it; that request's
arrival is then the finish time. So a closed loop measures the same figures however slowly the
client's host runs. A hold lapses after ``timeout_s`` wall seconds (a client that went away).

    >>> from tuner.sim.clock import VirtualClock
    >>> holds = Holds(VirtualClock(), timeout_s=5.0)
    >>> holds.hold("r1", t=2.5)
    2.5
    >>> holds.claim("r1").t, holds.claim("r1")
    (2.5, None)

Requests that claim holds of the same moment reach the server in whatever order the client's
connections deliver them; each hold's ``seq`` (the order the finishes were made in) lets the
scheduler queue them in one order however the client's host ran (``Scheduler.order_arrivals``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from tuner.sim.clock import Clock, VirtualClock

# wall seconds a hold waits for the client's next request before it lets modelled time go on
HOLD_TIMEOUT_S = 5.0


@dataclass
class Hold:
    """One held moment: modelled time ``t``, the requests still to claim it, its wall deadline."""

    t: float
    count: int
    deadline: float  # time.monotonic() at which it lapses
    seq: int = 0  # the order the holds were made in (the scheduler's order of finishes)


class Holds:
    """The open holds of one scheduler, and what waiting at them cost."""

    def __init__(
        self,
        clock: Clock | VirtualClock,
        timeout_s: float = HOLD_TIMEOUT_S,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.clock = clock
        self.timeout_s = timeout_s
        self.on_change = on_change or (lambda: None)  # wakes a paced driver that waits
        self.open: dict[str, Hold] = {}
        self.wait_s = 0.0  # wall seconds spent waiting for clients at holds
        self.timeouts = 0
        # Prefixes released as a whole: a client ends a run that way. A request of that run
        # finishing afterwards (its client had cut it off, and the simulator had not noticed
        # yet) must not hold time for a client that is gone, or the next run waits timeout_s.
        self.ended: deque[str] = deque(maxlen=64)
        self._made = 0

    def hold(self, key: str, count: int = 1, t: float | None = None) -> float:
        """Keep modelled time at ``t`` (now) until ``count`` requests claim ``key``."""
        t = self.clock.now() if t is None else t
        if any(key.startswith(prefix) for prefix in self.ended):
            return t
        self._made += 1
        self.open[key] = Hold(t, max(1, count), time.monotonic() + self.timeout_s, self._made)
        if self.clock.cap is None or self.clock.cap > t:
            self.clock.cap = t  # idle: modelled time stops here until the hold is resolved
        return t

    def held_at(self) -> float | None:
        """The earliest held moment, if any."""
        return min((h.t for h in self.open.values()), default=None)

    def claim(self, key: str) -> Hold | None:
        """A request names ``key`` in ``after``: the hold whose time it arrives at (None: no
        such hold)."""
        hold = self.open.get(key)
        if hold is None:
            return None
        hold.count -= 1
        if hold.count <= 0:
            del self.open[key]
            self.on_change()
        return hold

    def release(self, keys: list[str] | None = None, prefix: str | None = None) -> int:
        """Drop the holds named in ``keys`` or starting with ``prefix``; how many went. Holds
        under a released prefix are not made any more (``ended``)."""
        if prefix is not None:
            self.ended.append(prefix)
        gone = [
            k
            for k in self.open
            if (keys is not None and k in keys) or (prefix is not None and k.startswith(prefix))
        ]
        for k in gone:
            del self.open[k]
        if gone:
            self.on_change()
        return len(gone)

    def due(self, t: float) -> list[Hold]:
        """Holds at or before modelled time ``t``: a round may not start past them."""
        return [h for h in self.open.values() if h.t <= t + 1e-12]

    def expire(self) -> None:
        """Drop the holds whose wall deadline has passed (their client went away)."""
        now = time.monotonic()
        for key in [k for k, h in self.open.items() if h.deadline <= now]:
            del self.open[key]
            self.timeouts += 1
