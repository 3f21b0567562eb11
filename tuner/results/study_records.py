"""A study as its readers see it: the contract of tuner/results/record.py turned into typed records.

The report, the export and `tuner studies` all read trials through `load_records`, so the rules
for "feasible", "crashed" or "candidate for export" are written once, here, and not re-derived
from raw user attrs in three places.

Example:
    >>> meta, trials = load_records(storage, "qwen-mtp")  # doctest: +SKIP
    >>> [t.number for t in trials if t.category is Category.FEASIBLE]  # doctest: +SKIP
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import UserError
from tuner.results import record
from tuner.results.goals import (
    DEFAULT_OBJECTIVES,
    MAXIMIZE,
    MINIMIZE,
    Objective,
    Slo,
    as_float,
)
from tuner.results.provenance import Provenance, read_provenance


class Category(StrEnum):
    """How a trial ended, as the report draws it."""

    FEASIBLE = "feasible"  # served the whole benchmark within every constraint
    SLO_VIOLATED = "slo_violated"  # served the whole benchmark, broke an SLO / constraint
    PRUNED = "pruned"  # stopped early at a benchmark stage; partial metrics
    CRASHED = "crashed"  # launch failed or the server died during the benchmark
    NOT_LAUNCHED = "not_launched"  # rejected by a startup rule or skipped by the predictor
    ERROR = "error"  # Optuna FAIL: the tuner itself failed (never a server outcome)
    RUNNING = "running"  # still running, or abandoned by a killed worker


@dataclass(frozen=True)
class StudyMeta:
    name: str
    objectives: tuple[Objective, Objective]
    slos: tuple[Slo, ...]
    engine: str | None  # "sim" or "sglang"
    sglang_version: str | None
    objectives_given: bool = True  # False when DEFAULT_OBJECTIVES had to be assumed
    goal: str | None = None  # `tuner optimize --goal`: the pick `tuner export` defaults to
    engine_python: str | None = None  # the interpreter that ran sglang (--engine sglang)
    engine_env: tuple[tuple[str, str], ...] = ()  # the server's extra environment variables
    provenance: Provenance | None = None  # where the study ran (tuner/results/provenance.py)

    @property
    def directions(self) -> tuple[str, str]:
        return (self.objectives[0].direction, self.objectives[1].direction)

    @property
    def throughput(self) -> Objective:
        return self.objectives[0]

    @property
    def latency(self) -> Objective:
        return self.objectives[1]


@dataclass(frozen=True)
class TrialRecord:
    number: int
    state: str  # Optuna's TrialState name
    outcome: str | None
    category: Category
    is_default: bool
    params: dict[str, Any]  # the tuned parameters Optuna sampled
    server_args: tuple[str, ...]
    flags: dict[str, Any]
    metrics: dict[str, Any]
    capacity: dict[str, Any]
    constraints: dict[str, float]
    failure_class: str | None = None
    failure_message: str | None = None
    pruned: dict[str, Any] = field(default_factory=dict)
    prediction: dict[str, Any] = field(default_factory=dict)
    choices: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # of categorical params
    rate_steps: list[dict[str, Any]] = field(default_factory=list)  # a capacity search's steps
    # The search rule that proposed the trial (tuner/study/policy.py); None in older studies.
    guided_by: str | None = None

    def metric(self, name: str) -> float | None:
        return as_float(self.metrics.get(name))

    def objective_values(self, meta: StudyMeta) -> tuple[float, float] | None:
        """Both objective metrics when measured and finite, else None."""
        first, second = self.metric(meta.throughput.metric), self.metric(meta.latency.metric)
        if first is None or second is None:
            return None
        return (first, second)

    @property
    def violated(self) -> list[str]:
        return sorted(k for k, v in self.constraints.items() if v > 0)

    @property
    def served_benchmark(self) -> bool:
        return self.category in (Category.FEASIBLE, Category.SLO_VIOLATED)

    def why(self) -> str:
        """One line saying how the trial ended, for hover texts and tables."""
        if self.category is Category.FEASIBLE:
            return "feasible"
        if self.category is Category.SLO_VIOLATED:
            return "violates " + (", ".join(self.violated) or "an SLO")
        if self.category is Category.PRUNED:
            stage = self.pruned.get("stage")
            reason = self.pruned.get("reason") or self.failure_message or "stopped early"
            return (
                f"pruned at stage {stage}: {reason}" if stage is not None else f"pruned: {reason}"
            )
        detail = self.failure_message or self.prediction.get("reason") or ""
        label = {
            Category.CRASHED: self.outcome or "crashed",
            Category.NOT_LAUNCHED: self.outcome or "not launched",
            Category.ERROR: "tuner error (FAIL)",
            Category.RUNNING: "running or abandoned",
        }[self.category].replace("_", " ")
        if self.failure_class:
            label += f" ({self.failure_class})"
        return f"{label}: {detail}" if detail else label


def read_study_meta(study: optuna.Study) -> StudyMeta:
    attrs = study.user_attrs
    raw: Any = attrs.get(record.STUDY_OBJECTIVES)
    objectives_given = bool(raw) and len(raw) == 2
    if objectives_given:
        objectives = (
            Objective(str(raw[0]["metric"]), str(raw[0].get("direction", MAXIMIZE))),
            Objective(str(raw[1]["metric"]), str(raw[1].get("direction", MINIMIZE))),
        )
    else:
        objectives = DEFAULT_OBJECTIVES
    slos = tuple(Slo.from_dict(s) for s in attrs.get(record.STUDY_SLOS) or [])
    return StudyMeta(
        name=study.study_name,
        objectives=objectives,
        slos=slos,
        engine=attrs.get(record.STUDY_ENGINE),
        sglang_version=attrs.get(record.STUDY_SGLANG_VERSION),
        objectives_given=objectives_given,
        goal=attrs.get(record.STUDY_GOAL),
        engine_python=attrs.get(record.STUDY_ENGINE_PYTHON),
        engine_env=tuple(sorted((attrs.get(record.STUDY_ENGINE_ENV) or {}).items())),
        provenance=read_provenance(attrs),
    )


def classify(
    state: TrialState,
    outcome: str | None,
    constraints: Mapping[str, float],
    metrics: Mapping[str, Any],
    meta: StudyMeta,
) -> Category:
    """Where a trial goes in the report; the record's outcome wins over Optuna's state."""
    if state in (TrialState.RUNNING, TrialState.WAITING):
        return Category.RUNNING
    if state == TrialState.FAIL:
        return Category.ERROR
    if outcome in (record.OUTCOME_LAUNCH_FAILED, record.OUTCOME_BENCH_FAILED):
        return Category.CRASHED
    if outcome in (record.OUTCOME_INVALID, record.OUTCOME_SKIPPED):
        return Category.NOT_LAUNCHED
    if outcome == record.OUTCOME_PRUNED or (outcome is None and state == TrialState.PRUNED):
        return Category.PRUNED
    measured = all(as_float(metrics.get(o.metric)) is not None for o in meta.objectives)
    if not measured:
        return Category.CRASHED
    # Constraints are the sampler's view; the study's SLOs are re-checked against the metrics so
    # that a trial recorded without constraints is never shown as feasible by mistake.
    if any(v > 0 for v in constraints.values()) or not all(
        slo.satisfied_by(metrics) for slo in meta.slos
    ):
        return Category.SLO_VIOLATED
    return Category.FEASIBLE


def record_from_trial(trial: FrozenTrial, meta: StudyMeta) -> TrialRecord:
    attrs = trial.user_attrs
    metrics = dict(attrs.get(record.METRICS) or {})
    stages = attrs.get(record.STAGES)
    if not metrics and isinstance(stages, list) and stages and isinstance(stages[-1], Mapping):
        # Stopped between stages before the summary was written: the last stage is cumulative.
        metrics = dict(stages[-1])
    if not metrics and trial.state == TrialState.COMPLETE and trial.values:
        # A study written without the tuner's attrs: its values are the objective metrics.
        metrics = {o.metric: v for o, v in zip(meta.objectives, trial.values, strict=False)}
    constraints = _merged_constraints(
        record.named_constraints(trial.constraints), attrs.get(record.CONSTRAINTS)
    )
    outcome = attrs.get(record.OUTCOME)
    return TrialRecord(
        number=trial.number,
        state=trial.state.name,
        outcome=outcome,
        category=classify(trial.state, outcome, constraints, metrics, meta),
        is_default=bool(attrs.get(record.IS_DEFAULT, False)),
        # The default trial's params are sglang's defaults as the space writes them
        # (tuner/study/baseline.py); it passed no flag, and readers say "sglang defaults".
        params={} if attrs.get(record.IS_DEFAULT) else dict(trial.params),
        server_args=tuple(str(a) for a in attrs.get(record.SERVER_ARGS) or ()),
        flags=dict(attrs.get(record.FLAGS) or {}),
        metrics=metrics,
        capacity=dict(attrs.get(record.CAPACITY) or {}),
        constraints=constraints,
        failure_class=attrs.get(record.FAILURE_CLASS),
        failure_message=attrs.get(record.FAILURE_MSG),
        pruned=dict(attrs.get(record.PRUNED) or {}),
        prediction=dict(attrs.get(record.PREDICTION) or {}),
        choices={
            name: tuple(d.choices)
            for name, d in trial.distributions.items()
            if isinstance(d, CategoricalDistribution)
        },
        rate_steps=[dict(s) for s in attrs.get(record.RATE_STEPS) or () if isinstance(s, Mapping)],
        guided_by=attrs.get(record.GUIDED_BY),
    )


def load_records(storage: BaseStorage, study_name: str) -> tuple[StudyMeta, list[TrialRecord]]:
    study = load_study(storage, study_name)
    meta = read_study_meta(study)
    trials = [record_from_trial(t, meta) for t in study.get_trials(deepcopy=False)]
    return meta, trials


def load_study(storage: BaseStorage, study_name: str) -> optuna.Study:
    try:
        return optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        raise UserError(f"no study named {study_name!r} in the storage") from None


def is_candidate(trial: TrialRecord, meta: StudyMeta, extra_slos: Iterable[Slo] = ()) -> bool:
    """May this trial be recommended: it served the whole benchmark within every constraint."""
    if trial.category is not Category.FEASIBLE or trial.objective_values(meta) is None:
        return False
    return all(slo.satisfied_by(trial.metrics) for slo in extra_slos)


def with_slos(
    meta: StudyMeta, trials: Sequence[TrialRecord], slos: Sequence[Slo]
) -> tuple[StudyMeta, list[TrialRecord]]:
    """The study judged by other SLOs (`tuner export --slo`): its own `slo:*` constraints are
    replaced by the new limits' graded violations, and each trial is classified again."""
    judged = replace(meta, slos=tuple(slos))
    out = []
    for t in trials:
        constraints = {k: v for k, v in t.constraints.items() if not k.startswith("slo:")}
        for slo in slos:
            value = t.metric(slo.metric)
            constraints[f"slo:{slo.metric}"] = 1.0 if value is None else slo.violation(value)
        category = t.category
        if t.served_benchmark:
            state = TrialState[t.state]
            category = classify(state, t.outcome, constraints, t.metrics, judged)
        out.append(replace(t, constraints=constraints, category=category))
    return judged, out


def counts_by_category(trials: Sequence[TrialRecord]) -> dict[Category, int]:
    counts = dict.fromkeys(Category, 0)
    for t in trials:
        counts[t.category] += 1
    return counts


def _merged_constraints(system: Mapping[str, float], mirrored: Any) -> dict[str, float]:
    # Optuna's system attrs are what samplers saw; the user-attr mirror is what older readers
    # (and people) see. Take the worse of the two so neither can hide a violation.
    merged: dict[str, float] = {}
    for source in (system, mirrored if isinstance(mirrored, Mapping) else {}):
        for key, value in source.items():
            number = as_float(value)
            if number is None:
                number = math.inf  # an unreadable constraint counts as violated
            merged[str(key)] = max(merged.get(str(key), -math.inf), number)
    return merged


_LABELS = {
    "sustained_request_rate": "sustained req/s",
    "output_throughput": "output tok/s",
    "total_throughput": "total tok/s",
    "input_throughput": "input tok/s",
    "request_throughput": "requests/s",
    "concurrency": "concurrency",
}
_LATENCY_NAMES = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2e_latency": "E2E latency"}


def metric_label(metric: str) -> str:
    """A reader's name for an sglang benchmark field: median_tpot_ms -> 'median TPOT (ms)'."""
    if metric in _LABELS:
        return _LABELS[metric]
    match = re.match(r"^(mean|median|std|p90|p95|p99)_(ttft|tpot|itl|e2e_latency)_ms$", metric)
    if match:
        return f"{match.group(1)} {_LATENCY_NAMES[match.group(2)]} (ms)"
    return metric
