"""CPU cost of the simulated server per streamed token.

Starts ``python -m tuner.sim``, drives N concurrent streaming /generate requests at a time
scale, and reads the server process's CPU time (user + system, from /proc) before and after.

    python benchmarks/sim_cpu_cost.py --streams 256 --time-scale 10

Prints one JSON object: streams, tokens streamed, server CPU seconds, CPU seconds per token,
wall seconds, and the simulator's own stall (modelled seconds it fell behind the wall clock).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import httpx

from tuner.sim.oracle import OracleWorkload

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.harness import SimProcess
from support.probe import run_workload, summarize


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--requests-per-stream", type=int, default=4)
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--time-scale", type=float, default=10.0)
    p.add_argument("--hardware", default="h200")
    p.add_argument("--model", default="qwen3-8b")
    a = p.parse_args()
    argv = [
        "--sim-time-scale",
        str(a.time_scale),
        "--sim-hardware",
        a.hardware,
        "--sim-model",
        a.model,
    ]
    workload = OracleWorkload(input_len=a.input_len, output_len=a.output_len, concurrency=a.streams)
    import asyncio

    with SimProcess.start(argv) as sim:
        before = cpu_seconds(sim.proc.pid)
        t0 = time.perf_counter()
        records = asyncio.run(run_workload(sim.url, workload, a.streams * a.requests_per_stream))
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(sim.proc.pid) - before
        info = httpx.get(sim.url + "/server_info").json()
    tokens = sum(r.completion_tokens for r in records)
    summary = summarize(records, a.time_scale)
    print(
        json.dumps(
            {
                "streams": a.streams,
                "requests": len(records),
                "errors": sum(1 for r in records if r.error),
                "tokens_streamed": tokens,
                "time_scale": a.time_scale,
                "wall_s": round(wall, 2),
                "server_cpu_s": round(cpu, 3),
                "server_cpu_s_per_token": cpu / max(tokens, 1),
                "server_cpu_share_of_one_core": round(cpu / wall, 3),
                "sim_behind_s": round(info["sim_behind_s"], 3),
                "modelled_output_throughput": round(summary.output_throughput, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
