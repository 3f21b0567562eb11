"""The default search against variants of its local search, same seeds, in one quality cell.

    python benchmarks/search_ab.py WORLD SPACE SEEDS JOBS OPTIMUM VARIANT...

VARIANT is a name, alone for the default, or NAME=FIELD:VALUE,... with fields of
`LocalSearchConfig` (tuner/study/local_search.py), e.g. `nowin=window_level:None`; a name of the
form METHOD/NAME runs that quality method (`model-free/edges=edge_level:0.5`) instead of the
default. OPTIMUM is the cell's optimum in tok/s (the quality benchmark's table gives it).
Prints, per variant, the median and per-seed fraction of the optimum after 20 and 40 launched
trials, and the launched trials until the best reached 99% of it (41: not in 40).
"""

from __future__ import annotations

import ast
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any


def _parse(variant: str) -> tuple[str, dict[str, Any]]:
    name, _, spec = variant.partition("=")
    fields = {}
    for item in filter(None, spec.split(",")):
        key, value = item.split(":")
        fields[key] = ast.literal_eval(value)
    return name, fields


def _study(task: tuple[str, str, int, str]) -> tuple[str, float, float, list[float]]:
    world, space_name, seed, variant = task
    from benchmarks.oracle_measurer import NoiseModel
    from benchmarks.quality import study
    from benchmarks.quality.methods import method_named
    from benchmarks.quality.truth import world_oracle
    from tuner.study.local_search import LocalSearchConfig
    from tuner.study.loop import quiet_optuna

    quiet_optuna()
    space, oracle = world_oracle(space_name, world)
    name, fields = _parse(variant)
    method_name = name.split("/")[0] if "/" in name else "default"
    method = method_named(method_name)
    if fields:
        method = replace(method, guide=(("local_search", LocalSearchConfig(**fields)),))
    run = study.run_study(method, seed, 40, space, oracle, NoiseModel(0.02, 0.02, 0.05))
    oracle.save()
    best, curve = 0.0, []
    for t in run.trials:
        if t.counted and t.truth and t.truth.feasible:
            best = max(best, t.truth.throughput)
        curve.append(best)
    return name, curve[min(19, len(curve) - 1)] if curve else 0.0, best, curve


def main(argv: list[str]) -> None:
    world, space, seeds, jobs = argv[0], argv[1], int(argv[2]), int(argv[3])
    optimum, variants = float(argv[4]), argv[5:]
    tasks = [(world, space, k, v) for v in variants for k in range(seeds)]
    with ProcessPoolExecutor(jobs) as pool:
        results = list(pool.map(_study, tasks))
    for variant in variants:
        name = _parse(variant)[0]
        at20 = [r[1] / optimum for r in results if r[0] == name]
        at40 = [r[2] / optimum for r in results if r[0] == name]
        # Launched trials until the best reached 99% of the optimum (41: never in 40).
        to99 = [
            next((i + 1 for i, b in enumerate(r[3]) if b >= 0.99 * optimum), 41)
            for r in results
            if r[0] == name
        ]
        print(
            f"{world} {space} {name}: @20 {statistics.median(at20):.3f} "
            f"{[round(x, 3) for x in at20]}  @40 {statistics.median(at40):.3f} "
            f"{[round(x, 3) for x in at40]}  to 99%: {statistics.median(to99):.0f} {to99}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
