"""How wrong the estimate is against the simulator, before any trial and after fitting some.

    python benchmarks/estimate_error.py                      # both shipped spaces, 40 configs
    python benchmarks/estimate_error.py --configs 80 --fit 0,1,5,10

For each shipped space: random configurations of the space (seeded), their true figures from
the simulator's oracle (the headless scheduler a served benchmark matches), and the estimate's
prediction (tuner/predict/estimate.py) with nothing measured (its published priors) and after
`Estimator.fit` on the first k of the other configurations (sglang's defaults first, as a study
starts). Reported: the median and 90th percentile of |log(predicted / true)| as a factor (1.25
= 25% off), for output throughput, median TPOT and p99 TTFT, and the rank correlation of the
throughput predictions (what the guide's picks depend on). The estimate never sees the
simulator; this script is the only place the two meet.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuner.engines import sglang as engine
from tuner.host import read_host_facts
from tuner.predict import Estimator, Observation, gpu_spec
from tuner.space import SearchSpace, load_space, shipped_spaces
from tuner.study import StudyOptions, launch_target
from tuner.study.guide import complete_flags, random_params

sys.path.insert(0, str(Path(__file__).resolve().parent))
from oracle_measurer import OracleCache

ROOT = Path(__file__).resolve().parents[1]


def _factor(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return math.exp(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


def _spearman(a: list[float], b: list[float]) -> float:
    def ranks(x: list[float]) -> list[float]:
        order = sorted(range(len(x)), key=lambda i: x[i])
        out = [0.0] * len(x)
        for r, i in enumerate(order):
            out[i] = float(r)
        return out

    ra, rb = ranks(a), ranks(b)
    n = len(a)
    if n < 3:
        return math.nan
    mean = (n - 1) / 2
    cov = sum((x - mean) * (y - mean) for x, y in zip(ra, rb, strict=True))
    var = sum((x - mean) ** 2 for x in ra)
    return cov / var if var else math.nan


def _truth(oracle: OracleCache, space: SearchSpace, flags: dict[str, Any]) -> dict[str, Any] | None:
    args = engine.build_server_args(
        {"model_path": space.model_path, **space.fixed_flags, **flags}, space.engine_version
    )
    if engine.check_startup_rules({"model_path": space.model_path, **flags}, space.engine_version):
        return None
    r = oracle(args)
    if not r.launch_ok or r.output_throughput <= 0:
        return None
    return {
        "throughput": r.output_throughput,
        "tpot_ms": float(r.summary.get("median_tpot_ms") or math.nan),
        "p99_ttft_ms": r.p99_ttft_ms,
        "accept_length": r.summary.get("accept_length"),
        "running": r.max_running_requests,
        "metrics": dict(r.summary),
    }


def simulated(name: str) -> tuple[SearchSpace, Callable[[], Estimator], OracleCache]:
    """A space, a maker of unfitted estimates for its simulated GPU and model, and its oracle."""
    space = load_space(name)
    target = launch_target(space, StudyOptions(engine="sim"))
    host = read_host_facts("sim", target.module, target.extra_args, space.model_path)
    spec = gpu_spec(host.gpu_name)
    model = host.model
    assert model is not None and spec is not None, (host, spec)
    memory = host.gpu_memory_gb or spec.memory_gb
    return space, lambda: Estimator(space, model, spec, memory), OracleCache(space)


def measure_space(name: str, configs: int, fits: list[int], seed: int) -> dict[str, Any]:
    space, estimator, oracle = simulated(name)
    rng = random.Random(seed)
    rows: list[tuple[dict[str, Any], dict[str, Any]]] = []
    default = _truth(oracle, space, {})
    if default is not None:
        rows.append((dict(space.fixed_flags), default))
    while len(rows) < configs:
        # the flags a trial passes, fixed ones included (a tensor-parallel size among them)
        flags = {**space.fixed_flags, **complete_flags(space, random_params(space, rng))}
        truth = _truth(oracle, space, flags)
        if truth is not None:
            rows.append((flags, truth))
    out: dict[str, Any] = {"space": name, "gpu": estimator().gpu.name, "configs": len(rows)}
    out["fits"] = {}
    for k in fits:
        est = estimator()
        train, test = rows[:k], rows[k:]
        if train:
            est.fit(
                [
                    Observation(
                        f, t["throughput"], t["tpot_ms"], t["running"], t["accept_length"],
                        metrics=t["metrics"],
                    )
                    for f, t in train
                ]
            )  # fmt: skip
        errors: dict[str, list[float]] = {"throughput": [], "tpot_ms": [], "p99_ttft_ms": []}
        predicted, true = [], []
        for flags, t in test:
            p = est.predict(flags)
            if not p.fits:
                continue
            pairs = {
                "throughput": (p.throughput, t["throughput"]),
                "tpot_ms": (p.tpot_ms, t["tpot_ms"]),
                "p99_ttft_ms": (p.ttft_at(0.99), t["p99_ttft_ms"]),
            }
            for key, (a, b) in pairs.items():
                if a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b):
                    errors[key].append(abs(math.log(a / b)))
            predicted.append(p.throughput)
            true.append(t["throughput"])
        out["fits"][k] = {
            key: {"median": _factor(v, 0.5), "p90": _factor(v, 0.9), "n": len(v)}
            for key, v in errors.items()
        } | {"throughput_rank_corr": _spearman(predicted, true)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spaces", default=",".join(shipped_spaces()))
    p.add_argument("--configs", type=int, default=40)
    p.add_argument("--fit", default="0,1,5,10", help="trials fitted before predicting")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    a = p.parse_args()
    fits = [int(x) for x in a.fit.split(",")]
    results = [measure_space(s, a.configs, fits, a.seed) for s in a.spaces.split(",")]
    for r in results:
        print(f"{r['space']} on {r['gpu']} ({r['configs']} configurations):")
        print("  fitted on   throughput x (p90)   TPOT x (p90)   p99 TTFT x (p90)   rank corr")
        for k, row in r["fits"].items():
            cells = [
                f"{row[m]['median']:.2f} ({row[m]['p90']:.2f})".ljust(17)
                for m in ("throughput", "tpot_ms", "p99_ttft_ms")
            ]
            print(f"  {k:>3} trials  " + "  ".join(cells) + f"  {row['throughput_rank_corr']:.2f}")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "estimate_error.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
