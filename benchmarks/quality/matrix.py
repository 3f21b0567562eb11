"""The world x space matrix: each cell's optimum, its studies, and the table of fractions.

    python -m benchmarks.quality --matrix                       # the preset below
    python -m benchmarks.quality --worlds shipped,decay --spaces seed-3s,seed-10s --seeds 3

Each cell (a world of `benchmarks/worlds/`, a space of `benchmarks.quality.worlds.SPACES`) is
judged on its own: its optimum comes from the truth code (dense grid, refinement when asked,
united with every configuration the cell's studies launched), and each study's best SLO-feasible
configuration counts at its noise-free throughput over that cell's optimum. Cells run in
`--jobs` processes; the report is rewritten after each cell, so a run cut short keeps the cells
it finished.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.oracle_measurer import NoiseModel, OracleCache
from benchmarks.quality.methods import METHODS, Options
from benchmarks.quality.scoring import collect, spread
from benchmarks.quality.study import run_study
from benchmarks.quality.truth import Oracle, find_optimum, summarize_optimum
from benchmarks.quality.worlds import world_names, world_space
from tuner.study import quiet_optuna

# What `--matrix` runs: every world, the three spaces, the default and model-free search.
MATRIX_SPACES = ("seed-3s", "seed-10s", "open-loop", "tpot-8b")
# The default, the same with the stop rule (what `tuner optimize` does: its trials and GPU
# hours against the full 40), and without any estimate.
MATRIX_METHODS = ("default", "default-stop", "model-free")
SEED_SPACES = ("seed-3s", "seed-10s")  # these get --seeds; the others --other-seeds
# In this order, so that a run cut short has the seed's world and the hardest ones first.
MATRIX_WORLDS = (
    "shipped",
    "decay",
    "unknown-gpu",
    "slow-constants",
    "effects-strong",
    "hicache-slow",
)

# Worlds whose error is one of structure, which the estimate's refit cannot absorb by scaling.
STRUCTURAL = {
    "decay": "acceptance decays x0.85 per draft position; the estimate's chain is flat",
    "hicache-slow": "HiCache transfers 4x slower than the spec table's host link",
    "unknown-gpu": "a GPU the spec table lacks: the estimate starts at the table's means",
}


@dataclass
class Cell:
    world: str
    space: str
    best_throughput: float
    best_params: dict[str, Any]
    configurations: int
    studies_beat_search: bool
    # method -> budget -> per-seed fraction of the optimum (and trials to 95%, None: never)
    fractions: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    trials_to_95: dict[str, list[int | None]] = field(default_factory=dict)  # in the JSON
    # method -> per-seed GPU hours (modelled) of the whole study, to 95%, and trials launched
    gpu_hours: dict[str, list[float]] = field(default_factory=dict)
    gpu_hours_to_95: dict[str, list[float | None]] = field(default_factory=dict)
    launched: dict[str, list[int]] = field(default_factory=dict)
    wall_s: float = 0.0


def run_cell(world: str, space_name: str, opts: Options) -> Cell:
    started = time.perf_counter()
    quiet_optuna()
    space = world_space(space_name, world)
    oracle = Oracle(space, OracleCache(space, opts.oracle_store))
    noise = NoiseModel(0.02 * opts.noise, 0.02 * opts.noise, 0.05 * opts.noise)
    searched = find_optimum(oracle, opts.dense_points, opts.refine)
    oracle.save()
    methods = [m for m in METHODS if m.name in opts.methods]
    budget = max(opts.budgets)
    seeds = range(
        opts.seeds if space_name in SEED_SPACES or opts.other_seeds is None else opts.other_seeds
    )
    runs = [run_study(m, s, budget, space, oracle, noise) for m in methods for s in seeds]
    oracle.save()
    optimum = summarize_optimum(oracle, searched.seconds)
    table = collect(runs, optimum, opts.budgets)
    return Cell(
        world=world,
        space=space_name,
        best_throughput=optimum.best_throughput,
        best_params=optimum.best_params,
        configurations=optimum.configurations,
        studies_beat_search=optimum.best_throughput > searched.best_throughput,
        fractions={
            name: {b: [f.best_fraction for f in figs] for b, figs in by_budget.items()}
            for name, by_budget in table.items()
        },
        trials_to_95={name: [f.trials_to_reach for f in by_budget[budget]]
                      for name, by_budget in table.items()},
        gpu_hours={name: [f.gpu_hours for f in by_budget[budget]]
                   for name, by_budget in table.items()},
        gpu_hours_to_95={name: [f.gpu_hours_to_reach for f in by_budget[budget]]
                         for name, by_budget in table.items()},
        launched={m.name: [len(r.trials) for r in runs if r.method == m.name] for m in methods},
        wall_s=time.perf_counter() - started,
    )  # fmt: skip


def cell_from_json(data: dict[str, Any]) -> Cell:
    """A cell as `run_matrix` wrote it (JSON keys are strings: budgets back to ints)."""
    cell = Cell(**data)
    cell.fractions = {m: {int(b): v for b, v in by_b.items()} for m, by_b in cell.fractions.items()}
    return cell


def _all_worlds() -> list[str]:
    known = world_names()
    return [w for w in MATRIX_WORLDS if w in known] + [w for w in known if w not in MATRIX_WORLDS]


def run_matrix(opts: Options) -> dict[str, Any]:
    started = time.perf_counter()
    worlds = list(opts.worlds) if opts.worlds != ("all",) else _all_worlds()
    jobs = [(w, s) for w in worlds for s in opts.spaces]
    cells: list[Cell] = []
    opts.out.mkdir(parents=True, exist_ok=True)
    earlier_s = 0.0
    saved = opts.out / "tuner_quality_worlds.json"
    if opts.resume and saved.is_file():
        # Cells an earlier run finished (with its seeds) are kept; only the others run.
        data = json.loads(saved.read_text())
        cells = [c for c in map(cell_from_json, data["cells"]) if (c.world, c.space) in jobs]
        earlier_s = float(data.get("wall_s", 0.0))
        print(f"resuming: {len(cells)} cells kept from {saved}", flush=True)
    done = {(c.world, c.space) for c in cells}

    def write() -> dict[str, Any]:
        wall = time.perf_counter() - started + earlier_s
        order = {job: i for i, job in enumerate(jobs)}
        cells.sort(key=lambda c: order[(c.world, c.space)])
        (opts.out / "tuner_quality_worlds.md").write_text(matrix_markdown(cells, jobs, opts, wall))
        data = {
            "options": {**asdict(opts), "out": None, "space_path": None, "oracle_store": None},
            "cells": [asdict(c) for c in cells],
            "missing": [list(j) for j in jobs if j not in {(c.world, c.space) for c in cells}],
            "wall_s": wall,
        }
        (opts.out / "tuner_quality_worlds.json").write_text(json.dumps(data, indent=1))
        return data

    data = write()
    with ProcessPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        futures = {pool.submit(run_cell, w, s, opts): (w, s) for w, s in jobs if (w, s) not in done}
        for future in as_completed(futures):
            try:
                cell = future.result()
            except SystemExit as exc:  # a cell the truth code cannot judge: say so, go on
                world, space_name = futures[future]
                print(f"{world:16s} {space_name:10s} not judged: {exc}", flush=True)
                continue
            cells.append(cell)
            print(
                f"{cell.world:16s} {cell.space:10s} optimum {cell.best_throughput:6.1f} tok/s, "
                + ", ".join(
                    f"{m}@{b} {statistics.median(v):.3f}"
                    for m, by_b in cell.fractions.items()
                    for b, v in by_b.items()
                )
                + f" ({cell.wall_s:.0f} s)",
                flush=True,
            )
            data = write()
    print((opts.out / "tuner_quality_worlds.md").read_text())
    return data


def _seeds(cell: Cell) -> int:
    return max((len(v) for by_b in cell.fractions.values() for v in by_b.values()), default=0)


def _gpu(values: list[float | None]) -> str:
    """Median of per-seed GPU hours to 95%, a seed that never reached it counted as never."""
    order = sorted(values, key=lambda v: math.inf if v is None else v)
    mid = order[(len(order) - 1) // 2] if order else None
    return "never" if mid is None else f"{mid:.2f}"


def _cost_table(cells: list[Cell], opts: Options) -> list[str]:
    if not cells or not any(c.gpu_hours_to_95 for c in cells):
        return []
    stop = "default-stop" if "default-stop" in opts.methods else None
    lines = [
        "",
        "Modelled GPU hours to 95% of the optimum (median over seeds; never: the median seed "
        "did not get there in 40 trials)"
        + (
            "; and the stop rule (`default-stop`, what `tuner optimize` does by default): "
            "trials it launched, its GPU hours as a share of the default's whole 40-trial study "
            "of the same seed, and its best over that study's best (median, worst seed):"
            if stop
            else ":"
        ),
        "",
    ]
    methods = [m for m in opts.methods if m != stop]
    head = " | ".join(f"{m} GPU h to 95%" for m in methods)
    extra = " | stop: trials | stop: GPU h share | stop: best / full (worst)" if stop else ""
    lines += [
        f"| world | space | {head}{extra} |",
        "|---|---|" + "---:|" * (len(methods) + (3 if stop else 0)),
    ]
    for c in cells:
        row = [_gpu(c.gpu_hours_to_95.get(m, [])) for m in methods]
        if stop and stop in c.gpu_hours and "default" in c.gpu_hours:
            share = [a / b for a, b in zip(c.gpu_hours[stop], c.gpu_hours["default"], strict=True)]
            full = c.fractions["default"][max(c.fractions["default"])]
            mine = c.fractions[stop][max(c.fractions[stop])]
            ratio = [a / b if b else 1.0 for a, b in zip(mine, full, strict=True)]
            row += [
                f"{statistics.median(c.launched[stop]):.0f}",
                f"{100 * statistics.median(share):.0f}% (max {100 * max(share):.0f}%)",
                f"{statistics.median(ratio):.3f} ({min(ratio):.3f})",
            ]
        lines.append(f"| {c.world} | {c.space} | " + " | ".join(row) + " |")
    return lines


def matrix_markdown(
    cells: list[Cell], jobs: list[tuple[str, str]], opts: Options, wall_s: float
) -> str:
    labels = {m.name: m.label for m in METHODS}
    spaces = list(dict.fromkeys(s for _w, s in jobs))
    worlds = list(dict.fromkeys(w for w, _s in jobs))
    by_key = {(c.world, c.space): c for c in cells}
    budgets = sorted(opts.budgets)
    head = " | ".join(f"{s} @{b}" for s in spaces for b in budgets)
    lines = [
        "# Tuner quality across simulator worlds",
        "",
        f"Worlds: {', '.join(worlds)} (`benchmarks/worlds/`); spaces: {', '.join(spaces)} "
        "(`benchmarks/quality/worlds.py`); methods: "
        + ", ".join(f"{m} ({labels[m]})" for m in opts.methods)
        + f"; {opts.seeds} seeds"
        + (f" on the seed's spaces, {opts.other_seeds} on the others" if opts.other_seeds else "")
        + f"; budgets {', '.join(map(str, budgets))} trials.",
        "Reproduce: `python benchmarks/tuner_quality.py "
        f"--worlds {','.join(worlds)} --spaces {','.join(spaces)} --methods "
        f"{','.join(opts.methods)} --seeds {opts.seeds} "
        + (f"--other-seeds {opts.other_seeds} " if opts.other_seeds is not None else "")
        + f"--budgets {','.join(map(str, budgets))} "
        f"--dense-points {opts.dense_points}{'' if opts.refine else ' --no-refine'} "
        f"--served 0 --no-plot --jobs {opts.jobs}`.",
        "",
        "Fraction of each cell's optimum (best noise-free SLO-feasible throughput the study "
        "recorded as feasible, over the best the truth code found in that world and space), "
        "median [min–max] over seeds, after 20 and 40 launched trials:",
        "",
        f"| world | method | {head} |",
        "|---|---|" + "---:|" * (len(spaces) * len(budgets)),
    ]
    for world in worlds:
        for method in opts.methods:
            row = []
            for space in spaces:
                cell = by_key.get((world, space))
                for b in budgets:
                    row.append(spread(cell.fractions[method][b], ".3f") if cell else "not run")
            name = f"{world} *" if world in STRUCTURAL else world
            lines.append(f"| {name} | {method} | " + " | ".join(row) + " |")
    lines += _cost_table(cells, opts)
    lines += [
        "",
        "Each cell's optimum (tok/s), the configurations judged, and the best configuration:",
        "",
        "| world | space | seeds | optimum tok/s | judged | a study beat the grid "
        "| best configuration |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for cell in cells:
        best = {k: v for k, v in cell.best_params.items() if v is not None}
        lines.append(
            f"| {cell.world} | {cell.space} | {_seeds(cell)} | {cell.best_throughput:.1f} "
            f"| {cell.configurations} "
            f"| {'yes' if cell.studies_beat_search else 'no'} | `{json.dumps(best)}` |"
        )
    lines += [
        "",
        "How to read it:",
        "- A world is a `--sim-profile-overrides` file; each says in a comment what it changes "
        "and why. The tuner never reads it: it reaches the simulator only (and `--sim-describe`, "
        "which tells the tuner the GPU's name and memory as NVML would).",
        "- \\* marks the *estimate wrong* rows: worlds whose error is one of structure, not "
        "scale, so the estimate's refit (a scale on bandwidth / compute, a flat acceptance rate, "
        "the measured prefix reuse) cannot absorb it:",
        *[f"  - {w}: {why}" for w, why in STRUCTURAL.items() if w in worlds],
        "- The optimum: the dense grid "
        f"({opts.dense_points} values per numeric range{', refined' if opts.refine else ''}) "
        "united with every configuration the cell's studies launched; *a study beat the grid* "
        "says a study found better than the grid (the grid is coarse), and then the fractions "
        "are against the study's find.",
        f"- Measurement noise as in `tuner_quality.md` (sigma {0.02 * opts.noise:.3f} on "
        f"throughput and TPOT, {0.05 * opts.noise:.3f} on TTFT).",
    ]
    missing = [j for j in jobs if j not in by_key]
    if missing:
        lines += ["", f"Cells not finished: {', '.join(f'{w}/{s}' for w, s in missing)}."]
    lines += ["", f"Wall time of this run: {wall_s / 60:.1f} min ({opts.jobs} processes)."]
    return "\n".join(lines) + "\n"
