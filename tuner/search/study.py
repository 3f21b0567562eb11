"""The study loop: open or resume a study, queue the baseline, run trials to the budget, summarize.

    summary = run_study(StudyOptions(trials=40), on_event=print_event)

Rerunning the same command resumes: the trial budget counts the study's measured trials (COMPLETE
and PRUNED that launched a configuration; tuner/search/budget.py), so `--trials 40` means "until
the study holds 40 launched configurations", whichever worker ran them. Proposals rejected before
launch and repeats of a measured configuration are recorded but do not count. A trial
interrupted by Ctrl-C ends FAIL (it measured nothing), and its configuration is queued again on
the next run so nothing sampled is lost.
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.storages._heartbeat import fail_stale_trials, get_heartbeat_thread
from optuna.trial import TrialState

from tuner.errors import UserError
from tuner.results import record
from tuner.results.goals import MAXIMIZE, MINIMIZE
from tuner.results.pareto import Point, pareto_front
from tuner.results.storage import describe_storage, open_storage
from tuner.search.baseline import baseline_params
from tuner.search.budget import (
    NOT_LAUNCHED,
    RetryCap,
    SpaceExhausted,
    counts,
    measured_count,
)
from tuner.search.feasibility import CrashModel, ModelMemory, estimate_memory
from tuner.search.guide import Guide, make_guide
from tuner.search.objective import EventHook, ObjectiveConfig, TrialObjective
from tuner.search.options import StudyOptions, StudySummary
from tuner.search.pruning import StagePruner
from tuner.search.sampler import make_sampler
from tuner.search.space import SearchSpace
from tuner.search.space_load import default_space_path, load_space
from tuner.search.target import launch_target, memory_inputs

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)

_log = logging.getLogger(__name__)


def quiet_optuna() -> None:
    """The live display reports every trial; Optuna's own INFO lines and warnings about its
    experimental flags (`group=True`, heartbeats) would only scroll it away."""
    import warnings

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def _ensure_study_attrs(study: optuna.Study, space: SearchSpace, options: StudyOptions) -> None:
    attrs = study.user_attrs
    if record.STUDY_SPACE not in attrs:
        study.set_user_attr(record.STUDY_SPACE, space.to_dict())
        study.set_user_attr(
            record.STUDY_SPACE_FILE, str(options.space_path or default_space_path())
        )
        study.set_user_attr(record.STUDY_ENGINE, options.engine)
        study.set_user_attr(record.STUDY_SGLANG_VERSION, space.engine_version)
        study.set_user_attr(
            record.STUDY_OBJECTIVES,
            [
                {"metric": space.objectives.throughput, "direction": MAXIMIZE},
                {"metric": space.objectives.latency, "direction": MINIMIZE},
            ],
        )
        study.set_user_attr(
            record.STUDY_SLOS,
            [{"metric": s.metric, "op": s.op, "limit": s.limit} for s in space.slos],
        )
    elif attrs.get(record.STUDY_SPACE) != space.to_dict():
        raise UserError(
            f"study {study.study_name!r} was created with a different search space "
            f"({attrs.get(record.STUDY_SPACE_FILE)}); use --study NAME for a new study"
        )


def queue_baseline_and_retries(study: optuna.Study, baseline: dict[str, Any] | None = None) -> None:
    """`baseline`: the default trial's params (tuner/search/baseline.py); it launches no flag."""
    trials = study.get_trials(deepcopy=False)
    if not any(t.user_attrs.get(record.IS_DEFAULT) for t in trials):
        # sglang's defaults, no tuned flag: every result is compared with it.
        study.enqueue_trial(baseline or {}, user_attrs={record.IS_DEFAULT: True})
    retried = {t.user_attrs.get(record.RETRY_OF) for t in trials}
    for t in trials:
        if (
            t.state == TrialState.FAIL
            and t.user_attrs.get(record.INTERRUPTED)
            and t.number not in retried
        ):
            attrs: dict[str, Any] = {record.RETRY_OF: t.number}
            if t.user_attrs.get(record.IS_DEFAULT):
                attrs[record.IS_DEFAULT] = True
            study.enqueue_trial(t.params, user_attrs=attrs, skip_if_exists=False)


def finished_count(study: optuna.Study) -> int:
    """Trials that count against the budget: finished, and launched a configuration."""
    return measured_count(study.get_trials(deepcopy=False, states=FINISHED))


def open_study(options: StudyOptions) -> tuple[optuna.Study, SearchSpace, str]:
    space_path = options.space_path or default_space_path()
    space = load_space(space_path)
    name = options.study_name or space.name
    storage = open_storage(
        options.storage, name, options.studies_dir, create=True, heartbeat_s=options.heartbeat_s
    )
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        directions=[MAXIMIZE, MINIMIZE],
        load_if_exists=True,
    )
    seed = options.seed
    if seed is not None:
        # A resumed study must not replay the start-up samples it already measured, and
        # workers given seeds 0, 1, 2 must not collide after that shift.
        seed = (seed * 1_000_003 + len(study.get_trials(deepcopy=False))) % 2**32
    study.sampler = make_sampler(options.sampler, space, seed)
    _ensure_study_attrs(study, space, options)
    return study, space, name


def run_study(options: StudyOptions, on_event: EventHook | None = None) -> StudySummary:
    study, space, name = open_study(options)
    study_dir = options.studies_dir / name
    study_dir.mkdir(parents=True, exist_ok=True)
    model_memory, gpu_gb = memory_inputs(space, options) if options.feasibility else (None, None)
    objective = TrialObjective(
        ObjectiveConfig(
            space=space,
            study_dir=study_dir,
            target=launch_target(space, options),
            pruner=StagePruner(options.pruner, enabled=options.prune),
            crash_model=CrashModel(seed=options.seed) if options.feasibility else None,
            model_memory=model_memory,
            gpu_memory_gb=gpu_gb,
            on_event=on_event,
            extra_flags={"tp_size": options.tp_size} if options.tp_size > 1 else {},
        )
    )
    queue_baseline_and_retries(study, default_trial_params(space, options, model_memory, gpu_gb))
    if on_event:
        on_event("start", {"study": name, "done": finished_count(study), "total": options.trials})
    interrupted = False
    try:
        guide = make_guide(space, options, model_memory, gpu_gb)
        run_trials(study, objective, options.trials, options.timeout_s, guide=guide)
    except KeyboardInterrupt:
        interrupted = True
    return summarize(study, study_dir, options, interrupted)


def default_trial_params(
    space: SearchSpace,
    options: StudyOptions,
    model_memory: ModelMemory | None,
    gpu_gb: float | None,
) -> dict[str, Any]:
    """sglang's defaults as the space's params, with the memory estimate's automatic values."""
    estimate = None
    if model_memory is not None and gpu_gb:
        flags = {
            **space.fixed_flags,
            **({"tp_size": options.tp_size} if options.tp_size > 1 else {}),
        }
        estimate = estimate_memory(flags, model_memory, gpu_gb, version=space.engine_version)
    return baseline_params(space, estimate)


def run_trials(
    study: optuna.Study,
    objective: Callable[[optuna.Trial], tuple[float, float]],
    total: int,
    timeout_s: float | None = None,
    poll_s: float = 1.0,
    guide: Guide | None = None,
) -> None:
    """Run trials until the study holds `total` finished ones, whoever runs them.

    An ask/tell loop rather than `study.optimize`, because the budget is global: with several
    workers on one study, a worker must not start a trial that would exceed it, and must keep
    waiting while others' trials run, in case one dies and its trial is queued again.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    cap = RetryCap()
    while True:
        fail_stale_trials(study)  # RDB storages with heartbeats: requeues dead workers' trials
        trials = study.get_trials(deepcopy=False)
        states = Counter(t.state for t in trials)
        finished = measured_count(trials)
        try:
            cap.check(trials)
        except SpaceExhausted as exc:
            _log.warning("%s", exc)
            return
        if finished >= total or (deadline is not None and time.monotonic() > deadline):
            return
        if finished + states[TrialState.RUNNING] >= total and not states[TrialState.WAITING]:
            time.sleep(poll_s)
            continue
        if guide is not None:
            guide.before_ask(study)  # may queue a trial of its own (tuner/search/guide.py)
        trial = study.ask()
        if _over_budget(study, trial.number, total):
            # Another worker asked at the same moment; the later trial number steps back.
            trial.set_user_attr(record.SURPLUS, True)
            study.tell(trial, state=TrialState.FAIL)
            continue
        _run_one(study, trial, objective)


def _over_budget(study: optuna.Study, number: int, total: int) -> bool:
    ahead = [
        t
        for t in study.get_trials(deepcopy=False, states=(*FINISHED, TrialState.RUNNING))
        if counts(t) or (t.state == TrialState.RUNNING and t.number < number)
    ]
    return len(ahead) >= total


def _run_one(
    study: optuna.Study,
    trial: optuna.Trial,
    objective: Callable[[optuna.Trial], tuple[float, float]],
) -> None:
    trial.set_user_attr(record.WORKER, f"{os.uname().nodename}:{os.getpid()}")
    heartbeat = get_heartbeat_thread(trial._trial_id, study._storage)
    heartbeat.start()
    try:
        values = objective(trial)
    except optuna.TrialPruned:
        heartbeat.join()
        study.tell(trial, state=TrialState.PRUNED)
    except KeyboardInterrupt:
        heartbeat.join()
        # It measured nothing: FAIL, marked so that the next run queues it again.
        trial.set_user_attr(record.INTERRUPTED, True)
        study.tell(trial, state=TrialState.FAIL)
        raise
    except Exception as exc:
        heartbeat.join()
        trial.set_user_attr(record.ERROR, f"{type(exc).__name__}: {exc}")
        study.tell(trial, state=TrialState.FAIL)
        _log.exception("trial %d raised; recorded as FAIL", trial.number)
    else:
        heartbeat.join()
        study.tell(trial, values=list(values))


def summarize(
    study: optuna.Study, study_dir: Path, options: StudyOptions, interrupted: bool = False
) -> StudySummary:
    trials = study.get_trials(deepcopy=False)
    counts: dict[str, int] = {}
    for t in trials:
        key = t.state.name
        if t.state in FINISHED and record.DUPLICATE_OF in t.user_attrs:
            key = "REPEATED"  # a measured configuration proposed again: result copied
        elif t.state in FINISHED and t.user_attrs.get(record.OUTCOME) in NOT_LAUNCHED:
            key = "SKIPPED"  # rejected before launch; does not count against --trials
        counts[key] = counts.get(key, 0) + 1
    feasible = [
        t for t in trials if t.state == TrialState.COMPLETE and record.feasible(t.constraints)
    ]
    front = pareto_front([Point(t.number, tuple(t.values)) for t in feasible], (MAXIMIZE, MINIMIZE))
    on_front = {p.key for p in front}
    pareto = sorted((t for t in feasible if t.number in on_front), key=lambda t: -t.values[0])
    default = next(
        (t for t in trials if t.user_attrs.get(record.IS_DEFAULT) and t.state in FINISHED), None
    )
    return StudySummary(
        study_name=study.study_name,
        storage_description=describe_storage(
            options.storage, study.study_name, options.studies_dir
        ),
        storage=options.storage,
        study_dir=study_dir,
        counts=counts,
        pareto=pareto,
        default_trial=default,
        interrupted=interrupted,
    )
