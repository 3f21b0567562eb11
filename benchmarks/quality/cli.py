"""The command line: parse the options, find the optimum, run the studies, score, write.

    python -m benchmarks.quality --budgets 20,40 --seeds 3 --served 0

`main` is what `python -m benchmarks.quality` and benchmarks/tuner_quality.py call.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.oracle_measurer import NoiseModel, OracleCache, default_store
from benchmarks.quality.matrix import MATRIX_METHODS, MATRIX_SPACES, run_matrix
from benchmarks.quality.methods import METHODS, ROOT, Options
from benchmarks.quality.report import jsonable, markdown, plot, to_json
from benchmarks.quality.scoring import collect
from benchmarks.quality.served import served_check
from benchmarks.quality.study import run_study
from benchmarks.quality.truth import Oracle, find_optimum, summarize_optimum
from benchmarks.quality.worlds import SPACES, load_cell, world_file, world_names
from tuner.space import default_space_path
from tuner.study import quiet_optuna

_TITLE = "How good is the tuner: what it finds, and what it costs, against the simulator's optimum."


def run(opts: Options) -> dict[str, Any]:
    started = time.perf_counter()
    quiet_optuna()
    seed_space = load_cell(opts.space_path or default_space_path())
    space, notes = seed_space, list[str]()
    oracle = Oracle(space, OracleCache(space, opts.oracle_store))
    noise = NoiseModel(0.02 * opts.noise, 0.02 * opts.noise, 0.05 * opts.noise)
    print("oracle optimum: dense grid + refinement ...", flush=True)
    searched = find_optimum(oracle, opts.dense_points, opts.refine)
    print(
        f"oracle best {searched.best_throughput:.1f} tok/s over {searched.configurations} "
        f"configurations ({searched.seconds:.0f} s)",
        flush=True,
    )
    methods = [m for m in METHODS if m.name in opts.methods]
    runs = []
    budget = max(opts.budgets)
    for method in methods:
        for seed in range(opts.seeds):
            r = run_study(method, seed, budget, space, oracle, noise)
            runs.append(r)
            print(f"{method.name:20s} seed {seed}: {r.wall_s:5.1f} s", flush=True)
    # What the studies launched joins the truth: a configuration they found beyond the
    # search would raise the optimum (and is reported), never push a fraction above 1.
    oracle.save()
    optimum = summarize_optimum(oracle, searched.seconds)
    optimum.studies_beat_search = optimum.best_throughput > searched.best_throughput
    optimum.searched_configurations = searched.configurations
    table = collect(runs, optimum, opts.budgets)
    checks = []
    if opts.served:
        checks = served_check(space, oracle, optimum, opts.served, opts.served_time_scale)
        for c in checks:
            print(f"served/oracle {c.label}: {c.ratios or c.failure}", flush=True)
    wall = time.perf_counter() - started
    opts.out.mkdir(parents=True, exist_ok=True)
    (opts.out / "tuner_quality.md").write_text(
        markdown(table, optimum, space, notes, checks, opts, wall)
    )
    data = to_json(table, optimum, runs, checks, notes, space, opts, wall)
    (opts.out / "tuner_quality.json").write_text(json.dumps(data, indent=1, default=jsonable))
    if opts.plot:
        title = f"Tuner quality on the simulator: {space.name}, {opts.seeds} seeds"
        plot(runs, optimum, budget, opts.out / "tuner_quality.png", title)
    print((opts.out / "tuner_quality.md").read_text())
    print("Headline:\n" + "\n".join(data["headline"]))
    return data


def parse_args(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(description=_TITLE)
    p.add_argument("--budgets", default="20,40,80,200", help="comma-separated trial budgets")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument(
        "--other-seeds",
        type=int,
        default=None,
        help="seeds of the matrix's cells on spaces other than the seed's (default: --seeds)",
    )
    p.add_argument(
        "--methods",
        default=",".join(Options.methods),
        help="comma-separated; gp and gp-no-guide (GPSampler, needs PyTorch) only when named",
    )
    p.add_argument("--space", type=Path, default=None, help="search-space file (default: seed)")
    p.add_argument("--noise", type=float, default=1.0, help="scale of the measurement noise")
    p.add_argument("--dense-points", type=int, default=6, help="values per numeric range")
    p.add_argument("--no-refine", action="store_true", help="dense grid only, no refinement")
    p.add_argument("--served", type=int, default=7, help="configurations served for real")
    p.add_argument("--served-time-scale", type=float, default=50.0)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument(
        "--worlds",
        default="",
        help="comma-separated simulator worlds (benchmarks/worlds/*.yaml, or all; "
        "heldout/world-d: a held-out one): run the world x space matrix instead of one space",
    )
    p.add_argument(
        "--spaces",
        default=",".join(MATRIX_SPACES),
        help=f"comma-separated spaces of the matrix ({', '.join(SPACES)})",
    )
    p.add_argument("--jobs", type=int, default=1, help="matrix cells run at once (processes)")
    p.add_argument(
        "--matrix",
        action="store_true",
        help="the preset matrix: every world x seed-3s,seed-10s,open-loop,tpot-8b, default, "
        "default-stop and model-free, 10 seeds on the seed's spaces and 5 on the others, "
        "budgets 20,40, --dense-points 2 --no-refine, no served check, no plot",
    )
    p.add_argument("--fast", action="store_true", help="tiny budgets, 1 seed, no served check")
    p.add_argument(
        "--resume",
        action="store_true",
        help="matrix: keep the cells a run into the same --out finished, run the others",
    )
    p.add_argument(
        "--no-oracle-cache",
        action="store_true",
        help=f"do not keep oracle results between runs (kept in {default_store()})",
    )
    a = p.parse_args(argv)
    opts = Options(
        budgets=tuple(sorted(int(b) for b in a.budgets.split(","))),
        seeds=a.seeds,
        methods=tuple(a.methods.split(",")),
        space_path=a.space,
        noise=a.noise,
        dense_points=a.dense_points,
        refine=not a.no_refine,
        served=a.served,
        served_time_scale=a.served_time_scale,
        out=a.out,
        plot=not a.no_plot,
        worlds=tuple(w for w in a.worlds.split(",") if w),
        spaces=tuple(a.spaces.split(",")),
        jobs=a.jobs,
        oracle_store=None if a.no_oracle_cache else default_store(),
        other_seeds=a.other_seeds,
        resume=a.resume,
    )
    if a.matrix:
        opts = Options(
            **{
                **asdict(opts),
                "worlds": opts.worlds or ("all",),
                "methods": MATRIX_METHODS,
                "seeds": 10,
                "other_seeds": 5,
                "budgets": (20, 40),
                "dense_points": 2,
                "refine": False,
                "served": 0,
                "plot": False,
            }
        )
    bad_worlds = {w for w in opts.worlds if w != "all" and not world_file(w).is_file()}
    if bad_worlds:
        p.error(f"unknown worlds {sorted(bad_worlds)}; known: {world_names()}")
    bad_spaces = set(opts.spaces) - set(SPACES)
    if bad_spaces:
        p.error(f"unknown spaces {sorted(bad_spaces)}; known: {list(SPACES)}")
    unknown = set(opts.methods) - {m.name for m in METHODS}
    if unknown:
        p.error(f"unknown methods {sorted(unknown)}; known: {[m.name for m in METHODS]}")
    if a.fast:
        # The test suite's run: every categorical choice, one value per numeric range (its
        # high end: grid.py), 72 configurations of the seed space instead of the 800 of two
        # values (3 minutes of oracle on 2 cores); the studies' launches join the optimum.
        opts = Options(
            **{
                **asdict(opts),
                "budgets": (5, 10),
                "seeds": 1,
                "dense_points": 1,
                "refine": False,
                "served": 0,
            }
        )
    return opts


def main(argv: list[str] | None = None) -> None:
    opts = parse_args(argv)
    if opts.worlds:
        run_matrix(opts)
    else:
        run(opts)
