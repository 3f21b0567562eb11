"""Dispatch in modelled time: how a pass sends its requests to the simulator, and its lag check.

When `/server_info` says `sim_modelled_time`, every streamed chunk carries the modelled time the
simulator produced its tokens and the request's modelled arrival (the client's `Stamps` reads
them), and the runner dispatches by finishes (`ModelledDispatch`): a finish frees a slot, and
the next request goes out due at that finish's modelled time, claiming the hold the simulator
keeps there, so the client's own speed never becomes modelled time. A request that still
reaches the simulator after it was due (a client starved past the hold's timeout) means the run
is not the configuration's: the run ends with `BenchLagError`, never with figures
(`failure_message` says so from a failed run's summary). See docs/simulated-time.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from tuner.bench.client import BenchClient
from tuner.bench.dispatch import InFlight, ReadyTurns, Send, SimFields
from tuner.bench.records import RequestRecord
from tuner.errors import UserError

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


class ModelledDispatch:
    """Sends by finishes in the simulator's modelled time, claiming the hold at each finish."""

    def __init__(
        self,
        client: BenchClient,
        turns: ReadyTurns,
        send: Send,
        ended: asyncio.Event,
        *,
        total: int,
        gaps: list[float] | None,
        concurrency: int | None,
    ) -> None:
        self._client = client
        self._turns = turns
        self._send = send
        self._ended = ended
        self._total = total
        self._gaps = gaps
        self._run_id = uuid.uuid4().hex[:12]
        self._free = concurrency or MAX_AHEAD
        self._next_index = 0
        self._due: list[float] = []  # modelled time each request is due, on the simulator's clock
        self._t0 = 0.0  # the simulator's modelled time the pass began
        self._in_flight = InFlight()

    async def start(self) -> None:
        """Hold the simulator's clock, send the first requests, all due at that moment."""
        first = min(self._free, len(self._turns), self._total)
        key = f"{self._run_id}-start"
        held = await self._client.sim_call("/sim/hold", {"key": key, "count": max(first, 1)})
        self._t0 = float(held["t"])
        self._client.origin = self._t0
        offsets = np.zeros(self._total) if self._gaps is None else np.cumsum(self._gaps)
        self._due = (self._t0 + offsets).tolist()
        self._pump(key, self._t0, claims=max(first, 1))

    def done(self, record: RequestRecord, sim: SimFields) -> None:
        """A request finished: its slot is free; send what follows, claiming its hold."""
        self._free += 1
        held = sim is not None and record.success and record.end_s > 0
        self._pump(sim["rid"] if held and sim else None, self._t0 + record.end_s if held else None)

    async def stop(self) -> None:
        await self._in_flight.cancel()
        await self._release_holds()

    def _pump(self, key: str | None, t: float | None, claims: int = 1) -> None:
        """Send what can go now: a free slot and a ready turn each. The first `claims`
        requests sent claim the hold `key` (the finish that freed their slot, or the start);
        a hold not fully claimed is released, so the simulator's clock goes on."""
        claimed = 0
        while (
            self._next_index < self._total
            and self._free > 0
            and self._turns
            and not self._ended.is_set()
        ):
            conv, turn, ready_s = self._turns.pop()
            index = self._next_index
            self._next_index += 1
            self._free -= 1
            at = max(self._due[index], self._t0 + ready_s, t if t is not None else 0.0)
            sim: dict[str, Any] = {
                "rid": f"{self._run_id}-{index}",
                "after": key if claimed < claims else None,
                "at": at if t is not None else None,
                "hold": True,
                # a turn that continues a conversation takes its own finish's place in the
                # simulator's queue; the others go by the order drawn here
                # (Scheduler.order_arrivals), however the connections deliver them
                "order": index if turn == 0 else None,
            }
            claimed += 1
            self._in_flight.spawn(self._send(index, conv, turn, sim))
        if key is not None and claimed < claims:
            self._in_flight.spawn(self._release_holds([key]))

    async def _release_holds(self, keys: list[str] | None = None) -> None:
        """Release holds by key, or every hold of this run."""
        body: dict[str, Any] = {"keys": keys} if keys is not None else {"prefix": self._run_id}
        with contextlib.suppress(Exception):
            await self._client.sim_call("/sim/release", body)
