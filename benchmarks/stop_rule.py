"""What the stop rule saves and loses: studies that stop by themselves against 40 full trials.

    python benchmarks/stop_rule.py                 # seed space, 5 seeds (docs/quality.md)
    python benchmarks/stop_rule.py --seeds 10 --space search_spaces/qwen3-8b-h200.yaml

For each seed, the same study twice through the quality benchmark's harness
(benchmarks/tuner_quality.py: the real objective and study loop, the simulator's oracle with
measurement noise, its GPU-time model): once with `--min-gain 0` for the whole budget of 40
launched trials, once with the default stop rule (tuner/study/stopping.py, `--min-gain`'s
default).
Both in two worlds: the estimate right, and the estimate wrong (bandwidth x0.6, acceptance x0.7,
prefix cache ignored). A study's first N trials do not depend on whether it stops later, so the
stopped study is a prefix of the full one.

Per seed: trials launched, modelled GPU hours, and quality as a share of what the 40 trials found:
the best SLO-feasible throughput (noise-free, from the oracle) and the hypervolume of the feasible
front (noise-free points, reference latency 1.1 x the largest of either study). The target of
issue 21: >= 0.99 of the 40 trials' best in <= 50% of their GPU hours.

Output: a table on stdout, and benchmarks/results/stop_rule.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a file: the benchmarks package lives one folder up
    sys.path[0] = str(Path(__file__).resolve().parent.parent)
from benchmarks.oracle_measurer import NoiseModel, OracleCache
from benchmarks.quality.methods import METHODS
from benchmarks.quality.study import StudyRun, run_study
from benchmarks.quality.truth import Oracle
from benchmarks.quality.truth import area as hypervolume
from tuner.space.load import default_space_path, load_space
from tuner.study.loop import quiet_optuna
from tuner.study.stopping import DEFAULT_MIN_GAIN

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 40
PAIRS = (("default", "default-stop"), ("wrong-estimate", "wrong-estimate-stop"))


def _points(run: StudyRun) -> list[tuple[float, float]]:
    return [
        (t.truth.throughput, t.truth.latency)
        for t in run.trials
        if t.counted and t.truth is not None and t.truth.launch_ok
    ]


def compare(full: StudyRun, stopped: StudyRun) -> dict[str, Any]:
    full_points, stop_points = _points(full), _points(stopped)
    reference = 1.1 * max(p[1] for p in full_points + stop_points)
    full_gpu = sum(t.gpu_s for t in full.trials) / 3600
    stop_gpu = sum(t.gpu_s for t in stopped.trials) / 3600
    return {
        "seed": full.seed,
        "trials": len(stopped.trials),
        "full_trials": len(full.trials),
        "gpu_hours": stop_gpu,
        "full_gpu_hours": full_gpu,
        "gpu_share": stop_gpu / full_gpu,
        "best_share": max(p[0] for p in stop_points) / max(p[0] for p in full_points),
        "hv_share": hypervolume(stop_points, reference) / hypervolume(full_points, reference),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--space", type=Path, default=None)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "stop_rule.json")
    a = p.parse_args(argv)
    quiet_optuna()
    started = time.perf_counter()
    space = load_space(a.space or default_space_path())
    oracle = Oracle(space, OracleCache(space))
    noise = NoiseModel()  # tuner_quality's default noise
    by_name = {m.name: m for m in METHODS}
    results: dict[str, list[dict[str, Any]]] = {}
    for full_name, stop_name in PAIRS:
        rows = results.setdefault(full_name, [])
        for seed in range(a.seeds):
            full = run_study(by_name[full_name], seed, BUDGET, space, oracle, noise)
            stopped = run_study(by_name[stop_name], seed, BUDGET, space, oracle, noise)
            rows.append(compare(full, stopped))
            r = rows[-1]
            print(
                f"{full_name:15s} seed {seed}: stopped at {r['trials']}/{r['full_trials']}, "
                f"GPU {r['gpu_hours']:.2f}/{r['full_gpu_hours']:.2f} h ({r['gpu_share']:.0%}), "
                f"best {r['best_share']:.3f}, hypervolume {r['hv_share']:.3f}",
                flush=True,
            )
    gain = f"--min-gain {DEFAULT_MIN_GAIN:g}"
    print(f"\n{space.name}, {a.seeds} seeds, {BUDGET}-trial budget, {gain} vs 0")
    print("| world | trials (median, range) | GPU h share (median, max) | best (median, min) |"
          " hypervolume (median, min) |")  # fmt: skip
    print("|---|---|---|---|---|")
    summary = {}
    for world, rows in results.items():
        trials = [r["trials"] for r in rows]
        gpu = [r["gpu_share"] for r in rows]
        best = [r["best_share"] for r in rows]
        hv = [r["hv_share"] for r in rows]
        summary[world] = {
            "trials_median": statistics.median(trials),
            "gpu_share_median": statistics.median(gpu),
            "gpu_share_max": max(gpu),
            "best_share_median": statistics.median(best),
            "best_share_min": min(best),
            "hv_share_median": statistics.median(hv),
            "hv_share_min": min(hv),
        }
        print(
            f"| {world} | {statistics.median(trials):g} ({min(trials)}-{max(trials)}) | "
            f"{statistics.median(gpu):.0%} ({max(gpu):.0%}) | "
            f"{statistics.median(best):.3f} ({min(best):.3f}) | "
            f"{statistics.median(hv):.3f} ({min(hv):.3f}) |"
        )
    wall = time.perf_counter() - started
    print(f"({wall:.0f} s)")
    data = {"space": space.name, "seeds": a.seeds, "budget": BUDGET, "summary": summary}
    data |= {"per_seed": results, "wall_s": wall}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(data, indent=1))
    return data


if __name__ == "__main__":
    main()
