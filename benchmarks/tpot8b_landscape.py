"""Why tpot-8b's optimum is one point: the oracle's noise-free figures around it.

    python benchmarks/tpot8b_landscape.py [WORLD]        # default: shipped

For each schedule policy and chunk size, every running cap from 36 to 46, at two memory
fractions and two decode-graph sizes: throughput, p99 TTFT and p99 TPOT, and whether the space's
SLOs (p99 TTFT <= 7 s, p99 TPOT <= 11 ms) hold. The memory fraction and the graph size change
nothing here (an 8B model leaves the H200's KV pool unfilled), so one line per policy and chunk
is printed, and any configuration where they do change something is listed apart.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":  # run as a file: the benchmarks package lives one folder up
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.oracle_measurer import OracleCache, default_store
from benchmarks.quality.truth import Oracle
from benchmarks.quality.worlds import world_space

CAPS = range(36, 47)


def main(world: str) -> None:
    space = world_space("tpot-8b", world)
    oracle = Oracle(space, OracleCache(space, default_store()))
    best: tuple[float, dict[str, object]] = (0.0, {})
    for policy in ("fcfs", "lpm"):
        for chunk in (8192, 16384):
            cells = []
            for cap in CAPS:
                seen = set()
                for mem in (0.7, 0.95):
                    for graphs in (None, 512):
                        params = {
                            "mem_fraction_static": mem,
                            "max_running_requests": cap,
                            "chunked_prefill_size": chunk,
                            "schedule_policy": policy,
                            "cuda_graph_max_bs_decode": graphs,
                            "enable_hierarchical_cache": False,
                        }
                        _args, truth = oracle.of_params(params)
                        seen.add((round(truth.throughput, 1), truth.feasible))
                        if truth.feasible and truth.throughput > best[0]:
                            best = (truth.throughput, params)
                if len(seen) > 1:
                    print(f"  memory or graph size matters at {policy} {chunk} {cap}: {seen}")
                ttft, tpot = truth.slo_values
                mark = "ok" if truth.feasible else "--"
                cells.append(f"{cap}:{truth.throughput:.0f} {ttft / 1000:.1f}s {tpot:.2f}ms {mark}")
            print(f"{policy} chunks {chunk}:")
            for cell in cells:
                print(f"  {cell}")
    oracle.save()
    print(f"best within the SLOs: {best[0]:.1f} tok/s at {best[1]}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "shipped")
