"""The stop rule with other settings, side by side on the quality benchmark's cells.

For each world x space x seed it runs the default method for the whole 40 trials, then once per
variant with the stop rule on (`--min-gain`'s default) and that variant's window, minimum trials and
measure (tuner/study/stopping.py `StopRule`). It prints, per cell and variant, the trials the
stopped study launched, its modelled GPU hours as a share of the full study's, and its best
noise-free SLO-feasible throughput over the full study's (median, the worst seed, and the seeds
that keep less than 98% of it).

    python benchmarks/stop_variants.py WORLDS SPACES SEEDS JOBS VARIANT...

VARIANT is PATIENCE:MIN_TRIALS[:MEASURE[:MIN_GAIN[:MAX_CHECKS]]], e.g. `8:12` (the shipped
rule), `6:10:throughput`, `8:12:front:0.02` (a move of the front must exceed 2%; the
default otherwise) or `8:12:front:0.01:1` (at most one trial the estimate expects a gain from per
window; 2 otherwise).
WORLDS and SPACES are comma-separated names (benchmarks/quality/worlds.py).
"""

from __future__ import annotations

import functools
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

if __name__ == "__main__":  # run as a file: the benchmarks package lives one folder up
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.off_on import Outcome, front_kept, outcome

LOSS = 0.02  # issue 21: no stopped study may keep less than 98% of its full study's best


def _cell_seed(task: tuple[str, str, int, list[str]]) -> tuple[str, str, dict[str, Outcome]]:
    world, space_name, seed, variants = task
    from benchmarks.oracle_measurer import NoiseModel
    from benchmarks.quality import study
    from benchmarks.quality.methods import method_named
    from benchmarks.quality.truth import world_oracle
    from tuner.study.loop import quiet_optuna
    from tuner.study.stopping import DEFAULT_MIN_GAIN, StopRule

    quiet_optuna()
    space, oracle = world_oracle(space_name, world)
    noise = NoiseModel(0.02, 0.02, 0.05)
    default = method_named("default")
    out = {"full": outcome(study.run_study(default, seed, 40, space, oracle, noise))}
    for variant in variants:
        fields = variant.split(":")
        patience, min_trials, measure, min_gain, checks = (
            fields + ["front", str(DEFAULT_MIN_GAIN), "2"][len(fields) - 2 :]
        )
        study.StopRule = functools.partial(  # type: ignore[misc]
            StopRule,
            patience=int(patience),
            min_trials=int(min_trials),
            measure=measure,
            max_checks=int(checks),
        )
        try:
            stopped = study.run_study(
                replace(default, min_gain=float(min_gain)), seed, 40, space, oracle, noise
            )
        finally:
            study.StopRule = StopRule  # type: ignore[misc]
        out[variant] = outcome(stopped)
    oracle.save()
    return world, space_name, out


def main(argv: list[str]) -> None:
    worlds, spaces = argv[0].split(","), argv[1].split(",")
    seeds, jobs, variants = int(argv[2]), int(argv[3]), argv[4:]
    tasks = [(w, s, k, variants) for w in worlds for s in spaces for k in range(seeds)]
    with ProcessPoolExecutor(jobs) as pool:
        results = list(pool.map(_cell_seed, tasks))
    cells: dict[tuple[str, str], list[dict[str, Outcome]]] = {}
    for world, space, out in results:
        cells.setdefault((world, space), []).append(out)
    print(
        "| world | space | variant | trials | GPU h share median (max) | best / full (worst) "
        "| seeds losing > 2% | front kept (worst) |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for (world, space), outs in cells.items():
        for v in variants:
            shares = [o[v][1] / o["full"][1] for o in outs]
            kept = [o[v][0] / o["full"][0] if o["full"][0] else 1.0 for o in outs]
            fronts = [front_kept(o[v], o["full"]) for o in outs]
            trials = statistics.median(o[v][2] for o in outs)
            lost = [i for i, k in enumerate(kept) if k < 1 - LOSS]
            print(
                f"| {world} | {space} | {v} | {trials:.0f} | {statistics.median(shares):.0%} "
                f"({max(shares):.0%}) | {statistics.median(kept):.3f} ({min(kept):.3f}) "
                f"| {len(lost)}{' (seeds ' + ', '.join(map(str, lost)) + ')' if lost else ''} "
                f"| {statistics.median(fronts):.3f} ({min(fronts):.3f}) |"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
