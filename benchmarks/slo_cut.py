"""The SLO cut side by side: the quality benchmark's studies with it off and on, same seeds.

    python benchmarks/slo_cut.py WORLDS SPACES SEEDS JOBS

The SLO cut (tuner/trial/pruning.py `slo_cut`) stops a trial after a benchmark stage when even
its best case (each SLO's stage figure times the smallest stage-to-full-run factor the study's
completed trials showed, narrowed by 25%) still breaks an SLO. With it off, the stage pruner is
the one before it came, and no trial is learnt from by its stage figures (what the cut adds:
`record.learned_from`), so `off` reproduces the studies of the code before the cut.

For each world x space x seed it runs the default method for the whole 40 trials and with the
stop rule (`--min-gain 0.01`, as the quick start), each with the cut off and on, and prints per
cell: the full study's best noise-free SLO-feasible throughput as a share of the cell's best
seen (median, and the worst seed), its modelled GPU hours, the stopped study's GPU hours and
their share of its own full study's, and the stopped study's best over its full study's.
WORLDS and SPACES are comma-separated names (benchmarks/quality/worlds.py).

    python benchmarks/slo_cut.py ratios WORLDS SPACES SEEDS JOBS

measures what the cut is built on, with the cut off: over the completed trials of the default
studies, each SLO's full-run figure over its figure after each stage (the smallest such factor
a study has seen is what its cut assumes), and how many trials over a limit at a stage ended
within it, with the largest stage load (figure over limit) among them.
"""

from __future__ import annotations

import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

if __name__ == "__main__":  # run as a file: the benchmarks package lives one folder up
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.stop_variants import Outcome, _outcome

Runs = dict[str, Outcome]  # "full-off", "stop-off", "full-on", "stop-on"


def _cell_seed(task: tuple[str, str, int]) -> tuple[str, str, int, Runs]:
    world, space_name, seed = task
    from benchmarks.early_cut import Seen, pruner_config
    from benchmarks.oracle_measurer import NoiseModel, OracleCache
    from benchmarks.quality import study
    from benchmarks.quality.cli import default_store
    from benchmarks.quality.methods import METHODS
    from benchmarks.quality.truth import Oracle
    from benchmarks.quality.worlds import world_space
    from tuner.study.loop import quiet_optuna
    from tuner.trial import StagePrunerConfig

    quiet_optuna()
    space = world_space(space_name, world)
    oracle = Oracle(space, OracleCache(space, default_store()))
    noise = NoiseModel(0.02, 0.02, 0.05)
    default = next(m for m in METHODS if m.name == "default")
    out: Runs = {}
    for cut in ("off", "on"):
        config = StagePrunerConfig(slo_cut=cut == "on")
        for name, method in (("full", default), ("stop", replace(default, min_gain=0.01))):
            with pruner_config(config, Seen()):
                run = study.run_study(method, seed, 40, space, oracle, noise)
            out[f"{name}-{cut}"] = _outcome(run)
    oracle.save()
    return world, space_name, seed, out


def _stage_loads(task: tuple[str, str, int]) -> list[tuple[str, str, list[float], float]]:
    """(space, SLO metric, its load after each stage, its full-run load) of every completed
    trial of one default study with the cut off."""
    world, space_name, seed = task
    from benchmarks.early_cut import Seen, pruner_config
    from benchmarks.oracle_measurer import NoiseModel, OracleCache
    from benchmarks.quality import study
    from benchmarks.quality.cli import default_store
    from benchmarks.quality.methods import METHODS
    from benchmarks.quality.truth import Oracle
    from benchmarks.quality.worlds import world_space
    from tuner.results import record
    from tuner.study.loop import quiet_optuna
    from tuner.trial import StagePrunerConfig

    quiet_optuna()
    space = world_space(space_name, world)
    oracle = Oracle(space, OracleCache(space, default_store()))
    default = next(m for m in METHODS if m.name == "default")
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
    worlds, spaces = argv[0].split(","), argv[1].split(",")
    seeds, jobs = int(argv[2]), int(argv[3])
    tasks = [(w, s, k) for s in spaces for w in worlds for k in range(seeds)]
    with ProcessPoolExecutor(jobs) as pool:
        results = list(pool.map(_cell_seed, tasks))
    cells: dict[tuple[str, str], list[Runs]] = {}
    for world, space, _seed, out in results:
        cells.setdefault((world, space), []).append(out)
    print(
        "| world | space | full study's best (worst seed), off -> on | its GPU h, off -> on "
        "| stopped: GPU h, off -> on | stopped: share of full (max), off -> on "
        "| stopped: best / full (worst), off -> on | seeds whose full best fell / rose |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (world, space), outs in cells.items():
        top = max(o[k][0] for o in outs for k in o) or 1.0

        def med(values: list[float]) -> float:
            return statistics.median(values)

        cols = []
        for cut in ("off", "on"):
            full = [o[f"full-{cut}"] for o in outs]
            stop = [o[f"stop-{cut}"] for o in outs]
            shares = [s[1] / f[1] for s, f in zip(stop, full, strict=True)]
            kept = [s[0] / f[0] if f[0] else 1.0 for s, f in zip(stop, full, strict=True)]
            cols.append(
                (
                    f"{med([f[0] / top for f in full]):.3f} ({min(f[0] for f in full) / top:.3f})",
                    f"{med([f[1] / 3600 for f in full]):.2f}",
                    f"{med([s[1] / 3600 for s in stop]):.2f}",
                    f"{med(shares):.0%} ({max(shares):.0%})",
                    f"{med(kept):.3f} ({min(kept):.3f})",
                )
            )
        fell = sum(1 for o in outs if o["full-on"][0] < 0.995 * o["full-off"][0])
        rose = sum(1 for o in outs if o["full-on"][0] > 1.005 * o["full-off"][0])
        row = " | ".join(f"{a} -> {b}" for a, b in zip(cols[0], cols[1], strict=True))
        print(f"| {world} | {space} | {row} | {fell} / {rose} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
