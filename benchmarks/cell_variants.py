"""Variants of the default search on one quality cell, seed by seed: a quick look, not a verdict.

    python benchmarks/cell_variants.py CELL OPTIMUM VARIANT [VARIANT ...] [--seeds N]

CELL is a space file (a development cell of benchmarks/heldout/, such as a spent one) or a
development space name with its world as `space@world` (`tpot-8b@hicache-slow`); OPTIMUM is
the cell's best SLO-feasible throughput (its `tuner_quality.md`). Each VARIANT is `default`
or a `name=value` of `LocalSearchConfig` (tuner/study/local_search.py) or of
`StagePrunerConfig` (tuner/trial/pruning.py), several joined by commas:

    python benchmarks/cell_variants.py benchmarks/heldout/qwen8b-h100-rag.yaml 2177.3 \\
        default known_low_penalty=3 front_slack=0.15

Per seed (the quality benchmark's studies: benchmarks/quality/study.py, with its noise): the
best noise-free throughput within the SLOs as a share of OPTIMUM after 20 and after 40
launched trials, the modelled GPU hours until then, and how many launches ran a running cap
of 1 (`--method default-stop`: the stop rule's studies, whose "40 trials" are where they
stopped). What decides whether a default changes is `benchmarks/off_on.py` on the development
matrix; this shows what a variant does to one cell.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from benchmarks.early_cut import Seen, pruner_config
from benchmarks.oracle_measurer import NoiseModel
from benchmarks.quality import study
from benchmarks.quality.methods import Method, method_named
from benchmarks.quality.truth import world_oracle
from tuner.study.local_search import LocalSearchConfig
from tuner.study.loop import quiet_optuna
from tuner.trial import StagePrunerConfig

_SEARCH = {f.name: f for f in dataclasses.fields(LocalSearchConfig)}
_PRUNER = {f.name: f for f in dataclasses.fields(StagePrunerConfig)}


def _value(field: dataclasses.Field[Any], text: str) -> Any:
    """`text` as the field's default is typed: a bool from 1/0 or true/false, else a number."""
    if isinstance(field.default, bool):
        return text.lower() in ("1", "true")
    return int(text) if isinstance(field.default, int) else float(text)


def parse_variant(text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(LocalSearchConfig fields, StagePrunerConfig fields) of `name=value,...` (`default`:
    neither)."""
    search: dict[str, Any] = {}
    pruner: dict[str, Any] = {}
    if text == "default":
        return search, pruner
    for item in text.split(","):
        name, _, value = item.partition("=")
        if name in _SEARCH:
            search[name] = _value(_SEARCH[name], value)
        elif name in _PRUNER:
            pruner[name] = _value(_PRUNER[name], value)
        else:
            raise SystemExit(
                f"{name!r} is a field of neither LocalSearchConfig nor StagePrunerConfig"
            )
    return search, pruner


@contextlib.contextmanager
def variant(text: str, base: str = "default") -> Iterator[Method]:
    """The method `base` with the variant's fields, its pruner set for the duration."""
    search, pruner = parse_variant(text)
    method = method_named(base)
    if search:
        method = dataclasses.replace(method, guide=(("local_search", LocalSearchConfig(**search)),))
    with pruner_config(StagePrunerConfig(**pruner), Seen()) if pruner else contextlib.nullcontext():
        yield method


def row(run: study.StudyRun, optimum: float) -> tuple[float, float, float, float, int]:
    """(best share at 20, at 40, GPU hours at 20, at 40, launches at a cap of 1)."""
    best = gpu = 0.0
    at20 = (0.0, 0.0)
    for i, t in enumerate(run.trials):
        gpu += t.gpu_s
        if t.counted and t.truth and t.truth.feasible:
            best = max(best, t.truth.throughput)
        if i == 19:
            at20 = (best, gpu)
    if len(run.trials) < 20:
        at20 = (best, gpu)
    ones = sum(1 for t in run.trials if t.params.get("max_running_requests") == 1)
    return at20[0] / optimum, best / optimum, at20[1] / 3600, gpu / 3600, ones


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cell")
    parser.add_argument("optimum", type=float)
    parser.add_argument("variants", nargs="+")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument(
        "--method",
        default="default",
        help="the quality benchmark's method the variants change: default-stop for the stop "
        "rule's studies (their 40-trial column is where they stopped)",
    )
    args = parser.parse_args()
    quiet_optuna()
    name, _, world = args.cell.partition("@")
    space, oracle = world_oracle(name, world or None)
    noise = NoiseModel(0.02, 0.02, 0.05)
    print("| variant | seed | 20 trials | 40 trials | GPU h (20) | GPU h (40) | cap-1 launches |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for text in args.variants:
        for seed in range(args.seeds):
            with variant(text, args.method) as method:
                run = study.run_study(method, seed, 40, space, oracle, noise)
            b20, b40, g20, g40, ones = row(run, args.optimum)
            print(f"| {text} | {seed} | {b20:.3f} | {b40:.3f} | {g20:.2f} | {g40:.2f} | {ones} |")
    oracle.save()


if __name__ == "__main__":
    main()
