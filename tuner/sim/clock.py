"""Modelled time: advanced by the scheduler, paced to at most K x wall time.

The scheduler owns modelled time: it moves it forward by the duration the performance model
gives each step, and sleeps so that modelled time runs at most K (the time scale) times faster
than the wall clock. When the host cannot keep up (the process was starved of CPU, or a step
took longer to compute than it models), modelled time runs slower instead of jumping: the clock
is re-anchored at the scheduler's position and the shortfall is added to ``behind_wall_s``. So
the host's speed changes how long a run takes, never what it measures.

``cap`` is where the scheduler stands: while it computes or sleeps through a step ending at
``t_end``, or waits for a client at a hold, nothing may be stamped later than that (an HTTP
handler that runs late, after a stall, stamps its request with the modelled time the scheduler
has reached, not with where the wall clock would put it).

The headless oracle uses the same scheduler with ``VirtualClock``: no pacing, no sleeping.
"""

from __future__ import annotations

import time


class Clock:
    def __init__(self, scale: float) -> None:
        self.scale = scale
        self._wall0 = time.monotonic()
        self._model0 = 0.0
        self.cap: float | None = None
        self.behind_wall_s = 0.0  # wall seconds modelled time ran slower than K x wall

    def paced(self) -> float:
        """Where modelled time would be if it ran at exactly K x wall from its last anchor."""
        return self._model0 + (time.monotonic() - self._wall0) * self.scale

    def now(self) -> float:
        """Modelled seconds since the server started (never past the scheduler's position)."""
        p = self.paced()
        cap = self.cap
        return p if cap is None or p < cap else cap

    def wall_at(self, model_t: float) -> float:
        """The time.monotonic() value at which paced modelled time reaches ``model_t``."""
        return self._wall0 + (model_t - self._model0) / self.scale

    def wall_delay(self, model_t: float) -> float:
        return max(0.0, self.wall_at(model_t) - time.monotonic())

    def settle(self, model_t: float, count: bool = True) -> None:
        """The scheduler stands at ``model_t``; if paced time ran ahead, slow down to it.

        ``count``: add the shortfall to ``behind_wall_s`` (False for waits that are not the
        host's fault, e.g. a hold waiting for a client's next request).
        """
        now_wall = time.monotonic()
        ahead = self._model0 + (now_wall - self._wall0) * self.scale - model_t
        if ahead > 0:
            if count:
                self.behind_wall_s += ahead / self.scale
            self._model0 = model_t
            self._wall0 = now_wall


class VirtualClock:
    """The headless clock: modelled time is whatever the scheduler says; nothing waits."""

    scale = float("inf")
    behind_wall_s = 0.0

    def __init__(self) -> None:
        self.t = 0.0
        self.cap: float | None = None

    def now(self) -> float:
        return self.t

    def paced(self) -> float:
        return self.t

    def wall_at(self, model_t: float) -> float:
        """Every modelled time is reached at once: nothing waits on this clock."""
        return time.monotonic()

    def wall_delay(self, model_t: float) -> float:
        return 0.0

    def settle(self, model_t: float, count: bool = True) -> None:
        self.t = max(self.t, model_t)
