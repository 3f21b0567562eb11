"""One study of one method and seed, through the real objective and study loop on an in-memory
Optuna study, measured by the oracle (`OracleMeasurer`: no server is launched)."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from benchmarks.oracle_measurer import NoiseModel, OracleMeasurer, TrialCost
from benchmarks.quality.grid import nested_loops
from benchmarks.quality.methods import Method
from benchmarks.quality.overrides import apply_overrides, study_settings
from benchmarks.quality.truth import Oracle, Truth
from tuner.host import HostFacts, read_host_facts
from tuner.launcher import LaunchTarget
from tuner.predict import Calibration
from tuner.results import record
from tuner.space import SearchSpace
from tuner.study import (
    GuideSettings,
    Run,
    SpaceMostlyInfeasible,
    Stopping,
    StudyOptions,
    default_trial_params,
    ensure_study_attrs,
    grid_search_space,
    is_free,
    launch_target,
    make_guide,
    make_sampler,
    queue_baseline_and_retries,
    run_trials,
)
from tuner.trial import CrashModel, ObjectiveConfig, StagePruner, TrialObjective


@dataclass
class TrialLog:
    number: int
    outcome: str | None
    counted: bool  # complete and SLO-feasible as the tuner recorded it
    truth: Truth | None
    gpu_s: float
    crashed: bool
    duplicate: bool
    params: dict[str, Any] = field(default_factory=dict)
    guided_by: str | None = None
    guided_from: int | None = None  # the trial the rule moved from, when it moved
    # The share of its limit by which the trial met its closest SLO as measured (record.
    # least_slo_margin); None when it did not complete.
    margin: float | None = None


@dataclass
class StudyRun:
    method: str
    seed: int
    trials: list[TrialLog]
    wall_s: float
    # With run_study's keep_study: the study and each trial's modelled cost, to read records.
    study: optuna.Study | None = field(default=None, repr=False)
    costs: dict[int, TrialCost] = field(default_factory=dict, repr=False)


def nested_grid(space: SearchSpace) -> list[dict[str, Any]]:
    grid = grid_search_space(space)
    return list(nested_loops(space, lambda p: grid.get(p.name, [])))


_HOSTS: dict[str, HostFacts] = {}


def host_facts(space: SearchSpace) -> HostFacts:
    """What the simulator tells of its GPU and model for this space, asked once per space."""
    key = repr(sorted((space.sim or {}).items())) + str(space.model_path)
    if key not in _HOSTS:
        target = launch_target(space, StudyOptions(engine="sim"))
        _HOSTS[key] = read_host_facts("sim", target.module, target.extra_args, space.model_path)
    return _HOSTS[key]


def run_study(
    method: Method,
    seed: int,
    budget: int,
    space: SearchSpace,
    oracle: Oracle,
    noise: NoiseModel,
    keep_study: bool = False,
) -> StudyRun:
    started = time.perf_counter()
    assert oracle.serve.oracle is not None
    serve = OracleMeasurer(space, seed=seed, noise=noise, oracle=oracle.serve.oracle)
    options = StudyOptions(
        engine="sim",
        seed=seed,
        prune=method.prune,
        # No estimate at all (model-free): the local search from trial 1, as `--no-warm-start`.
        warm_start=method.warm_start and method.estimate,
        polish=method.polish,
    )
    host = host_facts(space)
    chosen = GuideSettings.of(options)
    settings = apply_overrides(
        study_settings(replace(chosen, model=chosen.model and method.model), method.min_gain),
        method.settings,
    )
    guide = make_guide(space, host, settings["guide"])
    model_memory, gpu_gb = (host.model, host.gpu_memory_gb) if method.feasibility else (None, None)
    objective = TrialObjective(
        ObjectiveConfig(
            space=space,
            study_dir=Path(tempfile.gettempdir()),  # unused: OracleMeasurer writes no logs
            target=LaunchTarget(),
            pruner=StagePruner(settings["pruner"], enabled=method.prune),
            crash_model=CrashModel(seed=seed) if method.feasibility else None,
            model_memory=model_memory,
            gpu_memory_gb=gpu_gb,
            measurer=serve,
        )
    )
    nested = method.sampler == "grid-nested"
    study = optuna.create_study(
        storage=optuna.storages.InMemoryStorage(),
        study_name=f"{method.name}-{seed}",
        directions=["maximize", "minimize"],
        sampler=make_sampler("random" if nested else method.sampler, space, seed),
    )
    ensure_study_attrs(study, Run(options, space, Path(space.name), LaunchTarget(), host))
    if method.baseline:
        queue_baseline_and_retries(study, lambda: default_trial_params(space, model_memory, gpu_gb))
    if guide is not None and guide.estimator is not None and method.wrong_estimate:
        guide.estimator.bias = Calibration(0.6, prefill_fraction=1.0, accept_rate=0.7)
        guide.estimator.calibration = Calibration(prefix_reuse=0.0)
    if nested:
        for params in nested_grid(space)[:budget]:
            study.enqueue_trial(params)
    try:
        stopping = Stopping(settings["stop"], guide) if method.min_gain else None
        run_trials(study, objective, budget, guide=guide, stopping=stopping)
    except SpaceMostlyInfeasible as exc:  # what `tuner optimize` stops with; keep what it found
        print(f"{method.name} seed {seed}: stopped early: {exc}", flush=True)
    # A budget counts launched configurations (tuner/study/budget.py): proposals rejected
    # before launch and repeats cost no GPU time and are not among the first N trials.
    trials = [_log(t, serve, oracle) for t in study.get_trials(deepcopy=False) if not is_free(t)]
    failed = [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.FAIL]
    if failed:
        raise RuntimeError(f"{method.name} seed {seed}: trial raised: {failed[0].user_attrs}")
    wall_s = time.perf_counter() - started
    if keep_study:
        return StudyRun(method.name, seed, trials, wall_s, study, serve.costs)
    return StudyRun(method.name, seed, trials, wall_s)


def _log(t: optuna.trial.FrozenTrial, serve: OracleMeasurer, oracle: Oracle) -> TrialLog:
    attrs = t.user_attrs
    duplicate = attrs.get(record.DUPLICATE_OF) is not None
    counted = t.state == TrialState.COMPLETE and all(v <= 0 for v in t.constraints.values())
    args = attrs.get(record.SERVER_ARGS)
    truth = oracle.of_args(list(args)) if args is not None else None
    if args is not None and attrs.get(record.OUTCOME) != record.OUTCOME_INVALID:
        # What a study launched belongs to the space too (the baseline's params are {}).
        oracle.visited.setdefault(tuple(args), dict(t.params))
    cost = None if duplicate else serve.costs.get(t.number)
    return TrialLog(
        number=t.number,
        outcome=attrs.get(record.OUTCOME),
        counted=counted,
        truth=truth,
        gpu_s=cost.gpu_s if cost else 0.0,
        crashed=bool(cost and cost.crashed),
        duplicate=duplicate,
        params=dict(t.params),
        guided_by=attrs.get(record.GUIDED_BY),
        guided_from=attrs.get(record.GUIDED_FROM),
        margin=record.least_slo_margin(t) if t.state == TrialState.COMPLETE else None,
    )
