"""The study: storage, sampler, the baseline trial, resume, and the optimisation loop.

    summary = run_study(StudyOptions(trials=40), on_event=print_event)

Rerunning the same command resumes: the trial budget counts the study's finished trials (COMPLETE
and PRUNED), so `--trials 40` means "until the study holds 40", whichever worker ran them. A trial
interrupted by Ctrl-C ends FAIL (it measured nothing), and its configuration is queued again on
the next run so nothing sampled is lost.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages._heartbeat import fail_stale_trials, get_heartbeat_thread
from optuna.trial import TrialState

from tuner import record
from tuner.engines import sglang as engine
from tuner.engines.model_config import (
    ModelMemory,
    find_config_dir,
    missing_config_message,
    read_config,
)
from tuner.errors import UserError
from tuner.feasibility import CrashModel
from tuner.objective import EventHook, LaunchTarget, Objective, ObjectiveConfig
from tuner.pareto import MAXIMIZE, MINIMIZE, Point, pareto_front
from tuner.pruning import StagePruner, StagePrunerConfig
from tuner.space import SearchSpace, default_space_path, load_space
from tuner.storage import DEFAULT_STUDIES_DIR, describe_storage, open_storage

SAMPLERS = ("tpe", "nsga2", "random", "grid")
ENGINES = ("sim", "sglang")
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
INTERRUPTED = "interrupted"
RETRY_OF = "retry_of"
SURPLUS = "surplus"

_log = logging.getLogger(__name__)


@dataclass
class StudyOptions:
    trials: int = 40
    space_path: Path | None = None
    study_name: str | None = None
    storage: str | None = None
    engine: str = "sim"
    timeout_s: float | None = None
    seed: int | None = None
    sampler: str = "tpe"
    prune: bool = True
    feasibility: bool = True
    studies_dir: Path = DEFAULT_STUDIES_DIR
    gpus: str | None = None  # CUDA_VISIBLE_DEVICES for the server
    gpu_memory_gb: float | None = None  # for the memory estimate when nvml is absent
    time_scale: float | None = None  # simulator only: overrides the space's sim.time_scale
    ready_timeout_s: float | None = None
    tp_size: int = 1  # GPUs per server (sglang --tp-size)
    pruner: StagePrunerConfig | None = None  # None: the defaults of StagePrunerConfig
    heartbeat_s: int = 10  # PostgreSQL / MySQL storages: heartbeat of running trials


@dataclass
class StudySummary:
    study_name: str
    storage_description: str  # where it lives, for display (no password)
    storage: str | None  # what to pass to open_storage to reopen the study
    study_dir: Path
    counts: dict[str, int]
    pareto: list[optuna.trial.FrozenTrial]
    default_trial: optuna.trial.FrozenTrial | None
    interrupted: bool = False


def quiet_optuna() -> None:
    """The live display reports every trial; Optuna's own INFO lines and warnings about its
    experimental flags (`group=True`, heartbeats) would only scroll it away."""
    import warnings

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def make_sampler(name: str, space: SearchSpace, seed: int | None) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        # multivariate is off by default for multi-objective TPE in Optuna 5.0; group=True lets
        # it model conditional parameters (HiCache ratio only when HiCache is on, ...).
        return optuna.samplers.TPESampler(
            multivariate=True, group=True, seed=seed, n_startup_trials=8
        )
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=12)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        return optuna.samplers.GridSampler(grid_search_space(space), seed=seed)
    raise UserError(f"--sampler {name!r} is not one of {', '.join(SAMPLERS)}")


def grid_search_space(space: SearchSpace, points: int = 4) -> dict[str, list[Any]]:
    """The grid a sweep tool would enumerate: every choice, `points` values of each range."""
    import numpy as np

    grid: dict[str, list[Any]] = {}
    for name, param in space.params.items():
        if param.kind == "categorical":
            grid[name] = list(param.choices or ())
        elif param.kind in ("int", "float"):
            low, high = float(param.low), float(param.high)  # type: ignore[arg-type]
            values = (
                np.geomspace(low, high, points) if param.log else np.linspace(low, high, points)
            )
            if param.kind == "int":
                grid[name] = sorted({round(v) for v in values})
            else:
                step = float(param.step) if param.step else None
                grid[name] = [
                    round(round(v / step) * step, 6) if step else float(v) for v in values
                ]
    return grid


def launch_target(space: SearchSpace, options: StudyOptions) -> LaunchTarget:
    api_key = os.environ.get("SGLANG_API_KEY") or None
    if options.engine == "sglang":
        return LaunchTarget(
            module=engine.LAUNCH_MODULE,
            gpus=options.gpus,
            api_key=api_key,
            ready_timeout_s=options.ready_timeout_s or 1800.0,
        )
    if options.engine != "sim":
        raise UserError(f"--engine {options.engine!r} is not one of {', '.join(ENGINES)}")
    sim = dict(space.sim or {})
    if options.time_scale is not None:
        sim["time_scale"] = options.time_scale
    # Behave exactly like the sglang release whose flag names the study uses.
    sim.setdefault("sglang_version", space.engine_version)
    extra = sim_args(sim)
    return LaunchTarget(
        module="tuner.sim",
        extra_args=tuple(extra),
        gpus=options.gpus,
        api_key=api_key,
        ready_timeout_s=options.ready_timeout_s or 60.0,
    )


def sim_args(sim: dict[str, Any]) -> list[str]:
    """The space's `sim:` mapping as simulator options: {time_scale: 50} -> --sim-time-scale 50.

    Every key becomes `--sim-<key>` (true = a bare switch, false / null = omitted), so fault
    injection and any later simulator option need no change here.
    """
    args: list[str] = []
    for key, value in sim.items():
        if value is None or value is False:
            continue
        flag = "--sim-" + str(key).replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    return args


def memory_inputs(
    space: SearchSpace, options: StudyOptions
) -> tuple[ModelMemory | None, float | None]:
    """The model's memory needs (from its config.json) and the GPU's size, as this host tells.

    Both engines read config.json the same way; the simulator only says where its model's file
    is and how large its GPU is, as nvml would for a real one."""
    if options.engine == "sim":
        described = _describe_simulator(launch_target(space, options), space.model_path)
        config_dir = described.get("model_config_dir")
        gpu_gb = options.gpu_memory_gb or described.get("gpu_memory_gb")
    else:
        config_dir = find_config_dir(space.model_path)
        gpu_gb = options.gpu_memory_gb or _nvml_gpu_memory_gb(options.gpus)
    if not config_dir:
        _log.warning(missing_config_message(space.model_path))
        return None, gpu_gb
    return ModelMemory.from_hf_config(read_config(config_dir)), gpu_gb


def _describe_simulator(target: LaunchTarget, model_path: str | None) -> dict[str, Any]:
    argv = [sys.executable, "-m", target.module, *target.extra_args, "--sim-describe"]
    argv += ["--model-path", model_path] if model_path else []
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise UserError(f"the simulator cannot describe its GPU and model: {out.stderr.strip()}")
    return json.loads(out.stdout)


def _nvml_gpu_memory_gb(gpus: str | None) -> float | None:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        index = int((gpus or "0").split(",")[0])
        total = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).total
        pynvml.nvmlShutdown()
        return float(total) / 1e9
    except Exception:
        return None


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
                {"metric": space.objectives.throughput, "direction": "maximize"},
                {"metric": space.objectives.latency, "direction": "minimize"},
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


def queue_baseline_and_retries(study: optuna.Study) -> None:
    trials = study.get_trials(deepcopy=False)
    if not any(t.user_attrs.get(record.IS_DEFAULT) for t in trials):
        # sglang's defaults, no tuned flag: every result is compared with it.
        study.enqueue_trial({}, user_attrs={record.IS_DEFAULT: True})
    retried = {t.user_attrs.get(RETRY_OF) for t in trials}
    for t in trials:
        if t.state == TrialState.FAIL and t.user_attrs.get(INTERRUPTED) and t.number not in retried:
            attrs: dict[str, Any] = {RETRY_OF: t.number}
            if t.user_attrs.get(record.IS_DEFAULT):
                attrs[record.IS_DEFAULT] = True
            study.enqueue_trial(t.params, user_attrs=attrs, skip_if_exists=False)


def finished_count(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


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
        directions=["maximize", "minimize"],
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
    objective = Objective(
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
    queue_baseline_and_retries(study)
    if on_event:
        on_event("start", {"study": name, "done": finished_count(study), "total": options.trials})
    interrupted = False
    try:
        run_trials(study, objective, options.trials, options.timeout_s)
    except KeyboardInterrupt:
        interrupted = True
    return summarize(study, study_dir, options, interrupted)


def run_trials(
    study: optuna.Study,
    objective: Callable[[optuna.Trial], tuple[float, float]],
    total: int,
    timeout_s: float | None = None,
    poll_s: float = 1.0,
) -> None:
    """Run trials until the study holds `total` finished ones, whoever runs them.

    An ask/tell loop rather than `study.optimize`, because the budget is global: with several
    workers on one study, a worker must not start a trial that would exceed it, and must keep
    waiting while others' trials run, in case one dies and its trial is queued again.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        fail_stale_trials(study)  # RDB storages with heartbeats: requeues dead workers' trials
        states = Counter(t.state for t in study.get_trials(deepcopy=False))
        finished = sum(states[s] for s in FINISHED)
        if finished >= total or (deadline is not None and time.monotonic() > deadline):
            return
        if finished + states[TrialState.RUNNING] >= total and not states[TrialState.WAITING]:
            time.sleep(poll_s)
            continue
        trial = study.ask()
        if _over_budget(study, trial.number, total):
            # Another worker asked at the same moment; the later trial number steps back.
            trial.set_user_attr(SURPLUS, True)
            study.tell(trial, state=TrialState.FAIL)
            continue
        _run_one(study, trial, objective)


def _over_budget(study: optuna.Study, number: int, total: int) -> bool:
    ahead = [
        t
        for t in study.get_trials(deepcopy=False, states=(*FINISHED, TrialState.RUNNING))
        if t.state != TrialState.RUNNING or t.number < number
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
        trial.set_user_attr(INTERRUPTED, True)
        study.tell(trial, state=TrialState.FAIL)
        raise
    except Exception as exc:
        heartbeat.join()
        trial.set_user_attr("error", f"{type(exc).__name__}: {exc}")
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
        counts[t.state.name] = counts.get(t.state.name, 0) + 1
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
