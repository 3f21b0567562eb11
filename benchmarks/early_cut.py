"""What the front cut saves and loses: studies with and without it, on the same seeds.

    python benchmarks/early_cut.py                 # seed space, 3 seeds (the README figures)
    python benchmarks/early_cut.py --seeds 5 --space search_spaces/qwen3-8b-h200.yaml

The front cut (tuner/trial/pruning.py `front_cut`) stops a trial after a benchmark stage when a
feasible completed trial's full run beats even the trial's best case: its stage figures times the
widest stage-to-full-run factors the study's completed trials showed. This runs the quality
benchmark's studies (benchmarks/quality/study.py: the real objective and study loop, the
simulator's oracle with its seeded measurement noise, the GPU-time model of
benchmarks/oracle_measurer.py, which is the launch and benchmark model `tuner optimize` prints
its cost with: tuner/optimize/cost.py) for each seed in three variants:

- `no-cut`: the first rule only (dominated at the same stage);
- `front-only`: plus the front cut from the first stage on;
- `cut-1`: plus the SLO cut (a trial whose best case still breaks an SLO; the default);
- `cut-2`: both cuts from the second stage on;

each for the whole budget of 40 launched trials (`default`) and with the stop rule
(`default-stop`, `--min-gain` at its default, what the quick start runs).

Per study: modelled GPU seconds spent benchmarking and in all (launches included), trials cut by
each rule, and the best result as a share of the `no-cut` study of the same seed: the best
SLO-feasible throughput (noise-free, from the oracle) and the hypervolume of the feasible front.
First, the noise the rule is built from: how far a full run ended from its stage figures, over
the completed trials of the `no-cut` studies.

Output: tables on stdout, and benchmarks/results/early_cut.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

if __name__ == "__main__":  # run as a file: the benchmarks package lives one folder up
    sys.path[0] = str(Path(__file__).resolve().parent.parent)
from benchmarks.oracle_measurer import NoiseModel, OracleCache, TrialCost
from benchmarks.quality import study as quality_study
from benchmarks.quality.methods import METHODS, Method
from benchmarks.quality.truth import Oracle
from benchmarks.quality.truth import area as hypervolume
from tuner.results import record
from tuner.space.load import default_space_path, load_space
from tuner.space.model import SearchSpace
from tuner.study.loop import quiet_optuna
from tuner.trial import StagePruner, StagePrunerConfig, TrialObjective

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 40
VARIANTS = {
    "no-cut": StagePrunerConfig(front_cut=False, slo_cut=False),
    # The front cut without the SLO cut (the default until the SLO cut came).
    "front-only": StagePrunerConfig(slo_cut=False),
    "cut-1": StagePrunerConfig(),
    "cut-2": StagePrunerConfig(front_min_stage=1),
    # No widening, and fewer full runs to learn the factors from: how far the rule can go.
    "cut-1-tight": StagePrunerConfig(front_slack=0.0, front_min_trials=5),
}
BASELINE = "no-cut"
METHOD_NAMES = ("default", "default-stop")


@dataclass
class Seen:
    """What one study's objective saw: its study and the modelled cost of each trial."""

    study: optuna.Study | None = None
    costs: dict[int, TrialCost] = field(default_factory=dict)


@contextlib.contextmanager
def pruner_config(config: StagePrunerConfig, seen: Seen) -> Iterator[None]:
    """Run the quality benchmark's study with this pruner configuration, and keep its study
    and costs: the two names it builds a trial's objective from, replaced for the duration."""
    base_pruner, base_objective = quality_study.StagePruner, quality_study.TrialObjective

    def make_pruner(*_: Any, enabled: bool = True) -> StagePruner:
        return StagePruner(config, enabled=enabled)

    class Recording(TrialObjective):
        def __call__(self, trial: optuna.Trial) -> tuple[float, float]:
            seen.study = trial.study
            seen.costs = getattr(self.measurer, "costs", {})
            return super().__call__(trial)

    quality_study.StagePruner = make_pruner  # type: ignore[assignment,misc]
    quality_study.TrialObjective = Recording  # type: ignore[misc]
    try:
        yield
    finally:
        quality_study.StagePruner = base_pruner  # type: ignore[misc]
        quality_study.TrialObjective = base_objective  # type: ignore[misc]


def run_variant(
    method: Method,
    variant: str,
    seed: int,
    space: SearchSpace,
    oracle: Oracle,
    noise: NoiseModel,
) -> tuple[dict[str, Any], Seen]:
    seen = Seen()
    with pruner_config(VARIANTS[variant], seen):
        run = quality_study.run_study(method, seed, BUDGET, space, oracle, noise)
    points = [
        (t.truth.throughput, t.truth.latency)
        for t in run.trials
        if t.counted and t.truth is not None and t.truth.launch_ok
    ]
    trials = seen.study.get_trials(deepcopy=False) if seen.study else []
    cuts = [t.user_attrs.get(record.PRUNED) or {} for t in trials]
    rules = [c.get("rule") for c in cuts]
    cut = [
        c
        for t, c in zip(trials, cuts, strict=True)
        if c.get("rule") == record.CUT_FRONT and record.DUPLICATE_OF not in t.user_attrs
    ]
    pruned_at = [int(c["stage"]) for c in cut]
    costs = seen.costs
    return {
        "seed": seed,
        "launched": len(run.trials),
        "bench_s": sum(c.bench_s for c in costs.values()),
        "gpu_s": sum(c.gpu_s for c in costs.values()),
        "cut_front": len(pruned_at),
        # The stages a cut trial did not run, as the pruner records them (`time_saved_s`: the
        # rest of the stages at the pace of those it ran): the saving in the study's own terms.
        "cut_saved_s": sum(float(c.get("time_saved_s", 0.0)) for c in cut),
        "cut_front_at_stage": {str(s + 1): pruned_at.count(s) for s in sorted(set(pruned_at))},
        "cut_dominated": rules.count(record.CUT_DOMINATED),
        "cut_slo": rules.count(record.CUT_SLO),
        "points": points,
    }, seen


def stage_ratios(studies: list[optuna.Study], space: SearchSpace) -> dict[str, Any]:
    """Full run / stage figures of every completed, launched trial: what the cut is built on."""
    thr, lat = space.objectives.throughput, space.objectives.latency
    by_stage: dict[int, list[tuple[float, float]]] = {}
    for study in studies:
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            if record.DUPLICATE_OF in t.user_attrs or not t.values:
                continue
            stages = t.user_attrs.get(record.STAGES) or []
            for k, summary in enumerate(stages[:-1]):
                if summary.get(thr) and summary.get(lat):
                    ratio = (t.values[0] / summary[thr], t.values[1] / summary[lat])
                    by_stage.setdefault(k, []).append(ratio)
    out = {}
    for k, rows in sorted(by_stage.items()):
        thr_r = [r[0] for r in rows]
        lat_r = [r[1] for r in rows]
        out[str(k + 1)] = {
            "trials": len(rows),
            "throughput": _spread(thr_r),
            "latency": _spread(lat_r),
        }
    return out


def _spread(values: list[float]) -> dict[str, float]:
    logs = [math.log(v) for v in values]
    return {
        "min": min(values),
        "median": statistics.median(values),
        "max": max(values),
        "sd_log": statistics.stdev(logs) if len(logs) > 1 else 0.0,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--space", type=Path, default=None)
    p.add_argument("--methods", nargs="+", default=list(METHOD_NAMES), choices=METHOD_NAMES)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "early_cut.json")
    a = p.parse_args(argv)
    quiet_optuna()
    started = time.perf_counter()
    space = load_space(a.space or default_space_path())
    oracle = Oracle(space, OracleCache(space))
    noise = NoiseModel()  # tuner_quality's default noise
    by_name = {m.name: m for m in METHODS}
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    baseline_studies: list[optuna.Study] = []
    for method_name in a.methods:
        method = replace(by_name[method_name])
        per_variant = results.setdefault(method_name, {})
        for seed in range(a.seeds):
            rows: dict[str, dict[str, Any]] = {}
            for variant in VARIANTS:
                rows[variant], seen = run_variant(method, variant, seed, space, oracle, noise)
                if variant == BASELINE and seen.study is not None:
                    baseline_studies.append(seen.study)
            base = rows[BASELINE]
            base_points = base["points"]
            reference = 1.1 * max(pt[1] for r in rows.values() for pt in r["points"])
            for variant, row in rows.items():
                pts = row.pop("points")
                row["best_share"] = max(x[0] for x in pts) / max(x[0] for x in base_points)
                row["hv_share"] = hypervolume(pts, reference) / hypervolume(base_points, reference)
                row["bench_saved_s"] = base["bench_s"] - row["bench_s"]
                row["gpu_saved_h"] = (base["gpu_s"] - row["gpu_s"]) / 3600
                per_variant.setdefault(variant, []).append(row)
                print(
                    f"{method_name:13s} seed {seed} {variant:6s}: {row['launched']} launched, "
                    f"{row['cut_front']} cut by the front ({row['cut_front_at_stage']}), "
                    f"{row['cut_slo']} by an SLO, {row['cut_dominated']} dominated; "
                    f"bench {row['bench_s'] / 60:.1f} min "
                    f"({row['cut_saved_s'] / 60:.1f} min left unrun by the cut), "
                    f"GPU {row['gpu_s'] / 3600:.2f} h, best {row['best_share']:.3f}, "
                    f"hypervolume {row['hv_share']:.3f}",
                    flush=True,
                )
    ratios = stage_ratios(baseline_studies, space)
    print(f"\n{space.name}: full run / stage figures of completed trials ({BASELINE} studies)")
    for stage, r in ratios.items():
        t, lt = r["throughput"], r["latency"]
        print(
            f"  stage {stage}: {r['trials']} trials, throughput x{t['min']:.2f}..x{t['max']:.2f} "
            f"(median x{t['median']:.2f}), latency x{lt['min']:.2f}..x{lt['max']:.2f}"
        )
    print(f"\n{space.name}, {a.seeds} seeds, {BUDGET}-trial budget; shares of the {BASELINE} study")
    print("| method | variant | cut by the front (median) | bench min left unrun by the cut"
          " (median) | bench min saved vs no-cut (median, min) | GPU h saved (median) |"
          " best (median, min) | hypervolume (median, min) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    summary: dict[str, dict[str, Any]] = {}
    for method_name, per_variant in results.items():
        for variant, rows_v in per_variant.items():
            saved = [r["bench_saved_s"] / 60 for r in rows_v]
            gpu = [r["gpu_saved_h"] for r in rows_v]
            best = [r["best_share"] for r in rows_v]
            hv = [r["hv_share"] for r in rows_v]
            cut = [r["cut_front"] for r in rows_v]
            unrun = [r["cut_saved_s"] / 60 for r in rows_v]
            bench = [r["bench_s"] / 60 for r in rows_v]
            summary.setdefault(method_name, {})[variant] = {
                "cut_front_median": statistics.median(cut),
                "cut_unrun_min_median": statistics.median(unrun),
                "bench_min_median": statistics.median(bench),
                "bench_saved_min_median": statistics.median(saved),
                "bench_saved_min_min": min(saved),
                "gpu_saved_h_median": statistics.median(gpu),
                "best_share_median": statistics.median(best),
                "best_share_min": min(best),
                "hv_share_median": statistics.median(hv),
                "hv_share_min": min(hv),
            }
            print(
                f"| {method_name} | {variant} | {statistics.median(cut):g} | "
                f"{statistics.median(unrun):.1f} | "
                f"{statistics.median(saved):.1f} ({min(saved):.1f}) | "
                f"{statistics.median(gpu):.2f} | "
                f"{statistics.median(best):.3f} ({min(best):.3f}) | "
                f"{statistics.median(hv):.3f} ({min(hv):.3f}) |"
            )
    wall = time.perf_counter() - started
    print(f"({wall:.0f} s)")
    data: dict[str, Any] = {"space": space.name, "seeds": a.seeds, "budget": BUDGET}
    data |= {"noise": {"throughput": noise.throughput, "tpot": noise.tpot, "ttft": noise.ttft}}
    data |= {"stage_to_full_run": ratios, "summary": summary, "per_seed": results}
    data |= {"wall_s": wall}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(data, indent=1))
    return data


if __name__ == "__main__":
    main()
