"""When a benchmark pass sends its requests: the interface both dispatch strategies keep.

The runner owns what is sent (conversations, histories, records); a `Dispatch` decides when each
request goes out. There are two, and the runner composes the one the server calls for:

- `WallClockDispatch` (wallclock.py), against a real server: requests are released on the
  client's clock at the arrival rate, and a semaphore caps how many are in flight;
- `ModelledDispatch` (modelled.py), against the simulator: requests go out by finishes, each due
  at a modelled time, with the simulator's clock held until it arrives.

Both take turns from the runner's `ReadyTurns`, release them `arrival_gaps` apart, and hand each
request to the runner's `Send` coroutine, which records it and then calls `done`.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import numpy as np

from tuner.bench.records import RequestRecord, Summary

# The simulator-only `sim` object of one request (modelled.py), None against a real server.
SimFields = dict[str, Any] | None
# The runner's sender: (request index, conversation, turn, sim) -> the request, sent and recorded.
Send = Callable[[int, int, int, SimFields], Coroutine[Any, Any, None]]

# A trace replay is not the trace when more than 1% of its requests (and more than one) went out
# more than this late (modelled seconds): its arrivals bunched up behind the client. One request
# is allowed, so that a single stall of the host does not void a short replay. On this
# project's 2-core test host the simulator run keeps p99 under 20 ms (tests/test_trace_replay.py).
REPLAY_LAG_LIMIT_S = 0.05
# A trace replayed against the simulator sends up to this many requests ahead of their times
# (each holds a connection open in the client and the simulator: well inside the 1024 open
# files many hosts allow a process).
REPLAY_MAX_AHEAD = 768


class Dispatch(Protocol):
    """What the runner calls on a dispatch strategy, in this order."""

    async def start(self) -> None:
        """Begin sending the pass's requests; returns once the first are under way."""

    def done(self, record: RequestRecord, sim: SimFields) -> None:
        """A request finished and its record is complete: free its slot (and, dispatching by
        finishes, send what follows)."""

    async def stop(self) -> None:
        """The pass is over: cancel what is in flight (closing its connections), clean up."""


class ReadyTurns:
    """Turns ready to be sent, in order: (conversation, turn, modelled time it became ready).

    The time is in modelled seconds since the pass began: 0 for a conversation's first turn, the
    end of the turn before for the others (0 when that one has no end, having failed).
    """

    __slots__ = ("_event", "_queue")

    def __init__(self, conversations: int) -> None:
        self._queue: deque[tuple[int, int, float]] = deque(
            (i, 0, 0.0) for i in range(conversations)
        )
        self._event = asyncio.Event()

    def __len__(self) -> int:
        return len(self._queue)

    def put_next(self, conversation: int, turn: int, ready_s: float) -> None:
        """A conversation's next turn, ahead of conversations not started yet.

        Each of the `concurrency` clients carries its chat to the end before opening another, as
        users do (and as the simulator's oracle models it); otherwise every conversation would be
        in flight at once and their prefixes would evict each other.
        """
        self._queue.appendleft((conversation, turn, ready_s))
        self._event.set()

    def pop(self) -> tuple[int, int, float]:
        return self._queue.popleft()

    async def wait(self) -> None:
        """Until a turn is ready (a multi-turn pass waits for a finish to have one)."""
        while not self._queue:
            self._event.clear()
            await self._event.wait()


def arrival_gaps(total: int, rate: float | None, arrival: str, seed: int) -> list[float] | None:
    """Modelled seconds from each request's release to the next's, None without a rate.

    `gaps[i]` comes before request i (`gaps[0]` is 0): drawn from `seed` for "poisson", 1 / rate
    for "constant". One draw per request in order, so both strategies release the same run.
    """
    if rate is None:
        return None
    gaps = [0.0] * total
    if total > 1:
        rng = np.random.default_rng(seed)
        poisson = arrival == "poisson"
        for i in range(1, total):
            gaps[i] = rng.exponential(1.0 / rate) if poisson else 1 / rate
    return gaps


def replay_gaps(offsets: list[float]) -> list[float]:
    """`arrival_gaps` for a trace: the gaps between its arrival times (`gaps[0]` is 0)."""
    return [0.0] + [b - a for a, b in itertools.pairwise(offsets)]


def send_lag_summary(records: list[RequestRecord]) -> Summary:
    """p50 / p99 / max send lag (ms, modelled): how long after its time in the trace each
    request went out, with the replay's clock started by its first request."""
    timed = [r for r in records if r.scheduled_s is not None and r.success]
    if not timed:
        return {}
    first = min(timed, key=lambda r: r.index)
    origin = first.start_s - (first.scheduled_s or 0.0)
    lags = np.array([max(0.0, r.start_s - origin - (r.scheduled_s or 0.0)) for r in timed])
    return {
        "p50_send_lag_ms": float(np.percentile(lags, 50)) * 1000.0,
        "p99_send_lag_ms": float(np.percentile(lags, 99)) * 1000.0,
        "max_send_lag_ms": float(lags.max()) * 1000.0,
        "late_sends": int((lags > REPLAY_LAG_LIMIT_S).sum()),
    }


def replay_kept_time(lag: Summary, requests: int) -> bool:
    """Whether a replay's sends kept the trace's times (see REPLAY_LAG_LIMIT_S)."""
    late = int(lag.get("late_sends", 0))
    return late <= max(1, 0.01 * requests)


class InFlight:
    """The tasks a strategy started; `cancel` ends them all (a request's closes its connection)."""

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def cancel(self) -> None:
        """Cancel every task still running and wait for them."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
