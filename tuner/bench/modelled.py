"""Measuring in modelled time: the simulator's stamps, or the client's clock x the time scale.

Against a real server (or with `use_server_time=False`), `ModelClock` converts the client's wall
clock into modelled seconds (x the server's time scale, 1 on a real server); see
docs/simulated-time.md for the rest.

When `/server_info` says `sim_modelled_time`, every streamed chunk carries the modelled time the
simulator produced its tokens and the request's modelled arrival (`Stamps` reads them), and the
runner dispatches by finishes (`ModelledDispatch`): a finish frees a slot, and the next request
goes out due at that finish's modelled time, claiming the hold the simulator keeps there, so the
client's own speed never becomes modelled time. A request that still reaches the simulator after
it was due (a client starved past the hold's timeout) means the run is not the configuration's:
the run ends with `BenchLagError`, never with figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.errors import UserError

if TYPE_CHECKING:
    from tuner.bench.client import BenchClient, RequestRecord
    from tuner.bench.runner import BenchConfig

# Modelled seconds a request may reach the simulator after it was due before the run counts as
# one the client could not keep up with.
LATE_TOLERANCE_S = 0.001
# Open loop against the simulator: requests are sent ahead of their modelled time (the simulator
# queues them until then), at most this many in flight; beyond it a request waits for a finish.
MAX_AHEAD = 256


class BenchLagError(UserError):
    """The simulator's clock ran ahead of the client: the figures would not be the
    configuration's, so the run is not a measurement."""


def with_sim(body: dict[str, Any], sim: dict[str, Any]) -> dict[str, Any]:
    """A request body with the simulator-only `sim` object (and the request id it names)."""
    return {**body, "rid": sim["rid"], "sim": {k: v for k, v in sim.items() if k != "rid"}}


def failure_message(summary: Mapping[str, Any]) -> str:
    """Why a benchmark recorded nothing, from the summary of a failed run (its `error`)."""
    error = str(summary.get("error") or "every request failed")
    lagged = f"{BenchLagError.__name__}: "
    if error.startswith(lagged):
        return error[len(lagged) :]
    return f"no request completed: {error}"


def lag_reason(late: list[RequestRecord]) -> str:
    worst = max(r.late_s for r in late) * 1000.0
    return (
        f"not a measurement: {len(late)} request(s) reached the simulator after the "
        f"modelled time they were due (up to {worst:.0f} ms late): the client could not keep "
        "up with the simulated clock (an overloaded host); run it again on a quieter host"
    )


class ModelClock:
    """Modelled seconds since `restart()`: wall time multiplied by the server's time scale."""

    __slots__ = ("_origin", "scale")

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale
        self._origin = time.perf_counter()

    def restart(self) -> None:
        self._origin = time.perf_counter()

    def now(self) -> float:
        return (time.perf_counter() - self._origin) * self.scale

    def to_wall(self, modelled_s: float) -> float:
        return modelled_s / self.scale


class Stamps:
    """The simulator's stamps on one streamed request: its arrival, the latest chunk's time."""

    __slots__ = ("arrival", "late", "latest")

    def __init__(self) -> None:
        self.arrival: float | None = None
        self.latest = 0.0
        self.late = 0.0

    def read(self, event: dict[str, Any], generate: bool) -> float | None:
        """The event's modelled time since the arrival (None: it carries no stamp)."""
        if generate:
            meta = event.get("meta_info") or {}
            stamp = {k[4:]: v for k, v in meta.items() if k[:4] == "sim_"}
        else:
            stamp = event.get("sim") or {}
        if self.arrival is None and "arrival" in stamp:
            self.arrival = float(stamp["arrival"])
            self.late = float(stamp.get("late", 0.0))
        if "time" in stamp and self.arrival is not None:
            self.latest = float(stamp["time"])
            return self.latest - self.arrival
        return None

    def finish(self, record: RequestRecord, origin: float) -> None:
        """Start and end of the record, in modelled seconds since the run's `origin`."""
        if self.arrival is None:
            # refused, timed out or cut off before any stamp: a failed request that takes no
            # part in the run's modelled duration
            record.error = record.error or "the simulator sent no modelled timestamps"
            record.start_s = record.end_s = 0.0
            return
        record.start_s = self.arrival - origin
        record.end_s = self.latest - origin
        record.late_s = self.late


class ModelledDispatch:
    """The runner's dispatch against the simulator (a mixin of `tuner.bench.runner._Run`)."""

    cfg: BenchConfig
    client: BenchClient
    rate: float | None
    total: int
    ready: deque[tuple[int, int, float]]
    finished: asyncio.Event
    in_flight: set[asyncio.Task[None]]
    run_id: str
    free: int
    next_index: int
    due: list[float]
    t0: float

    async def _one(
        self, index: int, conv_index: int, turn_index: int, sim: dict[str, Any] | None
    ) -> None:
        raise NotImplementedError

    async def _start_modelled(self) -> None:
        """Hold the simulator's clock, send the first requests, all due at that moment."""
        gaps = np.zeros(self.total)
        if self.rate is not None and self.total > 1:
            rng = np.random.default_rng(self.cfg.workload.seed)
            poisson = self.cfg.arrival == "poisson"
            for i in range(1, self.total):
                gaps[i] = rng.exponential(1.0 / self.rate) if poisson else 1 / self.rate
        first = min(self.free, len(self.ready), self.total)
        key = f"{self.run_id}-start"
        held = await self.client.sim_call("/sim/hold", {"key": key, "count": max(first, 1)})
        self.t0 = float(held["t"])
        self.client.origin = self.t0
        self.due = (self.t0 + np.cumsum(gaps)).tolist()
        self.ready = deque((c, t, self.t0) for c, t, *_ in self.ready)
        self._pump(key, self.t0, claims=max(first, 1))

    def _pump(self, key: str | None, t: float | None, claims: int = 1) -> None:
        """Send what can go now: a free slot and a ready turn each. The first `claims`
        requests sent claim the hold `key` (the finish that freed their slot, or the start);
        a hold not fully claimed is released, so the simulator's clock goes on."""
        claimed = 0
        while (
            self.next_index < self.total
            and self.free > 0
            and self.ready
            and not self.finished.is_set()
        ):
            conv, turn, ready_t = self.ready.popleft()
            index = self.next_index
            self.next_index += 1
            self.free -= 1
            at = max(self.due[index], ready_t, t if t is not None else 0.0)
            sim: dict[str, Any] = {
                "rid": f"{self.run_id}-{index}",
                "after": key if claimed < claims else None,
                "at": at if t is not None else None,
                "hold": True,
            }
            claimed += 1
            self._spawn(self._one(index, conv, turn, sim))
        if key is not None and claimed < claims:
            self._spawn(self._release_holds([key]))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    async def _release_holds(self, keys: list[str] | None = None) -> None:
        """Release holds by key, or every hold of this run."""
        body: dict[str, Any] = {"keys": keys} if keys is not None else {"prefix": self.run_id}
        with contextlib.suppress(Exception):
            await self.client.sim_call("/sim/release", body)

    def _after_finish(self, record: RequestRecord, sim: dict[str, Any] | None) -> None:
        """A request finished: its slot is free; send what follows, claiming its hold."""
        self.free += 1
        held = sim is not None and record.success and record.end_s > 0
        self._pump(sim["rid"] if held and sim else None, self.t0 + record.end_s if held else None)
