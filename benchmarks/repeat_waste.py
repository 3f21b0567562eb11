"""How many launches of a study re-measure a run an earlier launch already measured.

    python benchmarks/repeat_waste.py WORLD SPACE SEEDS JOBS [METHOD]

Runs the quality method (default: `default`) on SEEDS seeds of one quality cell, through the
real objective and study loop, measured by the oracle. A launch is a repeat when its noise-free
figures (throughput, latency and every SLO metric) equal an earlier launch's: the flags differ,
the run does not. Prints, per seed, the launches, the repeats among them, and the params that
differed; then which params the repeats differed in, over all seeds.
"""

from __future__ import annotations

import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def _study(task: tuple[str, str, int, str]) -> tuple[int, int, list[tuple[int, int, list[str]]]]:
    world, space_name, seed, method_name = task
    from benchmarks.oracle_measurer import NoiseModel
    from benchmarks.quality import study
    from benchmarks.quality.methods import method_named
    from benchmarks.quality.truth import world_oracle
    from tuner.study.loop import quiet_optuna

    quiet_optuna()
    space, oracle = world_oracle(space_name, world)
    method = method_named(method_name)
    run = study.run_study(method, seed, 40, space, oracle, NoiseModel(0.02, 0.02, 0.05))
    oracle.save()
    seen: dict[tuple[Any, ...], tuple[int, dict[str, Any]]] = {}
    repeats = []
    launched = [t for t in run.trials if t.truth is not None and t.truth.launch_ok]
    for t in launched:
        assert t.truth is not None
        key = (t.truth.throughput, t.truth.latency, t.truth.slo_values)
        if key in seen:
            number, params = seen[key]
            names = sorted(
                k for k in set(params) | set(t.params) if params.get(k, "-") != t.params.get(k, "-")
            )
            repeats.append((t.number, number, names))
        else:
            seen[key] = (t.number, t.params)
    return seed, len(launched), repeats


def main(argv: list[str]) -> None:
    world, space, seeds, jobs = argv[0], argv[1], int(argv[2]), int(argv[3])
    method = argv[4] if len(argv) > 4 else "default"
    tasks = [(world, space, k, method) for k in range(seeds)]
    with ProcessPoolExecutor(jobs) as pool:
        results = list(pool.map(_study, tasks))
    by_names: Counter[tuple[str, ...]] = Counter()
    total = wasted = 0
    for seed, launched, repeats in results:
        total += launched
        wasted += len(repeats)
        pairs = ", ".join(f"{a}={b} ({'/'.join(n)})" for a, b, n in repeats)
        print(f"seed {seed}: {launched} launched, {len(repeats)} repeats: {pairs}")
        by_names.update(tuple(n) for _, _, n in repeats)
    print(f"{world} {space} {method}: {wasted} of {total} launches repeated a measured run")
    for names, count in by_names.most_common():
        print(f"  {count:3d}  {' + '.join(names) or '(same params)'}")


if __name__ == "__main__":
    main(sys.argv[1:])
