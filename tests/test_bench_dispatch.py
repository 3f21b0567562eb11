"""The two dispatch strategies on their own, with a recording sender instead of HTTP.

End to end (real HTTP, the fake server and the simulator) they are tested through the runner in
test_bench_runner.py, test_bench_sim.py and test_bench_lag.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tuner.bench import RequestRecord
from tuner.bench.client import ModelClock
from tuner.bench.dispatch import ReadyTurns, arrival_gaps
from tuner.bench.modelled import ModelledDispatch
from tuner.bench.wallclock import WallClockDispatch


def test_arrival_gaps_come_from_the_rate_and_the_seed():
    assert arrival_gaps(5, None, "poisson", 0) is None
    assert arrival_gaps(4, 2.0, "constant", 0) == [0.0, 0.5, 0.5, 0.5]
    poisson = arrival_gaps(2000, 4.0, "poisson", 7)
    assert poisson is not None and poisson[0] == 0.0
    assert poisson == arrival_gaps(2000, 4.0, "poisson", 7)
    assert poisson != arrival_gaps(2000, 4.0, "poisson", 8)
    assert abs(sum(poisson) / 1999 - 0.25) < 0.02


def test_a_next_turn_goes_ahead_of_conversations_not_started():
    async def go() -> list[tuple[int, int, float]]:
        turns = ReadyTurns(3)
        first = turns.pop()
        turns.put_next(0, 1, 2.5)
        return [first, turns.pop(), turns.pop(), turns.pop()]

    assert asyncio.run(go()) == [(0, 0, 0.0), (0, 1, 2.5), (1, 0, 0.0), (2, 0, 0.0)]


def test_wall_clock_dispatch_keeps_at_most_concurrency_in_flight():
    async def go() -> tuple[int, list[int]]:
        turns = ReadyTurns(10)
        in_flight: list[int] = []
        most = 0
        sent: list[int] = []
        holder: list[WallClockDispatch] = []
        finished = asyncio.Event()

        async def send(index: int, conv: int, turn: int, sim: Any) -> None:
            nonlocal most
            assert sim is None
            in_flight.append(index)
            most = max(most, len(in_flight))
            await asyncio.sleep(0.001 * (index % 3))
            in_flight.remove(index)
            sent.append(index)
            holder[0].done(RequestRecord(index=index, start_s=0.0), None)
            if len(sent) == 10:
                finished.set()

        dispatch = WallClockDispatch(
            ModelClock(), turns, send, lambda exc: None, total=10, gaps=None, concurrency=3
        )
        holder.append(dispatch)
        await dispatch.start()
        await asyncio.wait_for(finished.wait(), 5)
        await dispatch.stop()
        return most, sorted(sent)

    most, sent = asyncio.run(go())
    assert most == 3
    assert sent == list(range(10))


def test_wall_clock_dispatch_reports_a_failure_instead_of_hanging():
    async def go() -> list[BaseException]:
        failures: list[BaseException] = []

        async def send(index: int, conv: int, turn: int, sim: Any) -> None:
            return None

        # gaps shorter than the run: a bug in the caller
        gaps = [0.0]
        dispatch = WallClockDispatch(
            ModelClock(), ReadyTurns(2), send, failures.append, total=2, gaps=gaps, concurrency=None
        )
        await dispatch.start()
        await asyncio.sleep(0.05)
        await dispatch.stop()
        return failures

    failures = asyncio.run(go())
    assert len(failures) == 1 and isinstance(failures[0], IndexError)


class _FakeSimClient:
    """Stands in for BenchClient's simulator calls: records them, holds at modelled time 100."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.origin = 0.0

    async def sim_call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((path, body))
        return {"t": 100.0}


def test_modelled_dispatch_sends_by_finishes_claiming_each_hold():
    async def go() -> tuple[_FakeSimClient, list[tuple[int, dict[str, Any]]]]:
        client = _FakeSimClient()
        sent: list[tuple[int, dict[str, Any]]] = []
        ended = asyncio.Event()

        async def send(index: int, conv: int, turn: int, sim: Any) -> None:
            sent.append((index, sim))

        dispatch = ModelledDispatch(
            client, ReadyTurns(4), send, ended, total=4, gaps=[0.0, 0.0, 3.0, 1.0], concurrency=2
        )
        await dispatch.start()
        await asyncio.sleep(0)
        assert [i for i, _ in sent] == [0, 1]  # two slots
        # request 0 ends 5 modelled seconds into the pass: request 2 goes, due then
        dispatch.done(RequestRecord(index=0, start_s=0.0, end_s=5.0), sent[0][1])
        # request 1 failed before any stamp: request 3 goes, due at its arrival time only
        dispatch.done(RequestRecord(index=1, start_s=0.0, error="refused"), sent[1][1])
        await asyncio.sleep(0)
        ended.set()
        await dispatch.stop()
        return client, sent

    client, sent = asyncio.run(go())
    assert client.origin == 100.0
    assert client.calls[0] == ("/sim/hold", {"key": client.calls[0][1]["key"], "count": 2})
    start_key = client.calls[0][1]["key"]
    by_index = dict(sent)
    assert by_index[0]["after"] == by_index[1]["after"] == start_key
    assert by_index[0]["at"] == by_index[1]["at"] == 100.0
    assert by_index[2]["after"] == by_index[0]["rid"] and by_index[2]["at"] == 105.0
    assert by_index[3]["after"] is None and by_index[3]["at"] is None
    # every hold of the pass is released at the end
    assert client.calls[-1][0] == "/sim/release" and "prefix" in client.calls[-1][1]
