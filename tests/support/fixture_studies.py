"""Build realistic studies for the reader tests (report, export, dashboard, `tuner studies`).

The studies follow tuner/results/record.py exactly, as `tuner optimize` writes them, so the
readers are tested without the optimizer: 16 trials covering every outcome (default, feasible,
SLO-violating, both COMPLETE and PRUNED, stage-pruned, launch failure, invalid, skipped, died
during the benchmark, and a tuner FAIL). The numbers follow the Qwen3.6-27B scenario of
docs/sglang-memory.md: MTP raises per-request speed, HiCache lets it run at higher concurrency.

Known answers, for objectives (output_throughput max, median_tpot_ms min) and the SLO
p99_ttft_ms <= 2000:
    feasible:        0 (default), 2, 3, 5, 12, 13, 14
    Pareto front:    5 (330 tok/s, 20 ms), 14 (355, 21), 12 (385, 23), 2 (410, 30)
    max-throughput:  2      min-latency: 5      knee: 12
    with p99_ttft_ms <= 1700: candidates 0, 3, 12, 13, 14 -> max-throughput 12
Optuna numbers trials in the order they are added, so with `only=` or `with_default=False` the
numbers above shift: find trials by their metrics in such tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from tuner.results import record

MODEL = "Qwen/Qwen3.6-27B"
SGLANG_VERSION = "0.5.23"
INPUT_LEN = 1024
OUTPUT_LEN = 256

DISTRIBUTIONS = {
    "speculative_algorithm": CategoricalDistribution(["none", "NEXTN"]),
    "speculative_num_steps": IntDistribution(1, 5),
    "mem_fraction_static": FloatDistribution(0.70, 0.95),
    "mamba_radix_cache_strategy": CategoricalDistribution(["auto", "no_buffer", "extra_buffer"]),
    "enable_hierarchical_cache": CategoricalDistribution([False, True]),
    "hicache_ratio": FloatDistribution(1.0, 8.0),
    "max_running_requests": IntDistribution(4, 64, log=True),
}


@dataclass
class Spec:
    """One trial to write; metrics are (output tok/s, median TPOT ms, p99 TTFT ms)."""

    number: int
    outcome: str
    params: dict[str, Any] = field(default_factory=dict)
    measured: tuple[float, float, float] | None = None
    state: TrialState = TrialState.COMPLETE
    is_default: bool = False
    failure_class: str | None = None
    failure_message: str | None = None
    capacity: tuple[int, int] | None = None  # (max_running_requests, max_total_num_tokens)


def _p(
    spec: str,
    mem: float,
    strategy: str,
    hicache: bool,
    mrr: int,
    steps: int | None = None,
    ratio: float | None = None,
) -> dict[str, Any]:
    params: dict[str, Any] = {
        "speculative_algorithm": spec,
        "mem_fraction_static": mem,
        "mamba_radix_cache_strategy": strategy,
        "enable_hierarchical_cache": hicache,
        "max_running_requests": mrr,
    }
    if steps is not None:
        params["speculative_num_steps"] = steps
    if ratio is not None:
        params["hicache_ratio"] = ratio
    return params


SPECS = [
    Spec(0, record.OUTCOME_OK, {}, (180.0, 45.0, 1500.0), is_default=True, capacity=(19, 310_000)),
    Spec(
        1,
        record.OUTCOME_OK,
        _p("NEXTN", 0.85, "extra_buffer", False, 4, 3),
        (234.0, 14.0, 3400.0),
        capacity=(4, 240_000),
    ),
    Spec(
        2,
        record.OUTCOME_OK,
        _p("NEXTN", 0.88, "extra_buffer", True, 16, 3, 4.0),
        (410.0, 30.0, 1800.0),
        capacity=(16, 250_000),
    ),
    Spec(
        3,
        record.OUTCOME_OK,
        _p("none", 0.90, "auto", False, 32),
        (260.0, 52.0, 1200.0),
        capacity=(32, 330_000),
    ),
    Spec(
        4,
        record.OUTCOME_LAUNCH_FAILED,
        _p("NEXTN", 0.95, "extra_buffer", False, 48, 5),
        state=TrialState.PRUNED,
        failure_class="cuda_graph",
        failure_message="Capture cuda graph failed: CUDA out of memory",
    ),
    Spec(
        5,
        record.OUTCOME_OK,
        _p("NEXTN", 0.80, "extra_buffer", False, 8, 2),
        (330.0, 20.0, 1900.0),
        capacity=(8, 200_000),
    ),
    Spec(
        6,
        record.OUTCOME_OK,
        _p("none", 0.90, "no_buffer", True, 64, None, 2.0),
        (240.0, 60.0, 2600.0),
        state=TrialState.PRUNED,
        capacity=(64, 330_000),
    ),
    Spec(
        7,
        record.OUTCOME_PRUNED,
        _p("NEXTN", 0.82, "extra_buffer", False, 6, 1),
        (150.0, 25.0, 900.0),
        state=TrialState.PRUNED,
        capacity=(6, 210_000),
    ),
    Spec(
        8,
        record.OUTCOME_PRUNED,
        _p("none", 0.75, "auto", False, 12),
        (120.0, 70.0, 1100.0),
        state=TrialState.PRUNED,
        capacity=(12, 180_000),
    ),
    Spec(
        9,
        record.OUTCOME_INVALID,
        _p("NEXTN", 0.85, "no_buffer", False, 16, 3),
        state=TrialState.PRUNED,
        failure_class="startup_rule",
        failure_message="speculative decoding with no_buffer needs the radix cache off",
    ),
    Spec(
        10,
        record.OUTCOME_SKIPPED,
        _p("none", 0.70, "auto", True, 64, None, 8.0),
        state=TrialState.PRUNED,
        failure_class="not_enough_memory",
        failure_message="predicted KV pool of 0 tokens",
    ),
    Spec(
        11,
        record.OUTCOME_BENCH_FAILED,
        _p("NEXTN", 0.93, "extra_buffer", True, 24, 4, 2.0),
        state=TrialState.PRUNED,
        failure_class="died_during_benchmark",
        failure_message="server died during the benchmark",
        capacity=(24, 260_000),
    ),
    Spec(
        12,
        record.OUTCOME_OK,
        _p("NEXTN", 0.86, "extra_buffer", True, 12, 4, 2.0),
        (385.0, 23.0, 1700.0),
        capacity=(12, 245_000),
    ),
    Spec(
        13,
        record.OUTCOME_OK,
        _p("none", 0.90, "auto", False, 24),
        (220.0, 44.0, 1300.0),
        capacity=(24, 330_000),
    ),
    Spec(
        14,
        record.OUTCOME_OK,
        _p("NEXTN", 0.84, "extra_buffer", False, 10, 3),
        (355.0, 21.0, 1600.0),
        capacity=(10, 230_000),
    ),
    Spec(15, "", {}, state=TrialState.FAIL),
]

FEASIBLE = [0, 2, 3, 5, 12, 13, 14]
PARETO = [5, 14, 12, 2]


def server_args(params: dict[str, Any], *, sim_flags: bool = True) -> list[str]:
    """The argv `tuner optimize` would record, in sglang 0.5.23 names."""
    args = ["--model-path", MODEL]
    if "mem_fraction_static" in params:
        args += ["--mem-fraction-static", f"{params['mem_fraction_static']:g}"]
    if "max_running_requests" in params:
        args += ["--max-running-requests", str(params["max_running_requests"])]
    if "mamba_radix_cache_strategy" in params:
        args += ["--mamba-radix-cache-strategy", params["mamba_radix_cache_strategy"]]
    if params.get("speculative_algorithm") == "NEXTN":
        steps = params["speculative_num_steps"]
        args += ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(steps)]
        args += ["--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(steps + 1)]
    if params.get("enable_hierarchical_cache"):
        args += ["--enable-hierarchical-cache", "--hicache-ratio", f"{params['hicache_ratio']:g}"]
    args += ["--chunked-prefill-size", "-1"] if params.get("max_running_requests") == 64 else []
    if sim_flags and params:
        # A simulator option recorded by mistake must never reach an exported script.
        args += ["--sim-time-scale", "0.01"]
    return args


def metrics(output_tps: float, tpot_ms: float, p99_ttft_ms: float) -> dict[str, float]:
    total = output_tps * (INPUT_LEN + OUTPUT_LEN) / OUTPUT_LEN
    return {
        "completed": 200,
        "duration": 200 * OUTPUT_LEN / output_tps,
        "request_throughput": output_tps / OUTPUT_LEN,
        "input_throughput": total - output_tps,
        "output_throughput": output_tps,
        "total_throughput": total,
        "mean_ttft_ms": p99_ttft_ms * 0.4,
        "median_ttft_ms": p99_ttft_ms * 0.35,
        "p99_ttft_ms": p99_ttft_ms,
        "mean_tpot_ms": tpot_ms * 1.05,
        "median_tpot_ms": tpot_ms,
        "p99_tpot_ms": tpot_ms * 1.6,
        "median_itl_ms": tpot_ms * 0.9,
        "median_e2e_latency_ms": p99_ttft_ms * 0.35 + tpot_ms * (OUTPUT_LEN - 1),
    }


def build_study(
    storage: str | optuna.storages.BaseStorage,
    study_name: str = "qwen-mtp",
    *,
    with_default: bool = True,
    only: list[int] | None = None,
    slo_limit_ms: float = 2000.0,
    engine: str = "sim",
    rules: dict[int, str] | None = None,
) -> optuna.Study:
    """Write the sample study into `storage` and return it; `rules` gives trials the search
    rule that proposed them (`guided_by`), by trial number."""
    study = optuna.create_study(
        study_name=study_name, storage=storage, directions=["maximize", "minimize"]
    )
    study.set_user_attr(record.STUDY_ENGINE, engine)
    study.set_user_attr(record.STUDY_SGLANG_VERSION, SGLANG_VERSION)
    study.set_user_attr(record.STUDY_SPACE, {"model": MODEL, "params": sorted(DISTRIBUTIONS)})
    study.set_user_attr(record.STUDY_SPACE_FILE, "search_spaces/qwen36-27b-mtp.yaml")
    study.set_user_attr(
        record.STUDY_OBJECTIVES,
        [
            {"metric": "output_throughput", "direction": "maximize"},
            {"metric": "median_tpot_ms", "direction": "minimize"},
        ],
    )
    study.set_user_attr(
        record.STUDY_SLOS, [{"metric": "p99_ttft_ms", "op": "<=", "limit": slo_limit_ms}]
    )
    for spec in SPECS:
        if only is not None and spec.number not in only:
            continue
        if spec.is_default and not with_default:
            continue
        trial = _trial(spec, slo_limit_ms)
        if rules and spec.number in rules:
            trial.set_user_attr(record.GUIDED_BY, rules[spec.number])
        study.add_trial(trial)
    return study


def _trial(spec: Spec, slo_limit_ms: float) -> optuna.trial.FrozenTrial:
    if spec.state == TrialState.FAIL:
        return create_trial(state=TrialState.FAIL, params={}, distributions={})
    attrs: dict[str, Any] = {
        record.IS_DEFAULT: spec.is_default,
        record.OUTCOME: spec.outcome,
        record.FAILURE_CLASS: spec.failure_class,
        record.FAILURE_MSG: spec.failure_message,
        record.FLAGS: {"model_path": MODEL, **spec.params},
        record.SERVER_ARGS: server_args(spec.params),
        record.TIMINGS: {"launch_s": 95.0, "bench_s": 140.0, "total_s": 240.0},
    }
    constraints = {"launch": 1.0}
    values = None
    if spec.capacity:
        attrs[record.CAPACITY] = {
            "max_running_requests": spec.capacity[0],
            "max_total_num_tokens": spec.capacity[1],
        }
    if spec.measured:
        summary = metrics(*spec.measured)
        attrs[record.METRICS] = summary
        attrs[record.STAGES] = [summary]
        violation = max(0.0, summary["p99_ttft_ms"] - slo_limit_ms)
        constraints = {"launch": 0.0, "slo:p99_ttft_ms": violation}
        if spec.state == TrialState.COMPLETE:
            values = [summary["output_throughput"], summary["median_tpot_ms"]]
    if spec.outcome == record.OUTCOME_PRUNED:
        attrs[record.PRUNED] = {
            "stage": 1,
            "reason": "dominated after stage 1",
            "time_saved_s": 120.0,
        }
    if spec.outcome == record.OUTCOME_SKIPPED:
        attrs[record.PREDICTION] = {"reason": spec.failure_message, "model": "memory"}
    attrs[record.CONSTRAINTS] = constraints
    return create_trial(
        state=spec.state,
        values=values,
        params=spec.params,
        distributions={k: DISTRIBUTIONS[k] for k in spec.params},
        user_attrs=attrs,
        constraints=constraints,
        # What record.set_constraints writes for optuna-dashboard 0.21.
        system_attrs={record.LIST_CONSTRAINTS: record.list_constraints(constraints)},
    )


def sqlite_study(studies_dir: Path, study_name: str = "qwen-mtp", **kwargs: Any) -> str:
    """Create studies_dir/<study>.db holding the sample study; returns its URL."""
    studies_dir.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{studies_dir / f'{study_name}.db'}"
    build_study(url, study_name, **kwargs)
    return url


def add_graded_trial(
    study: optuna.Study,
    params: dict[str, Any],
    distributions: dict[str, Any],
    throughput: float,
    slos: dict[str, float],
    user_attrs: dict[str, Any] | None = None,
    named: bool = False,
) -> None:
    """Add a launched trial that served its benchmark, as `tuner optimize` records it: `slos`
    maps each SLO metric to its graded constraint (> 0: violated by that share of the limit);
    `user_attrs` adds to the record (a repeat's, the guide's tag); `named` records the
    constraints by name too, as Optuna 5 reads them (`trial.constraints`)."""
    constraints = {"launch": 0.0, **{f"slo:{k}": v for k, v in slos.items()}}
    study.add_trial(
        create_trial(
            params=params,
            distributions={k: distributions[k] for k in params},
            values=[throughput, 10.0],
            user_attrs={
                record.OUTCOME: record.OUTCOME_OK,
                record.METRICS: {"output_throughput": throughput},
                record.CONSTRAINTS: constraints,
                **(user_attrs or {}),
            },
            system_attrs={"constraints": list(constraints.values())},
            constraints=constraints if named else None,
        )
    )
