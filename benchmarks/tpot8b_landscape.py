"""Why tpot-8b's optimum is one point: the oracle's noise-free figures around it.

    python benchmarks/tpot8b_landscape.py [WORLD]        # default: shipped
    python benchmarks/tpot8b_landscape.py [WORLD] --odds # and the odds of a random draw

For each schedule policy and chunk size, every running cap from 36 to 46, at two memory
fractions and two decode-graph sizes: throughput, p99 TTFT and p99 TPOT, and whether the space's
SLOs (p99 TTFT <= 7 s, p99 TPOT <= 11 ms) hold. The memory fraction and the graph size change
nothing here (an 8B model leaves the H200's KV pool unfilled), so one line per policy and chunk
is printed, and any configuration where they do change something is listed apart.

With `--odds`, every policy, chunk size and running cap of the space (HiCache off, and on at a
ratio of 2), without noise: which configurations reach 95% of the optimum within both SLOs, and
the chance that one draw of the space's sampler distribution (each choice alike, the running cap
log-uniform over its integers, HiCache on half the time) is one of them, then the chance that
40 independent draws hold at least one. That is the odds of random search; it is also how much
of the space a search has to tell apart from the rest by what it measures elsewhere.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

if __name__ == "__main__":  # run as a file: the benchmarks package lives one folder up
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.oracle_measurer import OracleCache, default_store
from benchmarks.quality.truth import Oracle
from benchmarks.quality.worlds import world_space
from tuner.space.model import SearchSpace

CAPS = range(36, 47)


def _config(
    policy: str,
    chunk: int,
    cap: int,
    mem: float = 0.7,
    graphs: int | None = None,
    hicache: bool = False,
) -> dict[str, object]:
    """One configuration of the space (HiCache at a ratio of 2 when on)."""
    params: dict[str, object] = {
        "mem_fraction_static": mem,
        "max_running_requests": cap,
        "chunked_prefill_size": chunk,
        "schedule_policy": policy,
        "cuda_graph_max_bs_decode": graphs,
        "enable_hierarchical_cache": hicache,
    }
    if hicache:
        params["hicache_ratio"] = 2.0
    return params


def odds(space: SearchSpace, oracle: Oracle, share: float = 0.95, draws: int = 40) -> None:
    cap_spec = space.params["max_running_requests"]
    low, high = int(cap_spec.low), int(cap_spec.high)
    span = math.log(high + 0.5) - math.log(low - 0.5)
    chunks = space.params["chunked_prefill_size"].choices or ()
    policies = space.params["schedule_policy"].choices or ()
    judged: list[tuple[float, bool, float, dict[str, object]]] = []
    for policy in policies:
        for chunk in chunks:
            for cap in range(low, high + 1):
                for hicache in (False, True):
                    params = _config(policy, chunk, cap, hicache=hicache)
                    _args, truth = oracle.of_params(params)
                    # A draw's chance of this configuration, the params that change nothing here
                    # (memory fraction, graph size, HiCache ratio) set aside.
                    mass = (math.log(cap + 0.5) - math.log(cap - 0.5)) / span
                    mass /= len(chunks) * len(policies) * 2
                    judged.append((truth.throughput, truth.feasible, mass, params))
    best = max(t for t, ok, _m, _p in judged if ok)
    hits = [(t, m, p) for t, ok, m, p in judged if ok and t >= share * best]
    chance = sum(m for _t, m, _p in hits)
    print(f"optimum within the SLOs: {best:.1f} tok/s; {len(judged)} configurations judged")
    print(f"within both SLOs at {share:.0%} of it or more:")
    for t, m, p in sorted(hits, key=lambda h: -h[0]):
        print(f"  {t:.1f} tok/s ({t / best:.3f}), one draw in {1 / m:,.0f}: {p}")
    print(f"one draw: {chance:.4%}; at least one in {draws} draws: {1 - (1 - chance) ** draws:.1%}")


def landscape(oracle: Oracle) -> None:
    best: tuple[float, dict[str, object]] = (0.0, {})
    for policy in ("fcfs", "lpm"):
        for chunk in (8192, 16384):
            cells = []
            for cap in CAPS:
                seen = set()
                for mem in (0.7, 0.95):
                    for graphs in (None, 512):
                        params = _config(policy, chunk, cap, mem, graphs)
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
    print(f"best within the SLOs: {best[0]:.1f} tok/s at {best[1]}")


def main(world: str, with_odds: bool) -> None:
    space = world_space("tpot-8b", world)
    oracle = Oracle(space, OracleCache(space, default_store()))
    landscape(oracle)
    if with_odds:
        odds(space, oracle)
    oracle.save()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--odds"]
    main(args[0] if args else "shipped", "--odds" in sys.argv[1:])
