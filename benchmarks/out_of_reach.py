"""Which of the quality benchmark's stopped studies the SLOs-out-of-reach rule ends, and what
the same seed's full 40 trials found there.

    python benchmarks/out_of_reach.py WORLDS SPACES SEEDS JOBS [MARGIN]

For each world x space x seed it runs the default method with the stop rule on (`--min-gain
`'s default, as the quick start), with `StopRule.out_of_reach` set to MARGIN (default: the shipped
value), and notes every study the rule stopped (tuner/study/stopping.py). For those it runs
the full 40 trials too and prints the launches, the stopped study's best noise-free
SLO-feasible throughput, the full study's, and the launch at which the full study first met
the SLOs (41: never). A stop is a loss when the full study met the SLOs at all. WORLDS and
SPACES are comma-separated names (benchmarks/quality/worlds.py).
"""

from __future__ import annotations

import functools
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

if __name__ == "__main__":  # run as a file: the benchmarks package lives one folder up
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

# world, space, seed, launches, stopped best, full best, first launch within the SLOs, reason
Hit = tuple[str, str, int, int, float, float, int, str]


def _cell_seed(task: tuple[str, str, int, float | None]) -> Hit | None:
    world, space_name, seed, margin = task
    from benchmarks.off_on import outcome
    from benchmarks.oracle_measurer import NoiseModel
    from benchmarks.quality import study
    from benchmarks.quality.methods import method_named
    from benchmarks.quality.truth import world_oracle
    from tuner.study import stopping
    from tuner.study.loop import quiet_optuna

    quiet_optuna()
    space, oracle = world_oracle(space_name, world)
    noise = NoiseModel(0.02, 0.02, 0.05)
    default = method_named("default")
    reasons: list[str] = []
    rule = (
        stopping.StopRule
        if margin is None
        else functools.partial(stopping.StopRule, out_of_reach=margin)
    )
    spied = stopping._out_of_reach

    def spy(*args: object) -> str | None:
        reason = spied(*args)  # type: ignore[arg-type]
        if reason is not None:
            reasons.append(reason)
        return reason

    stopping._out_of_reach = spy  # type: ignore[assignment]
    study.StopRule = rule  # type: ignore[misc]
    try:
        stop = replace(default, min_gain=stopping.DEFAULT_MIN_GAIN)
        stopped = study.run_study(stop, seed, 40, space, oracle, noise)
    finally:
        stopping._out_of_reach = spied
        study.StopRule = stopping.StopRule  # type: ignore[misc]
    if not reasons:
        oracle.save()
        return None
    full = outcome(study.run_study(default, seed, 40, space, oracle, noise))
    oracle.save()
    first = next((i + 1 for i, best in enumerate(full[3]) if best > 0), 41)
    mine = outcome(stopped)
    return (
        world,
        space_name,
        seed,
        mine[2],
        mine[0],
        full[0],
        first,
        reasons[0],
    )


def main(argv: list[str]) -> None:
    worlds, spaces = argv[0].split(","), argv[1].split(",")
    seeds, jobs = int(argv[2]), int(argv[3])
    margin = float(argv[4]) if len(argv) > 4 else None
    tasks = [(w, s, k, margin) for w in worlds for s in spaces for k in range(seeds)]
    with ProcessPoolExecutor(jobs) as pool:
        hits = [h for h in pool.map(_cell_seed, tasks) if h is not None]
    print(f"{len(hits)} of {len(tasks)} stopped studies ended by the out-of-reach rule")
    print("| world | space | seed | launches | stopped best | full best | full met the SLOs at |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for world, space, seed, launched, best, full, first, reason in hits:
        met = "never" if first > 40 else f"launch {first}"
        print(f"| {world} | {space} | {seed} | {launched} | {best:.1f} | {full:.1f} | {met} |")
        print(f"|  | {reason} | | | | | |")


if __name__ == "__main__":
    main(sys.argv[1:])
