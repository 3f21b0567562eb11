"""Modelled time: wall time since start multiplied by the time scale K.

Everything the simulator reports (its request records, /metrics, throughput in /server_info,
log lines) is in modelled seconds, so figures do not depend on K.
"""

from __future__ import annotations

import time


class Clock:
    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.wall0 = time.monotonic()

    def now(self) -> float:
        """Modelled seconds since the server started."""
        return (time.monotonic() - self.wall0) * self.scale

    def wall_at(self, model_t: float) -> float:
        """The time.monotonic() value at which modelled time reaches ``model_t``."""
        return self.wall0 + model_t / self.scale

    def wall_delay(self, model_t: float) -> float:
        return max(0.0, self.wall_at(model_t) - time.monotonic())
