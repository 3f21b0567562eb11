"""The SLO cut side by side: the quality benchmark's studies with it off and on, same seeds.

    python benchmarks/slo_cut.py WORLDS SPACES SEEDS JOBS

The SLO cut (tuner/trial/pruning.py `slo_cut`) stops a trial after a benchmark stage when even
its best case (each SLO's stage figure times the smallest stage-to-full-run factor the study's
completed trials showed, narrowed by 25%) still breaks an SLO. With it off, the stage pruner is
the one before it came, and no trial is learnt from by its stage figures (what the cut adds:
`record.learned_from`), so `off` reproduces the studies of the code before the cut.

It is `python benchmarks/off_on.py slo-cut WORLDS SPACES SEEDS JOBS` (what it prints is
described there). WORLDS and SPACES are comma-separated names (benchmarks/quality/worlds.py).

    python benchmarks/slo_cut.py ratios WORLDS SPACES SEEDS JOBS

measures what the cut is built on, with the cut off: over the completed trials of the default
studies, each SLO's full-run figure over its figure after each stage (the smallest such factor
a study has seen is what its cut assumes), and how many trials over a limit at a stage ended
within it, with the largest stage load (figure over limit) among them.
"""

from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

if __name__ == "__main__":  # run as a file: the benchmarks package lives one folder up
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.off_on import main as off_on


def _stage_loads(task: tuple[str, str, int]) -> list[tuple[str, str, list[float], float]]:
    """(space, SLO metric, its load after each stage, its full-run load) of every completed
    trial of one default study with the cut off."""
    world, space_name, seed = task
    from benchmarks.early_cut import Seen, pruner_config
    from benchmarks.oracle_measurer import NoiseModel
    from benchmarks.quality import study
    from benchmarks.quality.methods import method_named
    from benchmarks.quality.truth import world_oracle
    from tuner.results import record
    from tuner.study.loop import quiet_optuna
    from tuner.trial import StagePrunerConfig

    quiet_optuna()
    space, oracle = world_oracle(space_name, world)
    default = method_named("default")
    seen = Seen()
    with pruner_config(StagePrunerConfig(slo_cut=False), seen):
        study.run_study(default, seed, 40, space, oracle, NoiseModel(0.02, 0.02, 0.05))
    oracle.save()
    rows = []
    for t in seen.study.get_trials(deepcopy=False) if seen.study else []:
        stages = t.user_attrs.get(record.STAGES) or []
        metrics = t.user_attrs.get(record.METRICS) or {}
        if t.state.name != "COMPLETE" or record.DUPLICATE_OF in t.user_attrs:
            continue
        for slo in space.slos:
            figures = [s.get(slo.metric) for s in stages]
            final = metrics.get(slo.metric)
            if final and figures and all(figures):
                loads = [float(f) / slo.limit for f in figures[:-1]]
                rows.append((space_name, slo.metric, loads, float(final) / slo.limit))
    return rows


def ratios(argv: list[str]) -> None:
    worlds, spaces = argv[0].split(","), argv[1].split(",")
    tasks = [(w, s, k) for s in spaces for w in worlds for k in range(int(argv[2]))]
    with ProcessPoolExecutor(int(argv[3])) as pool:
        found = [row for rows in pool.map(_stage_loads, tasks) for row in rows]
    print("| space | SLO | stage | trials | full run / stage: min, 5th pct, median, max "
          "| over the limit at the stage, within it at the end (largest stage load) |")  # fmt: skip
    print("|---|---|---:|---:|---|---|")
    for space, metric in dict.fromkeys((r[0], r[1]) for r in found):
        mine = [r for r in found if r[0] == space and r[1] == metric]
        for stage in range(len(mine[0][2])):
            at = [(r[2][stage], r[3]) for r in mine if len(r[2]) > stage]
            factors = sorted(final / load for load, final in at)
            back = [load for load, final in at if load > 1 >= final]
            print(
                f"| {space} | {metric} | {stage + 1} | {len(at)} | {factors[0]:.2f}, "
                f"{factors[len(factors) // 20]:.2f}, {factors[len(factors) // 2]:.2f}, "
                f"{factors[-1]:.2f} | {len(back)} ({max(back, default=0.0):.2f}) |"
            )


def main(argv: list[str]) -> None:
    if argv and argv[0] == "ratios":
        ratios(argv[1:])
        return
    off_on(["slo-cut", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
