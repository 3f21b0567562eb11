"""A/B of the search's settings: one quality method as shipped (A) and with explicit settings
(B), side by side on the quality benchmark's studies, same seeds.

    python benchmarks/ab.py --set stop.max_checks=2
    python benchmarks/ab.py --set pruner.margin=0.2 --worlds shipped,decay \\
        --spaces seed-3s,tpot-8b --seeds 10 --jobs 2
    python benchmarks/ab.py --base pruner.margin=0.2 --set stop.max_checks=2 \\
        --spaces benchmarks/heldout/qwen8b-h100-rag.yaml --method model-free

`--set SECTION.FIELD=VALUE` (repeatable) is set in arm B only, `--base` in both arms: A is
the method with the `--base` settings, B that and the `--set` ones. A SECTION is a settings
object a study runs with (benchmarks/quality/overrides.py): `guide` (which of the guide's
trials a study wants), `stop` (the stop rule) and `pruner` (the stage pruner). Values are Python
literals (`0.05`, `None`, `True`) or bare words (`front`). Each arm is set with
`dataclasses.replace` on those objects: nothing else of the tuner is touched.

Per world x space x seed, each arm runs the full study (`--budget` launched trials) and, unless
`--no-stop`, the same study with the stop rule on (`--min-gain`'s default, as the quick start
runs). When B differs only in `stop` settings, the full study is the same in both arms and
runs once. WORLDS and SPACES are comma-separated names of benchmarks/quality/worlds.py; a SPACE
that is a file (`benchmarks/heldout/*.yaml`) runs as it is, in its own world.

The output is markdown: per cell the full study's best noise-free SLO-feasible throughput as a
share of the best either arm saw there (median and worst seed), its modelled GPU hours, the
launches until its best reached 99% of that (median; budget + 1: never), and the stopped
study's GPU hours, their share of its full study's, its best over its full study's and the
share of the full study's front it keeps (`front kept`, the stop rule's own measure); then per
seed, A -> B, with the change of the full study's best.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

if __name__ == "__main__":  # run as a file: the benchmarks package lives one folder up
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from benchmarks.quality.methods import METHODS, Method
from benchmarks.quality.overrides import (
    Override,
    UnknownSetting,
    default_settings,
    describe,
    parse_override,
)
from benchmarks.quality.study import TrialLog

ARMS = ("A", "B")
GUIDELESS_SECTIONS = frozenset({"pruner", "stop"})  # what a method without a guide runs with


@dataclass
class Outcome:
    """One study, noise-free: its best SLO-feasible throughput after each launch, its GPU time
    and its feasible front (throughput, latency)."""

    curve: list[float]
    gpu_s: float
    points: list[tuple[float, float]] = field(default_factory=list)

    @property
    def best(self) -> float:
        return self.curve[-1] if self.curve else 0.0

    @property
    def launches(self) -> int:
        return len(self.curve)


@dataclass(frozen=True)
class Task:
    world: str
    space: str
    seed: int
    method: str
    arms: tuple[tuple[Override, ...], tuple[Override, ...]]
    budget: int
    stop: bool
    full_once: bool  # B changes the stop rule alone: the full study is run once


# A seed's studies by name: "full-A", "full-B", "stop-A", "stop-B".
Runs = dict[str, Outcome]


def outcome(trials: Sequence[TrialLog]) -> Outcome:
    best, gpu = 0.0, 0.0
    curve: list[float] = []
    points: list[tuple[float, float]] = []
    for t in trials:
        gpu += t.gpu_s
        if t.counted and t.truth is not None and t.truth.feasible:
            best = max(best, t.truth.throughput)
            points.append((t.truth.throughput, t.truth.latency))
        curve.append(best)
    return Outcome(curve, gpu, points)


def front_kept(stopped: Outcome, full: Outcome) -> float:
    """What the stopped study's front keeps of the full study's, in the stop rule's measure:
    1 / (1 + how far the full study's feasible trials move the stopped study's front)."""
    from tuner.study.stopping import front_move

    return 1 / (1 + front_move(stopped.points, full.points))


def run_seed(task: Task) -> tuple[Task, Runs]:
    """Both arms of one world x space x seed (a process of the pool)."""
    from benchmarks.oracle_measurer import NoiseModel
    from benchmarks.quality.study import run_study
    from benchmarks.quality.truth import world_oracle
    from tuner.study import StudyOptions
    from tuner.study.loop import quiet_optuna

    quiet_optuna()
    space, oracle = world_oracle(task.space, task.world)
    base = {m.name: m for m in METHODS}[task.method]
    full = replace(base, min_gain=0.0)
    stop = replace(base, min_gain=base.min_gain or StudyOptions().min_gain)
    out: Runs = {}
    for arm, settings in zip(ARMS, task.arms, strict=True):
        for kind, method in (("full", full), ("stop", stop)):
            if kind == "stop" and not task.stop:
                continue
            if kind == "full" and arm == "B" and task.full_once:
                out["full-B"] = out["full-A"]
                continue
            run = run_study(
                replace(method, settings=settings),
                task.seed,
                task.budget,
                space,
                oracle,
                NoiseModel(),
            )
            out[f"{kind}-{arm}"] = outcome(run.trials)
    oracle.save()
    return task, out


def _med(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def cell_table(results: list[tuple[Task, Runs]], budget: int, stop: bool) -> list[str]:
    cells: dict[tuple[str, str], list[Runs]] = {}
    for task, runs in results:
        cells.setdefault((task.world, task.space), []).append(runs)
    head = [
        "full: best / cell's best (worst)",
        "full: GPU h",
        "full: launches to 99%",
    ]
    if stop:
        head += [
            "stopped: GPU h",
            "stopped: share of full (max)",
            "stopped: best / full (worst)",
            "stopped: front kept (worst)",
        ]
    lines = [
        "| world | space | "
        + " | ".join(f"{h}, A -> B" for h in head)
        + " | full best fell / rose |",
        "|---|---|" + "---|" * (len(head) + 1),
    ]
    for (world, space), seeds in cells.items():
        top = max(o.best for runs in seeds for o in runs.values()) or 1.0
        cols: list[list[str]] = []
        for arm in ARMS:
            full = [r[f"full-{arm}"] for r in seeds]
            to99 = [
                next((i + 1 for i, b in enumerate(f.curve) if b >= 0.99 * top), budget + 1)
                for f in full
            ]
            col = [
                f"{_med([f.best / top for f in full]):.3f} ({min(f.best for f in full) / top:.3f})",
                f"{_med([f.gpu_s / 3600 for f in full]):.2f}",
                f"{_med(to99):.0f}",
            ]
            if stop:
                stopped = [r[f"stop-{arm}"] for r in seeds]
                pairs = list(zip(stopped, full, strict=True))
                shares = [s.gpu_s / f.gpu_s if f.gpu_s else 1.0 for s, f in pairs]
                kept = [s.best / f.best if f.best else 1.0 for s, f in pairs]
                fronts = [front_kept(s, f) for s, f in pairs]
                col += [
                    f"{_med([s.gpu_s / 3600 for s in stopped]):.2f}",
                    f"{_med(shares):.1%} ({max(shares):.1%})",
                    f"{_med(kept):.3f} ({min(kept):.3f})",
                    f"{_med(fronts):.3f} ({min(fronts):.3f})",
                ]
            cols.append(col)
        fell = sum(1 for r in seeds if r["full-B"].best < 0.995 * r["full-A"].best)
        rose = sum(1 for r in seeds if r["full-B"].best > 1.005 * r["full-A"].best)
        row = " | ".join(f"{a} -> {b}" for a, b in zip(cols[0], cols[1], strict=True))
        lines.append(f"| {world} | {space} | {row} | {fell} / {rose} |")
    return lines


def seed_table(results: list[tuple[Task, Runs]], budget: int, stop: bool) -> list[str]:
    tops: dict[tuple[str, str], float] = {}
    for task, runs in results:
        key = (task.world, task.space)
        tops[key] = max(tops.get(key, 0.0), *(o.best for o in runs.values()))
    half = max(1, budget // 2)
    head = [f"full @{half}", f"full @{budget}"]
    if stop:
        head += ["stopped: best / full", "stopped: launches", "stopped: GPU-hour share"]
    lines = [
        "| world | space | seed | "
        + " | ".join(f"{h}, A -> B" for h in head)
        + f" | full @{budget}: B - A |",
        "|---|---|---:|" + "---|" * len(head) + "---:|",
    ]
    for task, runs in results:
        top = tops[(task.world, task.space)] or 1.0
        cols: list[list[str]] = [[] for _ in head]
        for arm in ARMS:
            full = runs[f"full-{arm}"]
            at_half = full.curve[min(half, full.launches) - 1] if full.curve else 0.0
            cols[0].append(f"{at_half / top:.3f}")
            cols[1].append(f"{full.best / top:.3f}")
            if stop:
                s = runs[f"stop-{arm}"]
                cols[2].append(f"{s.best / full.best if full.best else 1.0:.3f}")
                cols[3].append(str(s.launches))
                cols[4].append(f"{s.gpu_s / full.gpu_s if full.gpu_s else 1.0:.1%}")
        delta = (runs["full-B"].best - runs["full-A"].best) / top
        row = " | ".join(" -> ".join(c) for c in cols)
        lines.append(f"| {task.world} | {task.space} | {task.seed} | {row} | {delta:+.3f} |")
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument(
        "--set",
        dest="changes",
        action="append",
        default=[],
        metavar="S.F=V",
        help="a setting of arm B (repeatable)",
    )
    p.add_argument(
        "--base",
        action="append",
        default=[],
        metavar="S.F=V",
        help="a setting of both arms (repeatable)",
    )
    p.add_argument("--method", default="default", help="the quality method both arms run")
    p.add_argument("--worlds", default="shipped", help="comma-separated worlds")
    p.add_argument("--spaces", default="seed-3s", help="comma-separated spaces or space files")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--first-seed", type=int, default=0, help="seeds from this one on")
    p.add_argument("--budget", type=int, default=40, help="launched trials of a full study")
    p.add_argument("--jobs", type=int, default=1, help="studies at once (processes)")
    p.add_argument(
        "--no-stop",
        dest="stop",
        action="store_false",
        help="full studies only, without the stop rule's",
    )
    p.add_argument("--out", type=Path, default=None, help="also write the tables here")
    return p.parse_args(argv)  # fmt: skip


def tasks_of(a: argparse.Namespace) -> list[Task]:
    """The studies asked for; UnknownSetting or ValueError in one line when they cannot run."""
    methods = {m.name: m for m in METHODS}
    if a.method not in methods:
        raise ValueError(f"unknown method {a.method!r}: one of {', '.join(methods)}")
    if not a.changes:
        raise ValueError("nothing to compare: give arm B's settings with --set SECTION.FIELD=VALUE")
    if a.seeds < 1 or a.budget < 1 or a.jobs < 1:
        raise ValueError("--seeds, --budget and --jobs take a whole number of at least 1")
    roots = default_settings()
    base = tuple(parse_override(text, roots) for text in a.base)
    changes = tuple(parse_override(text, roots) for text in a.changes)
    method: Method = methods[a.method]
    if not (method.warm_start or method.polish):
        sections = {s for s, _, _ in base + changes} - GUIDELESS_SECTIONS
        if sections:
            raise UnknownSetting(
                f"method {a.method!r} runs no guide, so no {', '.join(sorted(sections))}: "
                f"its sections are {', '.join(sorted(GUIDELESS_SECTIONS))}"
            )
    full_once = all(s == "stop" for s, _, _ in changes)
    if full_once and not a.stop:
        raise ValueError("B changes only the stop rule: --no-stop leaves nothing to compare")
    _check_cells(a.worlds.split(","), a.spaces.split(","))
    return [
        Task(world, space, seed, a.method, (base, base + changes), a.budget, a.stop, full_once)
        for space in a.spaces.split(",")
        for world in a.worlds.split(",")
        for seed in range(a.first_seed, a.first_seed + a.seeds)
    ]


def _check_cells(worlds: list[str], spaces: list[str]) -> None:
    from benchmarks.quality.worlds import SHIPPED, SPACES, world_file, world_names

    for world in worlds:
        if world != SHIPPED and not world_file(world).is_file():
            raise ValueError(
                f"unknown world {world!r}: one of {SHIPPED}, {', '.join(world_names())}"
            )
    for space in spaces:
        if space.endswith(".yaml"):
            if not Path(space).is_file():
                raise ValueError(f"no space file {space!r}")
        elif space not in SPACES:
            raise ValueError(f"unknown space {space!r}: one of {', '.join(SPACES)} or a .yaml file")


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    try:
        tasks = tasks_of(a)
    except (UnknownSetting, ValueError) as exc:
        print(f"ab.py: error: {exc}", file=sys.stderr)
        return 2
    if a.jobs > 1:
        with ProcessPoolExecutor(a.jobs) as pool:
            results = list(pool.map(run_seed, tasks))
    else:
        results = [run_seed(t) for t in tasks]
    base, both = tasks[0].arms
    lines = [
        f"`python benchmarks/ab.py {shlex.join(sys.argv[1:] if argv is None else argv)}`",
        "",
        f"Method `{a.method}`; A: {describe(base)}; B: {describe(both)}. "
        f"{a.seeds} seeds, {a.budget} launched trials"
        + (
            "; the full study runs once (B changes the stop rule alone)."
            if tasks[0].full_once
            else "."
        ),
        "",
        *cell_table(results, a.budget, a.stop),
        "",
        *seed_table(results, a.budget, a.stop),
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out is not None:
        a.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
