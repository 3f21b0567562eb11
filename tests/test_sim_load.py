"""256 concurrent streams, the same modelled figures at two time scales, the wall-clock path."""

from __future__ import annotations

import asyncio
import statistics

import httpx
import pytest
from support.harness import SimProcess
from support.probe import run_workload

from tuner.bench import BenchConfig, WorkloadSpec, run_bench
from tuner.sim.oracle import OracleWorkload, predict

DENSE_H200 = ["--sim-model", "qwen3-8b", "--sim-hardware", "h200"]


def test_sustains_256_concurrent_streams():
    workload = WorkloadSpec.from_dict(
        {"kind": "random", "requests": 512, "input_len": 256, "output_len": 256}
    )
    with SimProcess.start([*DENSE_H200, "--sim-time-scale", "10"]) as sim:
        result = run_bench(BenchConfig(url=sim.url, workload=workload, concurrency=256))
        info = httpx.get(sim.url + "/server_info").json()
    records = result.records
    assert len(records) == 512
    assert all(r.error is None and r.output_tokens == 256 for r in records)
    assert max(len(r.chunk_times_s) for r in records) > 1  # tokens came in several chunks
    # however far the host fell behind, the client never came late to the modelled clock
    assert info["sim_late_requests"] == 0 and info["sim_hold_timeouts"] == 0
    expected = predict(DENSE_H200, workload, concurrency=256)
    s, e = result.summary, expected.summary
    assert s["output_throughput"] == pytest.approx(e["output_throughput"], rel=0.03)
    assert s["median_tpot_ms"] == pytest.approx(e["median_tpot_ms"], rel=0.03)


def modelled_figures(scale: int) -> dict[str, float]:
    argv = ["--speculative-algorithm", "NEXTN", "--mem-fraction-static", "0.93", "--sim-seed", "1"]
    workload = WorkloadSpec.from_dict(
        {"kind": "random", "requests": 12, "input_len": 256, "output_len": 256}
    )
    with SimProcess.start([*argv, "--sim-time-scale", str(scale)]) as sim:
        summary = run_bench(BenchConfig(url=sim.url, workload=workload, concurrency=4)).summary
        records = httpx.get(sim.url + "/sim/requests").json()["requests"]
        info = httpx.get(sim.url + "/server_info").json()
    assert info["sim_time_scale"] == float(scale)
    return {
        "output_throughput": summary["output_throughput"],
        "median_tpot_ms": summary["median_tpot_ms"],
        "p99_ttft_ms": summary["p99_ttft_ms"],
        "server_tpot_ms": statistics.median(
            (r["finish_s"] - r["first_token_s"]) / (r["completion_tokens"] - 1) * 1000
            for r in records
            if r["completion_tokens"] == 256
        ),
        "accept_length": info["internal_states"][0]["avg_spec_accept_length"],
    }


def test_time_scale_does_not_change_modelled_figures():
    slow, fast = modelled_figures(8), modelled_figures(32)
    for name, value in slow.items():
        assert fast[name] == pytest.approx(value, rel=0.02), name


def test_wall_clock_path_at_a_low_time_scale():
    """Measured by the client's own clock (as against a real server), at time scale 2 the
    client's overhead is small next to a decode step: within 10% of the oracle."""
    workload = WorkloadSpec.from_dict(
        {"kind": "random", "requests": 8, "input_len": 256, "output_len": 128}
    )
    with SimProcess.start([*DENSE_H200, "--sim-time-scale", "2"]) as sim:
        result = run_bench(
            BenchConfig(url=sim.url, workload=workload, concurrency=2, use_server_time=False)
        )
    assert result.time_scale == 2.0 and result.summary["completed"] == 8
    expected = predict(DENSE_H200, workload, concurrency=2, warmup_requests=1).summary
    s = result.summary
    assert s["median_tpot_ms"] == pytest.approx(expected["median_tpot_ms"], rel=0.10)
    assert s["output_throughput"] == pytest.approx(expected["output_throughput"], rel=0.10)


def test_tight_kv_pool_retracts_and_still_completes_every_request():
    workload = OracleWorkload(input_len=256, output_len=512, concurrency=19)
    with SimProcess.start(["--max-total-tokens", "6000", "--sim-time-scale", "50"]) as sim:
        records = asyncio.run(run_workload(sim.url, workload, 38))
        info = httpx.get(sim.url + "/server_info").json()
    assert len(records) == 38
    assert {r.completion_tokens for r in records} == {512}
    assert info["sim_retracted_requests"] > 0
    assert info["sim_owned_tokens"] == 0  # nothing leaked
