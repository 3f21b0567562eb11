"""A Mooncake-format trace of 300 requests with shared prefixes, replayed against the simulator.

The client keeps the trace's times (p99 send lag under 20 ms), and the server's cache hit rate
is the block-level reuse the trace implies. The two are defined alike: the simulator's hit rate
is cached prompt tokens over prompt tokens (sglang's `cache_hit_rate`), and the trace's reuse
counts, for each request, its leading blocks that an earlier request had, over all prompt tokens
(`block_reuse`). They differ where a server cannot reuse what the trace says it could: a request
that arrives while the one that brings its prefix is still in prefill (the prefix is not cached
yet), and eviction. The model (Llama 3.1 8B on an H100) caches every 16-token block, has room
for the whole trace and keeps up with its rate, so the gap is small; 10% of the reuse is the bound
the issue sets, and a trace whose prompts did not share their prefixes would hit ~0.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from support.harness import SimProcess

from tuner.bench import BenchConfig, BenchLagError, WorkloadSpec, run_bench

SIM_MODEL = ["--sim-model", "llama-3.1-8b-instruct", "--sim-hardware", "h100-sxm"]
REQUESTS = 300


def bursty_mooncake_trace(path: Path, requests: int = REQUESTS, seed: int = 1) -> Path:
    """20 system prompts of 4 blocks, each request one of them plus 1-2 blocks of its own;
    arrivals in bursts (most gaps ~50 ms, one in five ~600 ms), over about 50 s."""
    rng = random.Random(seed)
    groups = [list(range(g * 4, g * 4 + 4)) for g in range(20)]
    next_id = 1000
    t = 0.0
    with path.open("w") as out:
        for _ in range(requests):
            t += rng.expovariate(1 / 50) if rng.random() < 0.8 else rng.expovariate(1 / 600)
            own = rng.randint(1, 2)
            ids = groups[rng.randrange(len(groups))] + list(range(next_id, next_id + own))
            next_id += own
            item = {
                "timestamp": int(t),
                "input_length": (len(ids) - 1) * 512 + rng.randint(100, 512),
                "output_length": rng.randint(4, 16),
                "hash_ids": ids,
            }
            out.write(json.dumps(item) + "\n")
    return path


def within_reuse(summary: dict) -> None:
    reuse = summary["trace_block_reuse"]
    assert reuse > 0.6  # the trace shares a lot: the comparison below means something
    assert abs(summary["cache_hit_rate"] - reuse) <= 0.1 * reuse, summary


def test_modelled_replay_keeps_times_and_reuses_the_traces_prefixes(tmp_path: Path) -> None:
    path = bursty_mooncake_trace(tmp_path / "trace.jsonl")
    workload = WorkloadSpec.from_dict({"kind": "trace", "path": str(path), "speedup": 2.0})
    with SimProcess.start(["--sim-time-scale", "50", *SIM_MODEL]) as sim:
        result = run_bench(BenchConfig(url=sim.url, workload=workload, warmup_requests=0))
        info = httpx.get(sim.url + "/server_info").json()
    summary = result.summary
    assert summary["completed"] == REQUESTS and not summary.get("failed")
    # sent ahead with their due times: each reached the simulator at its time in the trace
    assert info["sim_late_requests"] == 0
    assert summary["p99_send_lag_ms"] < 20.0
    offsets = workload.arrival_offsets() or []
    starts = sorted(r.start_s for r in result.records)
    assert starts == pytest.approx(offsets, abs=0.02)
    assert offsets[-1] > 20.0  # the trace's ~50 s, halved
    within_reuse(summary)


def test_an_overloaded_server_is_measured_not_flagged(tmp_path: Path) -> None:
    # At 10x the trace asks for more prefill than the modelled GPU has, so nothing finishes for
    # seconds; every request still reaches the simulator at its time (sent ahead), and the
    # queueing shows in TTFT, where it belongs, not as send lag.
    path = bursty_mooncake_trace(tmp_path / "trace.jsonl")
    workload = WorkloadSpec.from_dict({"kind": "trace", "path": str(path), "speedup": 10.0})
    with SimProcess.start(["--sim-time-scale", "50", *SIM_MODEL]) as sim:
        result = run_bench(BenchConfig(url=sim.url, workload=workload, warmup_requests=0))
    summary = result.summary
    assert summary["completed"] == REQUESTS
    assert summary["p99_ttft_ms"] > 500.0  # overloaded indeed
    assert summary["max_send_lag_ms"] < 1.0


def test_wall_clock_replay_keeps_the_traces_times_under_load(tmp_path: Path) -> None:
    # The client's own clock against the simulator in real time (scale 1), as against a real
    # server: here the client alone keeps the times.
    path = bursty_mooncake_trace(tmp_path / "trace.jsonl")
    workload = WorkloadSpec.from_dict({"kind": "trace", "path": str(path), "speedup": 5.0})
    with SimProcess.start(["--sim-time-scale", "1", *SIM_MODEL]) as sim:
        cfg = BenchConfig(url=sim.url, workload=workload, warmup_requests=0, use_server_time=False)
        result = run_bench(cfg)
    summary = result.summary
    assert summary["completed"] == REQUESTS and not summary.get("failed")
    # Wall-clock lag depends on the host's load (10-15 ms at p99 on this 2-core host at load 7-8,
    # over 20 ms once at load 9): the bound here only catches a replay that ignores its times
    # (a burst sent at once lags by the trace's whole span, seconds).
    assert 0.0 <= summary["p99_send_lag_ms"] < 250.0, summary
    assert summary["max_send_lag_ms"] >= summary["p99_send_lag_ms"] >= summary["p50_send_lag_ms"]
    within_reuse(summary)


def test_a_replay_held_back_by_a_concurrency_cap_is_flagged(tmp_path: Path) -> None:
    # 30 requests arriving together, sent one at a time: the later ones go out long after
    # their time, and the run is not the trace.
    path = tmp_path / "burst.jsonl"
    item = {"timestamp": 0, "input_length": 600, "output_length": 16, "hash_ids": [1, 2]}
    path.write_text((json.dumps(item) + "\n") * 30)
    workload = WorkloadSpec.from_dict({"kind": "trace", "path": str(path)})
    with (
        SimProcess.start(["--sim-time-scale", "50", *SIM_MODEL]) as sim,
        pytest.raises(BenchLagError, match=r"requests went out more than 50 ms late .* p99") as err,
    ):
        run_bench(BenchConfig(url=sim.url, workload=workload, concurrency=1))
    assert "\n" not in str(err.value)


def test_tuner_bench_replays_a_trace_file(tmp_path: Path) -> None:
    path = bursty_mooncake_trace(tmp_path / "trace.jsonl", requests=60)
    out = tmp_path / "summary.json"
    args = ["--workload", "trace", "--file", str(path), "--output-json", str(out)]
    with SimProcess.start(["--sim-time-scale", "50", *SIM_MODEL]) as sim:
        done = subprocess.run(
            [sys.executable, "-m", "tuner.cli", "bench", "--url", sim.url, *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "mooncake trace: 60 requests over" in done.stdout
    assert "trace's block reuse" in done.stdout and "send lag p50/p99/max (ms)" in done.stdout
    summary = json.loads(out.read_text())
    assert summary["completed"] == 60 and summary["workload"]["kind"] == "trace"
    assert summary["late_sends"] == 0 and summary["trace_block_reuse"] > 0.4
