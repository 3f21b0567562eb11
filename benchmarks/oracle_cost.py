"""CPU cost of one oracle evaluation of a search space's workload (the seed space by default).

    python benchmarks/oracle_cost.py                 # the seed space, a spread of configurations
    python benchmarks/oracle_cost.py --space search_spaces/qwen3-8b-h200.yaml

One evaluation = `tuner.sim.oracle.predict` of one configuration under the space's workload and
bench settings (warm-up included), what `benchmarks/oracle_measurer.py` calls once per
configuration. It reports process CPU seconds per evaluation (median and max over the
configurations below) and writes benchmarks/results/oracle_cost.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from tuner.bench.workload import WorkloadSpec
from tuner.engines import sglang as engine
from tuner.sim.oracle import predict
from tuner.space.load import default_space_path, load_space

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle_measurer import sim_extra_args

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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--space", type=Path, default=None)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    a = p.parse_args()
    space = load_space(a.space or default_space_path())
    spec = WorkloadSpec.from_dict(space.workload)
    extra = sim_extra_args(space)
    bench = space.bench
    configs = SEED_CONFIGS if a.space is None else [{}]
    rows = []
    for flags in configs:
        args = engine.build_server_args(
            {"model_path": space.model_path, **space.fixed_flags, **flags}, space.engine_version
        )
        costs = []
        for _ in range(a.repeat):
            started = time.process_time()
            r = predict(
                [*args, *extra],
                spec,
                concurrency=bench.concurrency,
                request_rate=bench.request_rate,
                arrival=bench.arrival,
                warmup_requests=bench.warmup_requests,
            )
            costs.append(time.process_time() - started)
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
    cpu = [row["cpu_s"] for row in rows]
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


if __name__ == "__main__":
    main()
