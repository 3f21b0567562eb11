"""The oracle predicts what the simulator serves: agreement within 10% on a small grid.

Throughput, TPOT and E2E are measured by a streaming client over HTTP; TTFT is taken from the
simulator's own records (a client's wall-clock overhead is multiplied by the time scale), and is
compared where arrivals are independent (one client, open loop): with several clients in a closed
loop, requests that end close together arrive together, and how such a wave splits into prefill
batches depends on the client's timing (the oracle models the two limits, lockstep for equal
lengths, staggered with speculative decoding).
"""

from __future__ import annotations

import statistics

import httpx
import pytest
from support.harness import SimProcess
from support.probe import measure

from tuner.sim.oracle import OracleWorkload, predict

SEED_MTP = ["--speculative-algorithm", "NEXTN", "--mem-fraction-static", "0.93"]

GRID = [
    # id, server args, workload, requests, time scale, compare TTFT
    ("one-client", [], OracleWorkload(input_len=512, output_len=256, concurrency=1), 3, 20, True),
    (
        "eight-clients",
        [],
        OracleWorkload(input_len=512, output_len=256, concurrency=8),
        24,
        20,
        False,
    ),
    (
        "mtp-four-clients",
        SEED_MTP,
        OracleWorkload(input_len=512, output_len=256, concurrency=4),
        16,
        20,
        False,
    ),
    (
        "dense-8b-h200",
        ["--sim-model", "qwen3-8b", "--sim-hardware", "h200"],
        OracleWorkload(input_len=256, output_len=512, concurrency=8),
        24,
        5,
        False,
    ),
    (
        "shared-prefix",
        [],
        OracleWorkload(
            kind="shared-prefix",
            shared_prefix_len=2048,
            num_groups=4,
            input_len=128,
            output_len=128,
            concurrency=4,
            num_requests=24,
        ),
        24,
        20,
        False,
    ),
    (
        "multi-turn",
        [],
        OracleWorkload(
            kind="multi-turn",
            turns=3,
            shared_prefix_len=256,
            input_len=256,
            output_len=128,
            concurrency=4,
        ),
        8,
        20,
        False,
    ),
    (
        "open-loop",
        [],
        OracleWorkload(input_len=512, output_len=128, concurrency=None, request_rate=0.5),
        16,
        20,
        True,
    ),
]


@pytest.mark.parametrize(
    ("server_args", "workload", "requests", "scale", "ttft"),
    [g[1:] for g in GRID],
    ids=[g[0] for g in GRID],
)
def test_served_agrees_with_oracle(server_args, workload, requests, scale, ttft):
    expected = predict(server_args, workload)
    assert expected.launch_ok
    with SimProcess.start([*server_args, "--sim-time-scale", str(scale)]) as sim:
        served = measure(sim.url, workload, requests)
        info = httpx.get(sim.url + "/server_info").json()
        records = httpx.get(sim.url + "/sim/requests").json()["requests"]
    effective = info["internal_states"][0]["effective_max_running_requests_per_dp"]
    assert effective == expected.max_running_requests
    assert info["max_total_num_tokens"] == expected.max_total_num_tokens
    if workload.request_rate is None:  # a short Poisson run does not hit its nominal rate
        assert served.output_throughput == pytest.approx(expected.output_throughput, rel=0.10)
    assert served.median_tpot_ms == pytest.approx(expected.median_tpot_ms, rel=0.10)
    assert served.median_e2e_latency_ms == pytest.approx(expected.median_e2e_latency_ms, rel=0.10)
    assert served.cache_hit_rate == pytest.approx(expected.cache_hit_rate, abs=0.05)
    if ttft:
        served_ttft = statistics.median(r["first_token_s"] - r["arrival_s"] for r in records)
        assert served_ttft * 1000 == pytest.approx(expected.median_ttft_ms, rel=0.25)


def test_oracle_reports_launch_failures_like_the_server():
    w = OracleWorkload()
    mtp = predict(["--speculative-algorithm", "MTP"], w)
    assert not mtp.launch_ok
    assert mtp.failure == "ValueError: Unknown speculative algorithm name: MTP"
    oom = predict(["--mem-fraction-static", "0.5"], w)
    assert oom.failure_kind == "not_enough_memory"
    assert predict(["--no-such-flag"], w).failure_kind == "bad_argument"


def test_oracle_is_pure_and_fast():
    import time

    t0 = time.perf_counter()
    for fraction in (0.8, 0.85, 0.9):
        r = predict(
            ["--mem-fraction-static", str(fraction)],
            OracleWorkload(input_len=1024, output_len=256, concurrency=16),
        )
        assert r.launch_ok and r.output_throughput > 0
    assert time.perf_counter() - t0 < 2.0
