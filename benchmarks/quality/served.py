"""The measurement check: a few configurations launched as real simulator processes and
benchmarked over HTTP (`LaunchAndMeasure`), compared with what the oracle says of them."""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.quality.grid import default_flags, full_flags
from benchmarks.quality.truth import OptimumReport, Oracle, slos_met
from tuner.engines import sglang as engine
from tuner.launcher import LaunchError
from tuner.space import SearchSpace
from tuner.study import StudyOptions, launch_target
from tuner.trial import LaunchAndMeasure


@dataclass
class ServedCheck:
    label: str
    params: dict[str, Any]
    failure: tuple[str | None, str | None]  # (served, oracle) failure classes
    slos_met: tuple[bool | None, bool | None]  # (served, oracle) verdicts on the space's SLOs
    ratios: dict[str, float]  # served / oracle
    served: dict[str, float]
    oracle: dict[str, float]


SERVED_METRICS = ("output_throughput", "median_tpot_ms", "median_ttft_ms", "cache_hit_rate")


def served_configurations(
    oracle: Oracle, optimum: OptimumReport, count: int
) -> list[tuple[str, dict[str, Any] | None]]:
    """sglang's defaults, the best, the front's low-latency end and middle, the best just inside
    and just outside the first SLO's limit (where a wrong verdict would matter), a crash."""
    judged = [(p, oracle.of_args(list(a))) for a, p in oracle.visited.items()]
    front_of = {(t.throughput, t.latency): p for p, t in judged if t.feasible}
    front = optimum.front
    picks: list[tuple[str, dict[str, Any] | None]] = [
        ("sglang defaults", None),
        ("oracle best", optimum.best_params),
        ("lowest latency on the front", front_of[front[0]]),
        ("middle of the front", front_of[front[len(front) // 2]]),
    ]
    if oracle.space.slos:
        limit = oracle.space.slos[0].limit

        def best_within(low: float, high: float) -> dict[str, Any] | None:
            inside = [
                (t.throughput, p)
                for p, t in judged
                if t.launch_ok and t.slo_values and low < t.slo_values[0] / limit <= high
            ]
            return max(inside, key=lambda x: x[0])[1] if inside else None

        for label, band in (
            ("best within 50-100% of the SLO limit", (0.5, 1.0)),
            ("best within 100-200% of the SLO limit", (1.0, 2.0)),
        ):
            params = best_within(*band)
            if params is not None:
                picks.append((label, params))
    crash = next((p for p, t in judged if not t.launch_ok), None)
    if crash is not None:
        picks.append(("a crashing configuration", crash))
    return picks[:count]


def served_check(
    space: SearchSpace, oracle: Oracle, optimum: OptimumReport, count: int, time_scale: float
) -> list[ServedCheck]:
    target = launch_target(space, StudyOptions(engine="sim", time_scale=time_scale))
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        serve = LaunchAndMeasure(target, space, Path(tmp))
        for i, (label, params) in enumerate(served_configurations(oracle, optimum, count)):
            # The baseline trial's params are {}: sglang's defaults, not a sampled point.
            flags = full_flags(space, params) if params else default_flags(space)
            args = engine.build_server_args(flags, space.engine_version)
            out.append(_serve_one(serve, oracle, i, label, params or {}, args))
    return out


def _serve_one(
    serve: LaunchAndMeasure, oracle: Oracle, number: int, label: str, params: dict, args: list[str]
) -> ServedCheck:
    expected = oracle.serve.exact_summary(args)
    assert oracle.serve.oracle is not None
    oracle_failure = None if expected is not None else oracle.serve.oracle(args).failure_kind
    try:
        result = serve.measure(number, args, lambda capacity, pgid: None, lambda s, summary: True)
    except LaunchError as exc:
        failures = (exc.failure_class, oracle_failure)
        return ServedCheck(label, params, failures, (None, None), {}, {}, {})
    served = {k: float(result.summary.get(k, math.nan)) for k in SERVED_METRICS}
    served["max_running_requests"] = float(result.capacity.get("max_running_requests", math.nan))
    # The seed's own SLO is on p99 TTFT, which only a served run measures.
    served["p99_ttft_ms"] = float(result.summary.get("p99_ttft_ms", math.nan))
    served_met = slos_met(oracle.space, result.summary)
    if expected is None:
        return ServedCheck(
            label, params, (None, oracle_failure), (served_met, None), {}, served, {}
        )
    exact = {k: float(expected[k]) for k in SERVED_METRICS}
    assert oracle.serve.oracle is not None
    exact["max_running_requests"] = float(oracle.serve.oracle(args).max_running_requests)
    ratios = {k: served[k] / exact[k] if exact[k] else math.nan for k in exact}
    verdicts = (served_met, slos_met(oracle.space, expected))
    return ServedCheck(label, params, (None, None), verdicts, ratios, served, exact)
