"""One trial: sample -> check -> launch -> benchmark by stages -> record.

Every way a trial can end is recorded in its user attrs (tuner/results/record.py) before it
ends, and no launch failure ever ends as FAIL: TPE ignores FAIL trials and would keep sampling the
failing region (docs/design.md). Failures end PRUNED with a violated `launch` constraint
instead, which TPE ranks below every feasible trial.

The objective does not choose the server: it gets a `Measurer` (tuner/trial/measure.py) that runs
the module and extra arguments of a `LaunchTarget`. It treats every server alike; the only simulator
field it sees is the time scale a simulator reports in /server_info, copied into the capacity.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

import optuna
from optuna.trial import TrialState

from tuner.bench import failure_message as bench_failure_message
from tuner.engines import sglang as engine
from tuner.launcher import LaunchError
from tuner.predict.memory import ModelMemory, estimate_memory
from tuner.results import record
from tuner.results.goals import SUSTAINED_RATE, is_capacity
from tuner.space.model import SearchSpace, suggest_flags, suggest_queued
from tuner.trial.crash_model import CrashModel, LaunchObservation
from tuner.trial.identical import default_already_taken, reuse_finished_identical
from tuner.trial.measure import LaunchAndMeasure, LaunchTarget, Measurer, StageHook
from tuner.trial.pruning import StagePoint, StagePruner
from tuner.trial.same_run import SameRunRules

EventHook = Callable[[str, dict[str, Any]], None]


@dataclass
class ObjectiveConfig:
    space: SearchSpace
    study_dir: Path  # studies/<study>
    target: LaunchTarget
    pruner: StagePruner = field(default_factory=StagePruner)
    crash_model: CrashModel | None = field(default_factory=CrashModel)
    model_memory: ModelMemory | None = None
    gpu_memory_gb: float | None = None
    on_event: EventHook | None = None
    measurer: Measurer | None = None  # None: launch the server and benchmark it over HTTP


class TrialObjective:
    """Callable handed to `study.optimize`; returns (throughput, latency)."""

    def __init__(self, config: ObjectiveConfig) -> None:
        self.config = config
        self.space = config.space
        self.measurer: Measurer = config.measurer or LaunchAndMeasure(
            config.target, config.space, config.study_dir
        )
        self.same_run = SameRunRules.of(config.space, config.model_memory, config.gpu_memory_gb)
        # The params whose choices make a stage point's group (`_group`): fixed by the space.
        self._categorical = sorted(
            name for name, spec in self.space.params.items() if spec.kind == "categorical"
        )

    # -- helpers ---------------------------------------------------------------------------

    def _emit(self, kind: str, **data: Any) -> None:
        if self.config.on_event is not None:
            self.config.on_event(kind, data)

    def _end_without_launch(
        self, trial: optuna.Trial, outcome: str, failure_class: str | None, message: str
    ) -> NoReturn:
        """Record how the trial ended before any benchmark, and end it PRUNED (never FAIL)."""
        trial.set_user_attr(record.OUTCOME, outcome)
        trial.set_user_attr(record.FAILURE_CLASS, failure_class)
        trial.set_user_attr(record.FAILURE_MSG, message)
        record.set_constraints(trial, {"launch": 1.0})
        self._emit("failed", number=trial.number, outcome=outcome, message=message)
        raise optuna.TrialPruned(message)

    def _launch_history(self, study: optuna.Study) -> list[LaunchObservation]:
        history = []
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
            outcome = t.user_attrs.get(record.OUTCOME)
            if outcome not in (
                record.OUTCOME_OK,
                record.OUTCOME_PRUNED,
                record.OUTCOME_LAUNCH_FAILED,
                record.OUTCOME_BENCH_FAILED,
            ):
                continue
            failure = t.user_attrs.get(record.FAILURE_CLASS)
            if failure == "port_in_use":
                continue  # says nothing about the configuration
            prediction = t.user_attrs.get(record.PREDICTION) or {}
            history.append(
                LaunchObservation(
                    flags=t.user_attrs.get(record.FLAGS, {}),
                    crashed=outcome == record.OUTCOME_LAUNCH_FAILED,
                    p_crash=prediction.get("p_crash"),
                    threshold=prediction.get("threshold"),
                    probe=bool(prediction.get("probe", False)),
                )
            )
        return history

    def _stage_history(self, study: optuna.Study, stage: int) -> list[StagePoint]:
        points = []
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            stages = t.user_attrs.get(record.STAGES) or []
            if len(stages) > stage:
                feasible = record.feasible(t.constraints)
                # The front cut learns how far a full run ends from its stages; a repeat's
                # copied figures would count one trial twice.
                final, final_slos = None, None
                if record.DUPLICATE_OF not in t.user_attrs and t.values:
                    final = (float(t.values[0]), float(t.values[1]))
                    final_slos = self._slo_loads(t.user_attrs.get(record.METRICS) or {})
                point = replace(
                    self._point(stages[stage]),
                    feasible=feasible,
                    final=final,
                    final_slos=final_slos,
                    group=self._group(t.params),
                )
                points.append(point)
        return points

    def _point(self, summary: dict[str, Any]) -> StagePoint:
        objectives = self.space.objectives
        return StagePoint(
            throughput=float(summary.get(objectives.throughput, 0.0) or 0.0),
            latency=_finite(summary.get(objectives.latency)),
            duration_s=float(summary.get("duration", 0.0) or 0.0),
            slos=self._slo_loads(summary),
        )

    def _group(self, params: dict[str, Any]) -> tuple[tuple[str, str], ...]:
        """The categorical choices of a trial's params: the stage pruner's first rule compares
        stage figures only between trials that share them (tuner/trial/pruning.py)."""
        return tuple((name, repr(params[name])) for name in self._categorical if name in params)

    def _slo_loads(self, summary: dict[str, Any]) -> tuple[float, ...]:
        """Each SLO's value over its limit (its limit over the value for a lower bound): over 1
        is broken, and a stage's load scales to the full run's by a factor (the SLO cut)."""
        loads = []
        for slo in self.space.slos:
            value = _finite(summary.get(slo.metric))
            if slo.op in ("<=", "<"):
                loads.append(value / slo.limit if slo.limit > 0 else math.nan)
            else:
                loads.append(slo.limit / value if value > 0 else math.inf)
        return tuple(loads)

    # -- the trial -------------------------------------------------------------------------

    def __call__(self, trial: optuna.Trial) -> tuple[float, float]:
        started = time.monotonic()
        space = self.space
        is_default = bool(trial.user_attrs.get(record.IS_DEFAULT, False))
        if is_default:
            # sglang's defaults: nothing passed; the queued params (tuner/study/baseline.py) only
            # tell the sampler where this configuration sits.
            suggest_queued(trial, space)
            tuned: dict[str, Any] = {}
            # Two workers queued the baseline at once: the later one has the same flags, so it
            # waits for the first one's result and reuses it.
            is_default = not default_already_taken(trial)
        else:
            tuned = suggest_flags(trial, space)
        flags: dict[str, Any] = {
            "model_path": space.model_path,
            **space.fixed_flags,
            **tuned,
        }
        trial.set_user_attr(record.IS_DEFAULT, is_default)
        trial.set_user_attr(record.FLAGS, {k: v for k, v in flags.items() if v is not None})
        self._emit(
            "sampled",
            number=trial.number,
            flags=tuned,
            is_default=is_default,
            guided_by=trial.user_attrs.get(record.GUIDED_BY),
        )

        if trial.user_attrs.get(record.GUIDED_BY) != record.REMEASURE_CHECK:
            reused = self._reuse_identical_trial(trial)
            if reused is not None:
                return reused
        version = space.engine_version
        try:
            server_args = engine.build_server_args(flags, version)
        except Exception as exc:  # a flag this version lacks: recorded, not launched
            self._end_without_launch(trial, record.OUTCOME_INVALID, "bad_argument", str(exc))
        trial.set_user_attr(record.SERVER_ARGS, server_args)

        violations = engine.check_startup_rules(flags, version)
        if violations:
            self._end_without_launch(
                trial, record.OUTCOME_INVALID, "startup_rule", "; ".join(violations)
            )
        self._check_feasibility(trial, flags)

        self._emit("launching", number=trial.number)

        def on_ready(capacity: dict[str, Any], pgid: int | None) -> None:
            if pgid is not None:
                trial.set_user_attr(record.SERVER_PGID, pgid)
            trial.set_user_attr(record.CAPACITY, capacity)
            self._emit("ready", number=trial.number, capacity=capacity)

        try:
            result = self.measurer.measure(
                trial.number, server_args, on_ready, self._stage_hook(trial)
            )
        except LaunchError as exc:
            trial.set_user_attr(
                record.TIMINGS,
                {"launch_s": exc.elapsed_s or time.monotonic() - started, "bench_s": 0.0},
            )
            trial.set_user_attr(record.LOG_TAIL, exc.log_tail[-2000:])
            self._end_without_launch(
                trial, record.OUTCOME_LAUNCH_FAILED, exc.failure_class, exc.message
            )
        died = result.died
        launch_s = result.launch_s

        summary = dict(result.summary)
        trial.set_user_attr(record.METRICS, summary)
        trial.set_user_attr(
            record.TIMINGS,
            {
                "launch_s": launch_s,
                "bench_s": float(result.duration_s),
                "total_s": time.monotonic() - started,
            },
        )
        constraints = {"launch": 0.0, **self._slo_constraints(summary)}
        if result.rate_steps:
            trial.set_user_attr(record.RATE_STEPS, list(result.rate_steps))
        if is_capacity(space.objectives.throughput):
            # No rate met every SLO: nothing this configuration can be recommended for.
            constraints["capacity"] = 0.0 if summary.get(SUSTAINED_RATE) else 1.0
        completed = int(summary.get("completed", 0) or 0)
        if died or completed == 0:
            trial.set_user_attr(record.OUTCOME, record.OUTCOME_BENCH_FAILED)
            trial.set_user_attr(
                record.FAILURE_CLASS, "died_during_benchmark" if died else "benchmark_failed"
            )
            if died:
                cause = result.died_cause
                message = "server died during the benchmark" + (f": {cause}" if cause else "")
            else:
                message = bench_failure_message(summary)
            trial.set_user_attr(record.FAILURE_MSG, message)
            constraints["launch"] = 1.0
            record.set_constraints(trial, constraints)
            self._emit("failed", number=trial.number, outcome="bench_failed", message=message)
            raise optuna.TrialPruned(message)

        pruned = trial.user_attrs.get(record.PRUNED)
        values = self._point(summary)
        if result.stopped_at_stage is None or not pruned:
            constraints, values = _pooled(trial, constraints, values)
        record.set_constraints(trial, constraints)
        if result.stopped_at_stage is not None and pruned:
            trial.set_user_attr(record.OUTCOME, record.OUTCOME_PRUNED)
            self._emit("pruned", number=trial.number, **pruned)
            raise optuna.TrialPruned(pruned["reason"])

        trial.set_user_attr(record.OUTCOME, record.OUTCOME_OK)
        trial.set_user_attr(record.FAILURE_CLASS, None)
        self._emit(
            "completed",
            number=trial.number,
            throughput=values.throughput,
            latency=values.latency,
            feasible=record.feasible(constraints),
        )
        return values.throughput, values.latency

    def _reuse_identical_trial(self, trial: optuna.Trial) -> tuple[float, float] | None:
        """Samplers can propose a configuration already measured (discrete spaces, converged
        TPE): copy that result instead of spending a launch on it."""
        previous = reuse_finished_identical(trial, self.same_run)
        if previous is None:
            return None
        message = f"same flags as trial {previous.number}: its result is reused"
        if (reason := trial.user_attrs.get(record.SAME_RUN)) is not None:
            message = f"same run as trial {previous.number} ({reason}): its result is reused"
            flags = trial.user_attrs[record.FLAGS]
            trial.set_user_attr(
                record.SERVER_ARGS, engine.build_server_args(flags, self.space.engine_version)
            )
        if previous.state == TrialState.COMPLETE:
            self._emit(
                "completed",
                number=trial.number,
                throughput=previous.values[0],
                latency=previous.values[1],
                feasible=record.feasible(previous.constraints),
                duplicate=True,
                message=message,
            )
            return float(previous.values[0]), float(previous.values[1])
        self._emit(
            "failed", number=trial.number, outcome="duplicate", message=message, duplicate=True
        )
        raise optuna.TrialPruned(message)

    def _check_feasibility(self, trial: optuna.Trial, flags: dict[str, Any]) -> None:
        cfg = self.config
        if cfg.model_memory is not None and cfg.gpu_memory_gb:
            estimate = estimate_memory(
                flags, cfg.model_memory, cfg.gpu_memory_gb, version=self.space.engine_version
            )
            if not estimate.fits:
                trial.set_user_attr(
                    record.PREDICTION,
                    {
                        "reason": estimate.reason,
                        "model": "memory",
                        "failure": estimate.failure_class,
                    },
                )
                self._end_without_launch(
                    trial, record.OUTCOME_SKIPPED, estimate.failure_class, estimate.reason
                )
        if cfg.crash_model is None:
            return
        prediction = cfg.crash_model.predict(flags, self._launch_history(trial.study))
        if prediction is None:
            return
        trial.set_user_attr(record.PREDICTION, {**prediction.to_dict(), "model": "classifier"})
        if prediction.skip:
            self._end_without_launch(trial, record.OUTCOME_SKIPPED, None, prediction.reason)

    def _stage_hook(self, trial: optuna.Trial) -> StageHook:
        """After each benchmark stage: record it, and say whether to go on (the pruner)."""
        if is_capacity(self.space.objectives.throughput):
            return self._rate_step_hook(trial)
        n_stages = int(self.space.bench.stages)
        stages: list[dict[str, Any]] = []

        def on_stage(stage: int, summary: dict[str, Any]) -> bool:
            stages.append(dict(summary))
            trial.set_user_attr(record.STAGES, stages)
            point = self._point(summary)
            self._emit(
                "stage",
                number=trial.number,
                stage=stage,
                n_stages=n_stages,
                throughput=point.throughput,
                latency=point.latency,
            )
            decision = self.config.pruner.decide(
                stage,
                n_stages,
                replace(point, group=self._group(trial.params)),
                self._stage_history(trial.study, stage),
            )
            if decision.prune:
                trial.set_user_attr(
                    record.PRUNED,
                    {
                        "stage": stage,
                        "reason": decision.reason,
                        "time_saved_s": decision.time_saved_s,
                        "rule": decision.rule,
                    },
                )
                return False
            return True

        return on_stage

    def _rate_step_hook(self, trial: optuna.Trial) -> StageHook:
        """A capacity search's steps (tuner/trial/capacity.py): recorded as they end, so that an
        interrupted trial keeps them; the search decides its own steps, never the pruner."""
        steps: list[dict[str, Any]] = []

        def on_step(index: int, step: dict[str, Any]) -> bool:
            steps.append(dict(step))
            trial.set_user_attr(record.RATE_STEPS, steps)
            self._emit("rate_step", number=trial.number, step=index, **step)
            return True

        return on_step

    def _slo_constraints(self, summary: dict[str, Any]) -> dict[str, float]:
        out = {}
        for slo in self.space.slos:
            value = summary.get(slo.metric)
            out[f"slo:{slo.metric}"] = 1.0 if value is None else float(slo.violation(float(value)))
        return out


def _pooled(
    trial: optuna.Trial, constraints: dict[str, float], point: StagePoint
) -> tuple[dict[str, float], StagePoint]:
    """A re-measurement (`record.REMEASURE_CHECK`) stands for every measurement of its flags:
    each SLO's graded violation and both objectives are their means over it and the earlier
    complete launches of the same flags (recorded in `POOLED_WITH`), so that a configuration
    missed by 0.7% and then met by 0.5% is judged by the two together, not by the luckier one.
    Any other trial: as measured."""
    if trial.user_attrs.get(record.GUIDED_BY) != record.REMEASURE_CHECK:
        return constraints, point
    flags = trial.user_attrs.get(record.FLAGS)
    earlier = [
        t
        for t in trial.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.number != trial.number
        and record.DUPLICATE_OF not in t.user_attrs
        and t.user_attrs.get(record.FLAGS) == flags
        and len(t.values or ()) == 2
    ]
    if not earlier:
        return constraints, point
    trial.set_user_attr(record.POOLED_WITH, [t.number for t in earlier])
    graded = [record.trial_constraints(t) for t in earlier]
    pooled = {
        key: statistics.fmean([value, *(g.get(key, value) for g in graded)])
        if key.startswith("slo:")
        else value
        for key, value in constraints.items()
    }
    throughput = statistics.fmean([point.throughput, *(float(t.values[0]) for t in earlier)])
    latency = statistics.fmean([point.latency, *(float(t.values[1]) for t in earlier)])
    return pooled, replace(point, throughput=throughput, latency=latency)


def _finite(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.inf
    return number if math.isfinite(number) else math.inf
