"""The served simulator's driver: the scheduler's rounds paced to at most K x wall time.

It sleeps through each round (arrivals wait for it, as on a GPU) rather than waking up per
decode step: a decode round is a run of steps up to the next event, and the driver wakes only
to stream tokens, at most every flush interval (the first and last token at once), like
``--stream-interval``, each chunk stamped with the modelled time its tokens were produced
(``SimRequest.marks``). When the host falls behind, modelled time slows down instead of jumping
(``Clock.settle``). Before a round it waits at the holds of closed-loop clients
(``holds.Holds``): the wall time spent there is not modelled time.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from tuner.sim.clock import Clock
from tuner.sim.request import SimRequest
from tuner.sim.scheduler.core import DecodePlan, DecodeRound, PrefillRound, Scheduler

# wall seconds of stream coalescing per running request: more streams, coarser chunks, so CPU
# per token stays flat at high concurrency
FLUSH_S_PER_STREAM = 0.0004


class PacedDriver:
    """Runs ``scheduler``'s rounds forever on the wall clock (``await run()`` in the server)."""

    def __init__(self, scheduler: Scheduler, clock: Clock, flush_ms: float = 20.0) -> None:
        self.scheduler = scheduler
        self.clock = clock
        self.flush_s = max(flush_ms, 1.0) / 1000.0
        self._wake = asyncio.Event()
        scheduler.on_change = self._wake.set
        self._last_flush_wall = 0.0

    async def run(self) -> None:
        s = self.scheduler
        s.t = self.clock.now()
        while True:
            await self._wait_holds()
            s.order_arrivals()
            round_ = s.start_round()
            if isinstance(round_, PrefillRound):
                await self._pace_until(round_.t_end)
                s.finish_prefill(round_)
                continue
            if isinstance(round_, DecodeRound):
                if round_.plan is not None:
                    await self._pace_decode(round_.plan)
                    release = time.monotonic() >= self._last_flush_wall + self._flush_interval()
                    s.finish_decode(round_.plan, release)
                    if release:
                        self._last_flush_wall = time.monotonic()
                continue
            due = s.next_arrival()
            if due is not None:
                # only requests sent ahead of their time: idle until the first is due
                held = s.holds.held_at()
                self.clock.cap = due if held is None else min(due, held)
                delay = self.clock.wall_delay(due)
                if delay > 0:
                    self._wake.clear()
                    await self._wait_wake(delay)
                s.t = max(s.t, self.clock.now())  # due, or an earlier new arrival
                continue
            self.clock.cap = s.holds.held_at()
            self._wake.clear()
            await self._wake.wait()
            s.t = max(s.t, self.clock.now())

    async def _wait_wake(self, delay: float) -> None:
        handle = asyncio.get_running_loop().call_later(delay, self._wake.set)
        try:
            await self._wake.wait()
        finally:
            handle.cancel()

    async def _wait_holds(self) -> None:
        """Do not start a round while a client owes a request at or before the GPU's time."""
        s, holds = self.scheduler, self.scheduler.holds
        waited = False
        started = time.monotonic()
        while True:
            due = holds.due(s.t)
            if not due:
                break
            waited = True
            self.clock.cap = min(h.t for h in due)
            delay = min(h.deadline for h in due) - time.monotonic()
            if delay <= 0:
                holds.expire()
                continue
            self._wake.clear()
            await self._wait_wake(delay)
        if waited:
            holds.wait_s += time.monotonic() - started
            # the wall time spent waiting for the client is not modelled time
            self.clock.settle(s.t, count=False)

    async def _pace_until(self, model_t: float) -> None:
        """Sleep through a round (arrivals wait for it, as on a GPU); then stand at its end."""
        self.clock.cap = model_t
        delay = self.clock.wall_delay(model_t)
        if delay > 0:
            await asyncio.sleep(delay)
        self.clock.settle(model_t)

    async def _pace_decode(self, plan: DecodePlan) -> None:
        """Sleep through a run of decode steps, streaming what is produced every flush
        interval; arrivals meanwhile may cut the run short (``Scheduler.cut_for_arrivals``)."""
        s = self.scheduler
        t0, step = plan.t0, plan.step
        flushed = 0
        while True:
            self.clock.cap = plan.end()
            s.cut_for_arrivals(plan, flushed)
            j = min(plan.k_end, int((self.clock.paced() - t0) / step))
            if j >= plan.k_end:
                break
            flush_wall = self._last_flush_wall + self._flush_interval()
            if j > 0 and time.monotonic() >= flush_wall:
                self._release_partial(plan.batch, plan.cum, plan.remaining, j, t0 + j * step)
                flushed = j
                flush_wall = self._last_flush_wall + self._flush_interval()
            # a flush is only useful once a step has completed since the last one
            next_flush = max(flush_wall, self.clock.wall_at(t0 + (j + 1) * step))
            delay = min(self.clock.wall_at(plan.end()), next_flush) - time.monotonic()
            if delay > 0:
                self._wake.clear()
                await self._wait_wake(delay)
        self.clock.settle(plan.end())

    def _flush_interval(self) -> float:
        return max(self.flush_s, FLUSH_S_PER_STREAM * len(self.scheduler.running))

    def _release_partial(
        self, batch: list[SimRequest], cum: np.ndarray, remaining: np.ndarray, j: int, t: float
    ) -> None:
        """Stream the tokens of the first ``j`` steps of a run still in flight."""
        produced = np.minimum(cum[:, j - 1], remaining)
        for i, req in enumerate(batch):
            upto = req.generated + int(produced[i])
            if upto > req.released:
                self.scheduler.release_tokens(req, t, upto)
        self._last_flush_wall = time.monotonic()
