"""256 concurrent streams, and the same modelled figures at two time scales."""

from __future__ import annotations

import asyncio
import statistics

import httpx
import pytest
from support.harness import SimProcess
from support.probe import measure, run_workload

from tuner.sim.oracle import OracleWorkload, predict

DENSE_H200 = ["--sim-model", "qwen3-8b", "--sim-hardware", "h200"]


def test_sustains_256_concurrent_streams():
    workload = OracleWorkload(input_len=256, output_len=256, concurrency=256)
    # A modest time scale: at 10 a busy CPU slowed the client enough to miss the oracle by 27%.
    with SimProcess.start([*DENSE_H200, "--sim-time-scale", "4"]) as sim:
        records = asyncio.run(run_workload(sim.url, workload, 512))
        info = httpx.get(sim.url + "/server_info").json()
        served = httpx.get(sim.url + "/sim/requests").json()["requests"]
    assert len(records) == 512
    assert all(r.error is None and r.completion_tokens == 256 for r in records)
    assert max(len(r.itls) for r in records) > 0  # tokens came in several chunks
    # the simulator kept its timeline: no (or very little) stall behind the wall clock
    span = max(r["finish_s"] for r in served) - min(r["arrival_s"] for r in served)
    assert info["sim_stall_s"] < 0.1 * span
    tokens = sum(r["completion_tokens"] for r in served)
    expected = predict(DENSE_H200, workload).output_throughput
    assert tokens / span == pytest.approx(expected, rel=0.25)


def modelled_figures(scale: int) -> dict[str, float]:
    argv = ["--speculative-algorithm", "NEXTN", "--mem-fraction-static", "0.93", "--sim-seed", "1"]
    workload = OracleWorkload(input_len=256, output_len=256, concurrency=4)
    with SimProcess.start([*argv, "--sim-time-scale", str(scale)]) as sim:
        summary = measure(sim.url, workload, 12)
        records = httpx.get(sim.url + "/sim/requests").json()["requests"]
        info = httpx.get(sim.url + "/server_info").json()
    assert info["sim_time_scale"] == float(scale)
    return {
        "output_throughput": summary.output_throughput,
        "median_tpot_ms": summary.median_tpot_ms,
        "server_e2e_s": statistics.median(r["finish_s"] - r["arrival_s"] for r in records),
        "server_tpot_ms": statistics.median(
            (r["finish_s"] - r["first_token_s"]) / (r["completion_tokens"] - 1) * 1000
            for r in records
        ),
        "accept_length": info["internal_states"][0]["avg_spec_accept_length"],
    }


def test_time_scale_does_not_change_modelled_figures():
    slow, fast = modelled_figures(8), modelled_figures(32)
    for name, value in slow.items():
        assert fast[name] == pytest.approx(value, rel=0.06), name


def test_tight_kv_pool_retracts_and_still_completes_every_request():
    workload = OracleWorkload(input_len=256, output_len=512, concurrency=19)
    with SimProcess.start(["--max-total-tokens", "6000", "--sim-time-scale", "50"]) as sim:
        records = asyncio.run(run_workload(sim.url, workload, 38))
        info = httpx.get(sim.url + "/server_info").json()
    assert len(records) == 38
    assert {r.completion_tokens for r in records} == {512}
    assert info["sim_retracted_requests"] > 0
    assert info["sim_owned_tokens"] == 0  # nothing leaked
