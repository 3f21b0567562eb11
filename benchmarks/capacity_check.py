"""Does a capacity study's figure hold? A `--goal capacity` study, then fixed-rate checks.

    python benchmarks/capacity_check.py                     # the README figures
    python benchmarks/capacity_check.py --trials 8 --seeds 3

1. `tuner optimize --goal capacity` on the open-loop space search_spaces/qwen3.6-27b-capacity.yaml
   (the simulator, its real processes over HTTP): each trial searches the highest request rate
   at which p99 TTFT <= 3 s holds (tuner/trial/capacity.py). Trial 0 is sglang's defaults; the
   study's pick is what `tuner export` picks (the highest sustained rate).
2. For sglang's defaults and for the pick, a fresh server of that configuration is benchmarked
   at fixed rates: 0.95x, 1.0x and 1.05x of the rate its trial found, once with the search's
   own requests and arrivals (workload seed 0: the search compared rates on those) and once
   each with `--seeds` other draws of the same workload (other prompts, other Poisson arrivals).

The figure agrees within 5% when the SLO holds at 0.95x and breaks at 1.05x. With seed 0 that
tests the search itself; the other seeds show how much of it is the particular draw: a finite
run of Poisson arrivals puts the break point of one draw a few percent off another's.

Output: a table on stdout, and benchmarks/results/capacity_check.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a file: the benchmarks package lives one folder up
    sys.path[0] = str(Path(__file__).resolve().parent.parent)
import optuna

from tuner.bench import BenchConfig, WorkloadSpec, run_bench
from tuner.engines import sglang as engine
from tuner.launcher import LaunchSpec, launch
from tuner.optimize.command import run_optimize
from tuner.results import record
from tuner.results.export import export_trial
from tuner.results.goals import capacity_words
from tuner.results.storage import open_storage
from tuner.space.model import SearchSpace
from tuner.study.options import StudyOptions
from tuner.study.run import Run, resolve_run
from tuner.trial.capacity import drain_and_flush, step_met

ROOT = Path(__file__).resolve().parent.parent
SPACE = ROOT / "search_spaces" / "qwen3.6-27b-capacity.yaml"
OUT = ROOT / "benchmarks" / "results" / "capacity_check.json"
FACTORS = (0.95, 1.0, 1.05)


def fixed_rate_checks(
    run: Run, trial: optuna.trial.FrozenTrial, seeds: int, log_dir: Path
) -> dict[str, Any]:
    """Benchmark a fresh server of the trial's configuration at fixed rates around its figure."""
    space: SearchSpace = run.space
    bench = space.bench
    rate = float(trial.values[0])
    spec = LaunchSpec(
        module=run.target.module,
        server_args=list(trial.user_attrs[record.SERVER_ARGS]),
        extra_args=list(run.target.extra_args),
        log_path=log_dir / f"check-{trial.number}.log",
        ready_timeout_s=run.target.ready_timeout_s,
    )
    rows: dict[str, Any] = {}
    with launch(spec, engine.classify_failure, engine.READY_LINE) as server:
        for factor in FACTORS:
            runs = []
            for seed in range(seeds + 1):
                workload = WorkloadSpec.from_dict({**space.workload, "seed": seed})
                config = BenchConfig(
                    url=server.url,
                    workload=workload,
                    concurrency=None,
                    request_rate=rate * factor,
                    arrival=bench.arrival,
                    warmup_requests=bench.warmup_requests,
                    api=bench.api,
                    request_timeout_s=bench.timeout_s,
                )
                drain_and_flush(config)  # each run on an empty cache, as each search step
                summary = run_bench(config).summary
                runs.append(
                    {
                        "seed": seed,
                        "met": step_met(space.slos, summary, workload.num_requests),
                        "p99_ttft_ms": round(float(summary["p99_ttft_ms"]), 1),
                        "request_throughput": round(float(summary["request_throughput"]), 4),
                    }
                )
            others = runs[1:]
            rows[f"{factor:.2f}x"] = {
                "rate": round(rate * factor, 4),
                "search_draw_met": runs[0]["met"],
                "other_draws_met": sum(r["met"] for r in others),
                "other_draws": len(others),
                "runs": runs,
            }
    below, above = rows[f"{FACTORS[0]:.2f}x"], rows[f"{FACTORS[-1]:.2f}x"]
    return {
        "trial": trial.number,
        "sustained_rate": rate,
        "in_words": capacity_words(rate, space.slos),
        "rate_steps": len(trial.user_attrs.get(record.RATE_STEPS) or []),
        "agrees_on_search_draw": bool(below["search_draw_met"] and not above["search_draw_met"]),
        "agrees_on_other_draws": f"{below['other_draws_met']}/{below['other_draws']} met at "
        f"0.95x, {above['other_draws'] - above['other_draws_met']}/{above['other_draws']} "
        "broken at 1.05x",
        "checks": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=4, help="other draws per fixed rate")
    parser.add_argument("--space", type=Path, default=SPACE)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        studies = Path(tmp)
        options = StudyOptions(
            trials=args.trials, space_path=args.space, studies_dir=studies, seed=0, goal="capacity"
        )
        run_optimize(options, workers=1, report=False)
        run = resolve_run(options)
        storage = open_storage(None, run.study_name, studies)
        study = optuna.load_study(study_name=run.study_name, storage=storage)
        complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        default = next(t for t in complete if t.user_attrs.get(record.IS_DEFAULT))
        picked = study.trials[export_trial(storage, run.study_name, out_dir=studies).trial_number]
        study_s = time.monotonic() - started
        checks = {
            "defaults": fixed_rate_checks(run, default, args.seeds, studies),
            "pick": fixed_rate_checks(run, picked, args.seeds, studies),
        }
        launched = sum(1 for t in study.trials if record.SERVER_ARGS in t.user_attrs)
        bench_s = sum(
            (t.user_attrs.get(record.TIMINGS) or {}).get("bench_s", 0.0) for t in complete
        )
    result = {
        "space": str(args.space.relative_to(ROOT))
        if args.space.is_relative_to(ROOT)
        else str(args.space),
        "trials_asked": args.trials,
        "trials_launched": launched,
        "defaults_rate": default.values[0],
        "pick_rate": picked.values[0],
        "pick_over_defaults": picked.values[0] / default.values[0] if default.values[0] else None,
        "pick_flags": picked.params,
        "modelled_bench_hours": round(bench_s / 3600, 2),
        "study_wall_s": round(study_s, 1),
        "wall_s": round(time.monotonic() - started, 1),
        "checks": checks,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"\ncapacity study: {launched} trials launched; sglang's defaults (trial {default.number}) "
        f"{checks['defaults']['in_words']}; the pick (trial {picked.number}) "
        f"{checks['pick']['in_words']} = {result['pick_over_defaults']:.2f}x"
    )
    for name, check in checks.items():
        print(f"{name} (trial {check['trial']}, {check['sustained_rate']:.3g} req/s):")
        for factor, row in check["checks"].items():
            ttfts = [r["p99_ttft_ms"] for r in row["runs"]]
            print(
                f"  {factor} = {row['rate']:.3g} req/s: search draw "
                f"{'met' if row['search_draw_met'] else 'broken'} (p99 TTFT {ttfts[0]:.0f} ms), "
                f"other draws met {row['other_draws_met']}/{row['other_draws']} "
                f"(p99 TTFT {min(ttfts[1:]):.0f}..{max(ttfts[1:]):.0f} ms)"
            )
        print(
            f"  agrees within 5% on the search's draw: {check['agrees_on_search_draw']}; "
            f"other draws: {check['agrees_on_other_draws']}"
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
