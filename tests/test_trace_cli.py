"""`tuner bench`'s trace options through the command line, against the simulator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.harness import SimProcess
from support.traces import mooncake_trace

from tuner.bench.trace import read_window

SIM_MODEL = ["--sim-model", "llama-3.1-8b-instruct", "--sim-hardware", "h100-sxm"]


def _bench(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner.cli", "bench", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_bench_options_window_pace_and_loop_a_trace(tmp_path: Path) -> None:
    trace = mooncake_trace(tmp_path / "trace.jsonl", requests=80, block=256)
    window = read_window(trace, "mooncake", 2.0, 6.0, 25)
    out = tmp_path / "open.json"
    open_loop = [
        "--workload", "trace", "--file", str(trace), "--trace-format", "mooncake",
        "--mode", "open-loop", "--speedup", "2", "--start", "2", "--duration", "6",
        "--max-requests", "25", "--block-size", "256", "--warmup-requests", "0",
        "--output-json", str(out),
    ]  # fmt: skip
    closed = tmp_path / "closed.json"
    closed_loop = [
        "--workload", "trace", "--file", str(trace), "--mode", "closed-loop",
        "--concurrency", "3", "--max-requests", "12", "--output-json", str(closed),
    ]  # fmt: skip
    with SimProcess.start(["--sim-time-scale", "50", *SIM_MODEL]) as sim:
        paced = _bench(sim.url, *open_loop)
        looped = _bench(sim.url, *closed_loop)
        wrong = _bench(sim.url, "--workload", "trace", "--file", str(trace), "--mode", "both")
    assert paced.returncode == 0, paced.stdout + paced.stderr
    summary = json.loads(out.read_text())
    assert summary["completed"] == len(window.entries) and 0 < len(window.entries) <= 25
    assert summary["workload"]["speedup"] == 2 and summary["workload"]["block_size"] == 256
    assert summary["workload"]["start"] == 2 and summary["workload"]["duration"] == 6
    # The window's span at twice the trace's pace is what the open loop took to send it.
    offsets = window.offsets() or []
    assert summary["duration"] >= (offsets[-1] - offsets[0]) / 2
    assert "send lag p50/p99/max (ms)" in paced.stdout and summary["late_sends"] == 0
    assert f"mooncake trace: {len(window.entries)} requests over" in paced.stdout

    assert looped.returncode == 0, looped.stdout + looped.stderr
    summary = json.loads(closed.read_text())
    assert summary["completed"] == 12 and summary["max_concurrency"] == 3
    assert summary["workload"]["mode"] == "closed-loop"
    assert "p50_send_lag_ms" not in summary  # a closed loop has no times to keep

    assert wrong.returncode == 2
    assert "workload key 'mode' is 'both'; allowed: open-loop, closed-loop" in wrong.stderr
    assert "Traceback" not in wrong.stderr
