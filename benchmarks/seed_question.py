"""The seed space's question, asked of the simulator directly: does HiCache let MTP scale here?

    python benchmarks/seed_question.py      # minutes of CPU; writes results/seed_question.json

The seed space (Qwen3.6-27B with its MTP head on one RTX PRO 6000 Blackwell, 96 GB; a multi-turn
chat of 16 closed-loop clients) asks whether host-RAM KV (HiCache) lets speculative decoding run
at high concurrency. This script does not run the tuner: it judges a small grid with the
simulator's headless oracle (`tuner.sim.oracle.predict`, the same scheduler a served benchmark
runs) so that docs/seed-case-study.md can say what the truth is, next to what the tuner found:

- speculation off, NEXTN with 1-5 fixed steps (topk 1, steps + 1 draft tokens), or NEXTN with
  sglang 0.5.23's adaptive speculation (`--speculative-adaptive`) starting at 1, 3 or 5 steps
  (the candidates of its default configuration, as the space offers it);
- HiCache off, or on with host pools of 2x, 4x and 8x the GPU pool;
- `mem_fraction_static` 0.85, 0.90 and 0.95 (adaptive from 1 step launches only at 0.85),
  Mamba `extra_buffer`, `chunked_prefill_size` 4096;
- the running cap left to sglang (None) or set to the 16 clients.

The oracle's results are kept between runs (`oracle_measurer.default_store()`, outside the
repository; keyed by the simulator's source). For each (speculation, HiCache) pair it prints
the best output tok/s within three p99 TTFT limits (3000 ms, the space's SLO; 5000 ms;
10000 ms), the running cap sglang resolved and the KV tokens.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

from tuner.engines import sglang as engine
from tuner.space.load import default_space_path, load_space

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle_measurer import OracleCache, default_store

ROOT = Path(__file__).resolve().parents[1]
LIMITS_MS = (3000.0, 5000.0, 10000.0)
# (draft steps, adaptive): off, fixed 1-5, and adaptive from each of its default candidates
SPECS = (
    (0, False),
    *((n, False) for n in range(1, 6)),
    *((n, True) for n in (1, 3, 5)),
)
HICACHE = (None, 2.0, 4.0, 8.0)


def _flags(
    steps: int, adaptive: bool, ratio: float | None, mem: float, cap: int | None
) -> dict[str, Any]:
    flags: dict[str, Any] = {
        "mem_fraction_static": mem,
        "mamba_radix_cache_strategy": "extra_buffer",
        "chunked_prefill_size": 4096,
    }
    if steps:
        flags.update(
            speculative_algorithm="NEXTN",
            speculative_num_steps=steps,
            speculative_eagle_topk=1,
            speculative_num_draft_tokens=steps + 1,
        )
        if adaptive:
            flags["speculative_adaptive"] = True
    if ratio is not None:
        flags.update(enable_hierarchical_cache=True, hicache_ratio=ratio)
    if cap is not None:
        flags["max_running_requests"] = cap
    return flags


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    a = p.parse_args()
    space = load_space(default_space_path())
    # the simulator's headless scheduler, as a benchmark runs it
    oracle = OracleCache(space, default_store())
    rows = []
    for (steps, adaptive), ratio, mem, cap in itertools.product(
        SPECS, HICACHE, (0.85, 0.90, 0.95), (None, 16)
    ):
        flags = _flags(steps, adaptive, ratio, mem, cap)
        args = engine.build_server_args(
            {"model_path": space.model_path, **space.fixed_flags, **flags}, space.engine_version
        )
        r = oracle(args)
        rows.append(
            {
                "steps": steps,
                "adaptive": adaptive,
                "hicache_ratio": ratio,
                "flags": flags,
                "launch_ok": r.launch_ok,
                "failure_kind": r.failure_kind,
                "running_cap": r.max_running_requests,
                "kv_tokens": r.max_total_num_tokens,
                "output_throughput": round(r.output_throughput, 1),
                "median_tpot_ms": round(float(r.summary.get("median_tpot_ms", 0.0)), 1),
                "p99_ttft_ms": round(r.p99_ttft_ms, 1),
                "cache_hit_rate": round(r.cache_hit_rate, 3),
            }
        )
    oracle.save()
    head = "  ".join(f"best<= {int(x)} ms (cap, KV)".ljust(30) for x in LIMITS_MS)
    print("   steps  hicache  " + head)
    for (steps, adaptive), ratio in itertools.product(SPECS, HICACHE):
        group = [
            r
            for r in rows
            if (r["steps"], r["adaptive"]) == (steps, adaptive) and r["hicache_ratio"] == ratio
        ]
        cells = []
        for limit in LIMITS_MS:
            ok = [r for r in group if r["launch_ok"] and 0 < r["p99_ttft_ms"] <= limit]
            if not ok:
                cells.append("none".ljust(30))
                continue
            best = max(ok, key=lambda r: r["output_throughput"])
            cells.append(
                f"{best['output_throughput']:.1f} ({best['running_cap']}, "
                f"{best['kv_tokens']})".ljust(30)
            )
        label = "off" if ratio is None else f"x{ratio:g}"
        spec = f"{steps}{' adapt' if adaptive else ''}"
        print(f"{spec:>8}  {label:>7}  " + "  ".join(cells))
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "seed_question.json").write_text(
        json.dumps({"space": space.name, "limits_ms": LIMITS_MS, "rows": rows}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
