"""A run the client could not keep up with is never recorded as a measurement.

Against the simulator the bench client measures with modelled timestamps, and a closed loop holds
the simulator's clock at each finish until the client's next request comes. Only a client that
stalls past the hold's timeout (here shortened with --sim-hold-timeout) arrives late; the
simulator reports it (/server_info, /metrics, the request's meta_info) and the run ends with
BenchLagError instead of figures.
"""

from __future__ import annotations

import time

import httpx
import pytest
from support.harness import SimProcess

from tuner.bench import BenchConfig, BenchLagError, WorkloadSpec, failure_message, run_bench

SPEC = WorkloadSpec.from_dict({"kind": "random", "requests": 12, "input_len": 64, "output_len": 64})


def test_a_client_that_falls_behind_the_modelled_clock_records_nothing():
    argv = ["--sim-time-scale", "50", "--sim-hold-timeout", "0.05", "--enable-metrics"]
    stalled: list[int] = []

    def stall_once(done: int, total: int) -> None:
        if done == 3 and not stalled:
            stalled.append(done)
            time.sleep(0.5)  # the client's event loop stops: a starved client

    with SimProcess.start(argv) as sim:
        with pytest.raises(BenchLagError) as err:
            run_bench(
                BenchConfig(url=sim.url, workload=SPEC, concurrency=2, warmup_requests=0),
                on_progress=stall_once,
            )
        info = httpx.get(sim.url + "/server_info").json()
        metrics = httpx.get(sim.url + "/metrics").text
    assert "could not keep up" in str(err.value)
    assert info["sim_hold_timeouts"] >= 1
    assert info["sim_late_requests"] >= 1 and info["sim_late_s"] > 0
    assert "sim:late_requests_total" in metrics and "sim:behind_wall_seconds_total" in metrics


def test_a_client_that_keeps_up_is_never_late():
    with SimProcess.start(["--sim-time-scale", "50"]) as sim:
        result = run_bench(BenchConfig(url=sim.url, workload=SPEC, concurrency=2))
        info = httpx.get(sim.url + "/server_info").json()
    assert result.summary["completed"] == 12
    assert info["sim_late_requests"] == 0 and info["sim_hold_timeouts"] == 0
    assert all(r.late_s == 0 for r in result.records)


def test_a_request_sent_after_its_time_is_stamped_late():
    with SimProcess.start(["--sim-time-scale", "50"]) as sim:
        now = httpx.get(sim.url + "/server_info").json()["sim_now_s"]
        body = {
            "input_ids": [1000 + i for i in range(32)],
            "sampling_params": {"max_new_tokens": 4, "ignore_eos": True},
            "sim": {"at": now - 2.0},
        }
        meta = httpx.post(sim.url + "/generate", json=body).json()["meta_info"]
        info = httpx.get(sim.url + "/server_info").json()
    assert meta["sim_late"] >= 2.0 and meta["sim_arrival"] >= now
    assert info["sim_late_requests"] == 1


def test_the_trial_message_says_why():
    lagged = {"completed": 0, "error": "BenchLagError: not a measurement: 2 request(s) late"}
    assert failure_message(lagged) == "not a measurement: 2 request(s) late"
    assert failure_message({"completed": 0}) == "no request completed: every request failed"
