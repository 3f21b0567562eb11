"""Dispatch on the client's wall clock: how a pass sends its requests to a real sglang server.

One dispatcher task releases request i at the absolute wall time of the arrival gaps before it
(converted from modelled seconds by the client's `ModelClock`, x1 on a real server), so that a
slow iteration never drifts the rate; a semaphore of `concurrency` slots caps the requests in
flight, and a finish frees its slot. The simulator with `use_server_time=False` is dispatched
this way too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from tuner.bench.client import ModelClock
from tuner.bench.dispatch import InFlight, ReadyTurns, Send, SimFields
from tuner.bench.records import RequestRecord


class WallClockDispatch:
    """Releases requests at wall-clock times, at most `concurrency` in flight (None: no cap)."""

    def __init__(
        self,
        clock: ModelClock,
        turns: ReadyTurns,
        send: Send,
        fail: Callable[[BaseException], None],
        *,
        total: int,
        gaps: list[float] | None,
        concurrency: int | None,
    ) -> None:
        self._clock = clock
        self._turns = turns
        self._send = send
        self._fail = fail
        self._total = total
        self._gaps = gaps
        self._slots = asyncio.Semaphore(concurrency) if concurrency else None
        self._in_flight = InFlight()  # the releasing task, then each request it released

    async def start(self) -> None:
        self._in_flight.spawn(self._release())

    def done(self, record: RequestRecord, sim: SimFields) -> None:
        if self._slots is not None:
            self._slots.release()

    async def stop(self) -> None:
        await self._in_flight.cancel()

    async def _release(self) -> None:
        try:
            gaps = self._gaps
            next_release = time.perf_counter()
            for index in range(self._total):
                if gaps is not None and index > 0:
                    # Absolute release times, so that slow iterations do not drift the rate.
                    next_release += self._clock.to_wall(gaps[index])
                    delay = next_release - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                if self._slots is not None:
                    await self._slots.acquire()
                await self._turns.wait()
                conv, turn, _ = self._turns.pop()
                self._in_flight.spawn(self._send(index, conv, turn, None))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a bug must end the run, not hang it
            self._fail(exc)
