"""The study loop: open or resume a study, queue the baseline, run trials to the budget, summarize.

    summary = run_study(resolve_run(StudyOptions(trials=40)), on_event=print_event)

Rerunning the same command resumes: `--trials 40` means "until the study holds 40 launched
configurations" (skips and repeats do not count: budget.py), whichever worker ran them. A trial
interrupted by Ctrl-C (or SIGTERM, SIGHUP) ends FAIL (it measured nothing), and its configuration
is queued again on the next run so nothing sampled is lost. A trial left RUNNING by a process that
was killed is found and queued again too (tuner/study/recovery.py), on start and while waiting.

Processes that start together on one study take a lock file beside a file storage
(tuner/results/study_lock.py) to create the study and to take each trial. No wait is silent: a
worker with nothing to start says which trials it waits for, and gives up after `wait_timeout_s`.
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import BaseStorage, fail_stale_trials
from optuna.trial import TrialState

from tuner.engines.model_config import ModelMemory
from tuner.errors import UserError
from tuner.results import record
from tuner.results.goals import MAXIMIZE, MINIMIZE, goal_named, is_capacity, steadiest
from tuner.results.pareto import Point, pareto_front
from tuner.results.provenance import Provenance, collect_provenance, record_provenance
from tuner.results.storage import describe_storage, open_storage, storage_file
from tuner.results.study_lock import LOCK_SUFFIX, StudyLock, ensure_writable_file
from tuner.signals import deferred, stop_requested
from tuner.study.baseline import Baseline, default_trial_params
from tuner.study.budget import FINISHED, SkipLimit, counts, measured_count, summary_counts
from tuner.study.guide import Guide, GuideSettings, make_guide
from tuner.study.options import StudyOptions, StudySummary
from tuner.study.policy import DEFAULTS, RETRY, SAMPLER
from tuner.study.recovery import OwnerHeartbeat, owner_tag, recover_abandoned, trial_owner
from tuner.study.run import Run
from tuner.study.sampler import grid_points_left, make_sampler
from tuner.study.standing import within_slos
from tuner.study.stopping import Measure, StopDecision, Stopping, StopRule
from tuner.study.storage import (
    SignalSafeStorage,
    optuna_heartbeat_s,
    signal_safe,
    storage_of,
    trial_id,
)
from tuner.trial.crash_model import CrashModel
from tuner.trial.objective import EventHook, ObjectiveConfig, TrialObjective
from tuner.trial.pruning import StagePruner

_log = logging.getLogger(__name__)


def quiet_optuna() -> None:
    """The live display reports every trial; Optuna's own INFO lines and warnings about its
    experimental flags (`group=True`, heartbeats) would only scroll it away."""
    import warnings

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def metric_name(metric: str) -> str:
    """An objective's name with its unit, as optuna-dashboard shows it: "median_tpot_ms (ms)"."""
    if metric.endswith("_ms"):
        unit = "ms"
    elif is_capacity(metric):
        unit = "req/s"
    elif metric.endswith("_throughput"):
        unit = "tok/s"
    else:
        return metric
    return f"{metric} ({unit})"


def ensure_study_attrs(study: optuna.Study, run: Run) -> None:
    """Write the run's space, engine, objectives and SLOs into a new study; refuse a study
    created with another space (its trials would be compared with the wrong configurations)."""
    attrs = study.user_attrs
    space = run.space
    if record.STUDY_SPACE not in attrs:
        study.set_user_attr(record.STUDY_SPACE, space.to_dict())
        study.set_user_attr(record.STUDY_SPACE_FILE, str(run.space_path))
        study.set_user_attr(record.STUDY_ENGINE, run.options.engine)
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
        # optuna-dashboard labels the objectives "Objective 0/1" unless the study names them.
        objectives = (space.objectives.throughput, space.objectives.latency)
        with warnings.catch_warnings():  # experimental since Optuna 3.2, and stable in use
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([metric_name(m) for m in objectives])
    elif attrs.get(record.STUDY_SPACE) != space.to_dict():
        raise UserError(
            f"study {study.study_name!r} was created with a different search space "
            f"({attrs.get(record.STUDY_SPACE_FILE)}"
            + (f", or another --goal than {run.options.goal}" if run.options.goal else "")
            + "); use --study NAME for a new study"
        )
    if run.options.goal and attrs.get(record.STUDY_GOAL) != run.options.goal:
        study.set_user_attr(record.STUDY_GOAL, run.options.goal)  # what export picks by
    if run.options.engine == "sglang":
        # What the last run served with: the export script starts sglang the same way.
        study.set_user_attr(record.STUDY_ENGINE_PYTHON, run.target.python)
        study.set_user_attr(record.STUDY_ENGINE_ENV, dict(run.target.env))


def queue_baseline_and_retries(study: optuna.Study, baseline: Baseline | None = None) -> None:
    """Queue sglang's defaults once per study, and once more each trial a stop interrupted."""
    trials = study.get_trials(deepcopy=False)
    if not any(t.user_attrs.get(record.IS_DEFAULT) for t in trials):
        # sglang's defaults, no tuned flag: every result is compared with it.
        first = {record.IS_DEFAULT: True, record.GUIDED_BY: DEFAULTS}
        study.enqueue_trial(baseline() if baseline else {}, user_attrs=first)
    retried = {t.user_attrs.get(record.RETRY_OF) for t in trials}
    for t in trials:
        if (
            t.state == TrialState.FAIL
            and t.user_attrs.get(record.INTERRUPTED)
            and t.number not in retried
        ):
            attrs: dict[str, Any] = {record.RETRY_OF: t.number, record.GUIDED_BY: RETRY}
            if t.user_attrs.get(record.IS_DEFAULT):
                attrs[record.IS_DEFAULT] = True
            study.enqueue_trial(t.params, user_attrs=attrs, skip_if_exists=False)


def finished_count(study: optuna.Study) -> int:
    return measured_count(study.get_trials(deepcopy=False, states=FINISHED))


def study_lock(options: StudyOptions, name: str, on_event: EventHook | None = None) -> StudyLock:
    """The lock beside the study's storage file (none for a server database)."""
    path = storage_file(options.storage, name, options.studies_dir)
    if path is not None:
        ensure_writable_file(path, "storage file", "make it writable or pass another --storage")
    lock_path = None if path is None else path.with_name(path.name + LOCK_SUFFIX)

    def on_wait(message: str) -> None:
        if on_event:
            on_event("waiting", {"message": message})

    return StudyLock(lock_path, on_wait=on_wait)


def open_study(
    run: Run, on_event: EventHook | None = None
) -> tuple[optuna.Study, SignalSafeStorage]:
    """Create or load the study, recover trials whose process is gone and queue the baseline
    and interrupted trials, under the study's lock. The storage comes back with the study,
    wrapped so that a stop signal never lands inside a storage write (tuner/study/storage.py)."""
    options, space, name = run.options, run.space, run.study_name
    with study_lock(options, name, on_event):
        storage = signal_safe(
            open_storage(
                options.storage,
                name,
                options.studies_dir,
                create=True,
                heartbeat_s=options.heartbeat_s,
            )
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
        ensure_study_attrs(study, run)
        record_provenance(study, lambda: _provenance(run))
        recover_abandoned(study, options.heartbeat_s, on_event=on_event, storage=storage)
        queue_baseline_and_retries(study, lambda: default_trial_params(space, *_memory(run)))
    return study, storage


def _memory(run: Run) -> tuple[ModelMemory | None, float | None]:
    """What the pre-launch memory checks get: the model and the GPU, none with
    `--no-feasibility`."""
    if not run.options.feasibility:
        return None, None
    return run.host.model, run.host.gpu_memory_gb


def _provenance(run: Run) -> Provenance:
    """What a new study records of where it runs (tuner/results/provenance.py)."""
    return collect_provenance(
        engine=run.engine,
        python=run.target.python,
        server_env=dict(run.target.env),
        gpus=run.target.gpus,
        model_path=run.space.model_path,
        seed=run.options.seed,
        host_facts=run.host,
        spoken_version=run.space.engine_version,
    )


def run_study(run: Run, on_event: EventHook | None = None) -> StudySummary:
    options, space, name = run.options, run.space, run.study_name
    study, storage = open_study(run, on_event)
    study_dir = options.studies_dir / name
    study_dir.mkdir(parents=True, exist_ok=True)
    model_memory, gpu_gb = _memory(run)
    objective = TrialObjective(
        ObjectiveConfig(
            space=space,
            study_dir=study_dir,
            target=run.target,
            pruner=StagePruner(options.pruner, enabled=options.prune),
            crash_model=CrashModel(seed=options.seed) if options.feasibility else None,
            model_memory=model_memory,
            gpu_memory_gb=gpu_gb,
            on_event=on_event,
        )
    )
    if on_event:
        on_event("start", {"study": name, "done": finished_count(study), "total": options.trials})
    interrupted = False
    gave_up = None
    guide = make_guide(space, run.host, GuideSettings.of(options))
    try:
        gave_up = run_trials(
            study,
            objective,
            options.trials,
            options.timeout_s,
            guide=guide,
            lock=study_lock(options, name, on_event),
            on_event=on_event,
            heartbeat_s=options.heartbeat_s,
            wait_timeout_s=options.wait_timeout_s,
            stopping=Stopping(stop_rule(options), guide),
            storage=storage,
        )
    except KeyboardInterrupt:
        interrupted = True
    summary = summarize(study, study_dir, options, interrupted)
    summary.gave_up = gave_up
    return summary


def run_trials(
    study: optuna.Study,
    objective: Callable[[optuna.Trial], tuple[float, float]],
    total: int,
    timeout_s: float | None = None,
    poll_s: float = 1.0,
    *,
    guide: Guide | None = None,
    lock: StudyLock | None = None,
    on_event: EventHook | None = None,
    heartbeat_s: float = 10.0,
    wait_timeout_s: float = 3600.0,
    stopping: Stopping | None = None,
    storage: BaseStorage | None = None,
) -> str | None:
    """Run trials until the study holds `total` finished ones, whoever runs them, or until
    `stopping` says the rest are unlikely to move the front (tuner/study/stopping.py).

    An ask/tell loop rather than `study.optimize`, because the budget is global: with several
    workers on one study, a worker must not start a trial that would exceed it, and must keep
    waiting while others' trials run, in case one dies and its trial is queued again. Returns
    None, or the message saying why it stopped waiting after `wait_timeout_s` without progress.
    `storage`: the study's storage as `open_study` gave it (else the study's own is read).
    """
    storage = storage or storage_of(study)
    lock = lock or StudyLock(None)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    waiting: tuple[int, ...] = ()
    waiting_since = 0.0
    while True:
        fail_stale_trials(study)  # RDB storages with heartbeats: requeues dead workers' trials
        recover_abandoned(study, heartbeat_s, lock, on_event, storage=storage)
        trials = study.get_trials(deepcopy=False)
        states = Counter(t.state for t in trials)
        finished = measured_count(trials)  # skips and repeats do not count (budget.py)
        if (exhausted := SkipLimit().check(trials)) is not None:
            _log.warning("%s", exhausted)  # the space holds no configuration left to measure
            return None
        if finished >= total or (deadline is not None and time.monotonic() > deadline):
            return None
        # A grid every point of which a trial has taken: nothing is left to ask for, but a
        # running trial may still die and be queued again, so wait for those as below.
        grid_done = grid_points_left(study) == 0 and not states[TrialState.WAITING]
        if grid_done and not states[TrialState.RUNNING]:
            message = f"every point of the grid has been tried; stopping after {finished} launched"
            _log.warning("%s", message)
            if on_event:
                on_event("stopped", {"message": message})
            return None
        budget_taken = finished + states[TrialState.RUNNING] >= total
        if (budget_taken or grid_done) and not states[TrialState.WAITING]:
            running = [t for t in trials if t.state == TrialState.RUNNING]
            if tuple(t.number for t in running) != waiting:
                waiting, waiting_since = tuple(t.number for t in running), time.monotonic()
                if on_event:
                    on_event("waiting", {"message": _waiting_message(running, wait_timeout_s)})
            elif time.monotonic() - waiting_since > wait_timeout_s:
                message = (
                    f"gave up after {wait_timeout_s:.0f} s waiting for "
                    f"{_describe(running)} to finish; the study holds {finished}/{total} "
                    "finished trials: run the same command again to wait again"
                )
                if on_event:
                    on_event("gave_up", {"message": message})
                return message
            time.sleep(poll_s)
            continue
        waiting = ()
        trial = None
        try:
            # SQLite: two processes must not take the same queued trial. From the ask to the
            # owner written, a stop signal waits (not while waiting for the lock): it then ends
            # the asked trial as interrupted, instead of leaving it RUNNING with no owner.
            with lock, deferred():
                if stopping is not None and not _queued(study):
                    if stopping.should_stop(study):
                        if on_event and stopping.decision is not None:
                            on_event("stopped", _stopped_event(stopping.decision, total))
                        return None
                    if on_event and (decision := stopping.decision) and decision.outlook:
                        on_event("stop_check", {"message": f"not stopping: {decision.reason}"})
                if guide is not None:
                    guide.before_ask(study)  # may queue a trial of its own (guide.py)
                trial = study.ask()
                if record.GUIDED_BY not in trial.user_attrs:  # no rule queued it: a draw
                    trial.set_user_attr(record.GUIDED_BY, SAMPLER)
                if _over_budget(study, trial.number, total):
                    # Another worker asked at the same moment; the later trial number steps back.
                    trial.set_user_attr(record.SURPLUS, True)
                    study.tell(trial, state=TrialState.FAIL)
                    trial = None
                    continue
                beat = OwnerHeartbeat(
                    storage,
                    trial_id(storage, study, trial.number),
                    heartbeat_s,
                    optuna_beat_s=optuna_heartbeat_s(storage),
                )
            _run_one(study, trial, objective, beat)
        except KeyboardInterrupt:
            if trial is not None:
                _record_interrupted(study, trial)
            raise


def _queued(study: optuna.Study) -> bool:
    """A queued trial (the baseline, a retry, the stop rule's check) is measured first."""
    return bool(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def _stopped_event(decision: StopDecision, total: int) -> dict[str, Any]:
    return {
        "message": f"stopped after {decision.launched} of {total} trials: {decision.reason}",
        "launched": decision.launched,
        "total": total,
    }


def stop_rule(options: StudyOptions) -> StopRule:
    """The stop rule a run's options ask for (`--min-gain`; 0 turns it off)."""
    rule = replace(options.stop_rule or StopRule(), min_gain=options.min_gain)
    goal = goal_named(options.goal)
    if goal is None:
        return rule
    # The capacity search finds a rate to within its tolerance: a smaller move is chance.
    noise = max(rule.noise, goal.noise)
    return replace(rule, measure=cast(Measure, goal.measure), noise=noise)


def _describe(running: list[optuna.trial.FrozenTrial]) -> str:
    parts = []
    for t in running:
        owner = trial_owner(t)
        parts.append(f"trial {t.number} (worker {owner_tag(owner) if owner else '?'})")
    return ", ".join(parts)


def _waiting_message(running: list[optuna.trial.FrozenTrial], limit_s: float) -> str:
    return (
        f"waiting for {_describe(running)} to finish: the budget is taken "
        f"(gives up after {limit_s:.0f} s)"
    )


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
    beat: OwnerHeartbeat,
) -> None:
    """Run the objective and tell the trial how it ended; a KeyboardInterrupt (Ctrl-C or a stop
    signal) propagates, and the caller records the trial as interrupted."""
    try:
        try:
            if trial.user_attrs.get(record.SERVER_PGID):
                trial.set_user_attr(record.SERVER_PGID, None)  # copied from a retried trial
            values = objective(trial)
        finally:
            with deferred():
                beat.stop()
    except optuna.TrialPruned:
        _tell(study, trial, state=TrialState.PRUNED)
    except Exception as exc:
        if isinstance(exc, UpdateFinishedTrialError):  # failed by another process meanwhile
            _log.warning("trial %d was failed by another process as abandoned", trial.number)
            return
        if (signame := stop_requested()) is not None:
            # Cleanup cut short by the stop signal (a server stopping, a request cancelled):
            # the trial was interrupted, not broken, and one line says what else happened.
            _log.warning(
                "trial %d interrupted by %s (then %s: %s)",
                trial.number,
                signame,
                type(exc).__name__,
                exc,
            )
            raise KeyboardInterrupt(signame) from None
        trial.set_user_attr(record.ERROR, f"{type(exc).__name__}: {exc}")
        _tell(study, trial, state=TrialState.FAIL)
        _log.exception("trial %d raised; recorded as FAIL", trial.number)
    else:
        _tell(study, trial, values=list(values))


def _record_interrupted(study: optuna.Study, trial: optuna.Trial) -> None:
    """It measured nothing: FAIL, marked so that the next run queues it again. A signal that
    follows is ignored (tuner/signals.py), so this runs to the end."""
    with contextlib.suppress(UpdateFinishedTrialError):
        trial.set_user_attr(record.INTERRUPTED, True)
    _tell(study, trial, state=TrialState.FAIL)


def _tell(study: optuna.Study, trial: optuna.Trial, **kw: Any) -> None:
    """`study.tell`, unless another process has already failed the trial as abandoned (its
    heartbeat looked stale): then the trial is left as it is, and queued again already."""
    try:
        study.tell(trial, skip_if_finished=True, **kw)
    except UpdateFinishedTrialError:
        _log.warning("trial %d was failed by another process as abandoned", trial.number)


def summarize(
    study: optuna.Study, study_dir: Path, options: StudyOptions, interrupted: bool = False
) -> StudySummary:
    trials = study.get_trials(deepcopy=False)
    counts = summary_counts(trials)  # by state, skips and repeats apart (budget.py)
    feasible = [t for t in trials if within_slos(t)]
    front = pareto_front([Point(t.number, tuple(t.values)) for t in feasible], (MAXIMIZE, MINIMIZE))
    on_front = {p.key for p in front}
    pareto = sorted((t for t in feasible if t.number in on_front), key=lambda t: -t.values[0])
    default = next(
        (t for t in trials if t.user_attrs.get(record.IS_DEFAULT) and t.state in FINISHED), None
    )
    cut = [
        t.user_attrs[record.PRUNED]
        for t in trials
        if t.state == TrialState.PRUNED and isinstance(t.user_attrs.get(record.PRUNED), dict)
    ]
    stopped = study.user_attrs.get(record.STUDY_STOPPED)
    launched = measured_count(trials)
    if not isinstance(stopped, dict) or stopped.get("launched") != launched:
        stopped = None  # none, or a stop a later run went past (--min-gain 0, a larger one)
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
        launched=launched,
        budget=options.trials,
        stopped_because=None if stopped is None else str(stopped.get("reason")),
        goal=study.user_attrs.get(record.STUDY_GOAL),
        pruned=len(cut),
        pruned_saved_s=sum(float(c.get("time_saved_s") or 0.0) for c in cut),
        steady=steadiest(feasible, record.least_slo_margin, lambda t: t.values[0]),
    )
