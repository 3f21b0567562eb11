"""CPU cost of the simulator: the served simulator per streamed token, or one oracle evaluation.

    python benchmarks/sim_cpu_cost.py --streams 256 --time-scale 10
    python benchmarks/sim_cpu_cost.py --oracle                 # the seed space's configurations
    python benchmarks/sim_cpu_cost.py --oracle --space search_spaces/qwen3-8b-h200.yaml

Served (the default): starts ``python -m tuner.sim``, drives N concurrent streaming /generate
requests at a time scale, and reads the server process's CPU time (user + system, from /proc)
before and after. Prints one JSON object: streams, tokens streamed, server CPU seconds, CPU
seconds per token, wall seconds, and the simulator's own stall (modelled seconds it fell behind
the wall clock).

`--oracle`: one evaluation = `tuner.sim.oracle.predict` of one configuration under the space's
workload and bench settings (warm-up included), what benchmarks/oracle_measurer.py calls once
per configuration. Reports process CPU seconds per evaluation (the least of `--repeat`, then the
median and max over the configurations) and writes oracle_cost.json into `--out`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

if __name__ == "__main__":  # run as a file: the benchmarks package lives one folder up
    sys.path[0] = str(Path(__file__).resolve().parents[1])
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/support

from support.harness import SimProcess
from support.probe import run_workload, summarize

from benchmarks.oracle_measurer import sim_extra_args
from tuner.bench.workload import WorkloadSpec
from tuner.engines import sglang as engine
from tuner.sim.oracle import OracleWorkload, predict
from tuner.space.load import default_space_path, load_space
from tuner.space.model import BenchSettings

ROOT = Path(__file__).resolve().parents[1]

# Seed-space configurations: defaults, speculation, HiCache, strategies, a tight running cap.
SEED_CONFIGS: list[dict[str, object]] = [
    {},
    {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
     "speculative_num_draft_tokens": 4, "mem_fraction_static": 0.93},
    {"speculative_algorithm": "NEXTN", "speculative_num_steps": 5, "speculative_eagle_topk": 1,
     "speculative_num_draft_tokens": 6, "mem_fraction_static": 0.9, "max_running_requests": 8},
    {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
     "speculative_num_draft_tokens": 4, "mem_fraction_static": 0.9,
     "enable_hierarchical_cache": True, "hicache_ratio": 4.0},
    {"mamba_radix_cache_strategy": "no_buffer", "disable_overlap_schedule": True},
    {"max_running_requests": 64, "chunked_prefill_size": 4096},
]  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def served(a: argparse.Namespace) -> dict[str, Any]:
    argv = ["--sim-time-scale", str(a.time_scale), "--sim-hardware", a.hardware]
    argv += ["--sim-model", a.model]
    workload = OracleWorkload(input_len=a.input_len, output_len=a.output_len, concurrency=a.streams)
    with SimProcess.start(argv) as sim:
        before = cpu_seconds(sim.proc.pid)
        t0 = time.perf_counter()
        records = asyncio.run(run_workload(sim.url, workload, a.streams * a.requests_per_stream))
        wall = time.perf_counter() - t0
        cpu = cpu_seconds(sim.proc.pid) - before
        info = httpx.get(sim.url + "/server_info").json()
    tokens = sum(r.completion_tokens for r in records)
    summary = summarize(records, a.time_scale)
    return {
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
    }


def _timed_predict(argv: list[str], spec: WorkloadSpec, bench: BenchSettings) -> tuple[float, Any]:
    """Process CPU seconds of one oracle evaluation, and its result."""
    started = time.process_time()
    result = predict(
        argv,
        spec,
        concurrency=bench.concurrency,
        request_rate=bench.request_rate,
        arrival=bench.arrival,
        warmup_requests=bench.warmup_requests,
    )
    return time.process_time() - started, result


def oracle(a: argparse.Namespace) -> dict[str, Any]:
    space = load_space(a.space or default_space_path())
    spec = WorkloadSpec.from_dict(space.workload)
    extra = sim_extra_args(space)
    bench = space.bench
    configs = (SEED_CONFIGS if a.space is None else [{}])[: a.configs]
    rows: list[dict[str, Any]] = []
    for flags in configs:
        args = engine.build_server_args(
            {"model_path": space.model_path, **space.fixed_flags, **flags}, space.engine_version
        )
        runs = [_timed_predict([*args, *extra], spec, bench) for _ in range(max(1, a.repeat))]
        costs, r = [c for c, _ in runs], runs[-1][1]
        rows.append(
            {
                "flags": flags,
                "launch_ok": r.launch_ok,
                "cpu_s": round(min(costs), 4),
                "output_throughput": round(r.output_throughput, 1),
                "p99_ttft_ms": round(r.p99_ttft_ms, 1),
                "requests": int(r.summary.get("completed", 0)),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    cpu = [float(row["cpu_s"]) for row in rows]
    result = {
        "space": space.name,
        "workload": spec.to_dict(),
        "concurrency": bench.concurrency,
        "median_cpu_s": statistics.median(cpu),
        "max_cpu_s": max(cpu),
        "configurations": rows,
    }
    print(f"{space.name}: median {result['median_cpu_s']:.3f} s, max {result['max_cpu_s']:.3f} s")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "oracle_cost.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--streams", type=int, default=256)
    p.add_argument("--requests-per-stream", type=int, default=4)
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--time-scale", type=float, default=10.0)
    p.add_argument("--hardware", default="h200")
    p.add_argument("--model", default="qwen3-8b")
    p.add_argument("--oracle", action="store_true", help="the oracle's cost per evaluation")
    p.add_argument("--space", type=Path, default=None, help="--oracle: a space file")
    p.add_argument("--repeat", type=int, default=3, help="--oracle: runs of each configuration")
    p.add_argument("--configs", type=int, default=None, help="--oracle: the first N only")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    a = p.parse_args(argv)
    if a.oracle:
        oracle(a)
    else:
        print(json.dumps(served(a), indent=2))


if __name__ == "__main__":
    main()
