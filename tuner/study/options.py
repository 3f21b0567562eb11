"""What a study run is asked to do (`StudyOptions`) and what it reports back (`StudySummary`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import optuna

from tuner.errors import UserError
from tuner.results.goals import goal_named
from tuner.results.storage import DEFAULT_STUDIES_DIR
from tuner.space.model import ENV_NAME
from tuner.study.sampler import SAMPLERS
from tuner.study.stopping import DEFAULT_MIN_GAIN, StopRule
from tuner.trial.pruning import StagePrunerConfig

ENGINES = ("sim", "sglang")


@dataclass
class StudyOptions:
    trials: int = 40
    space_path: Path | None = None
    study_name: str | None = None
    storage: str | None = None
    engine: str | None = None  # sim or sglang; None: where the space says (engine.server)
    # --engine sglang only: the interpreter that runs sglang and extra environment variables
    # for the server (over the space's engine.python / engine.env); None / {}: the space's.
    engine_python: str | None = None
    engine_env: dict[str, str] = field(default_factory=dict)
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
    heartbeat_s: int = 10  # seconds between heartbeats of a running trial (any storage)
    wait_timeout_s: float = 3600.0  # a worker with nothing to start waits this long for others
    warm_start: bool = True  # the estimate picks the first trials (tuner/study/guide.py)
    polish: bool = True  # late neighbours of the best trial (tuner/study/guide.py)
    # Stop before --trials when the rest is unlikely to move the front by more than this
    # (relative; tuner/study/stopping.py); 0: run the whole budget.
    min_gain: float = DEFAULT_MIN_GAIN
    stop_rule: StopRule | None = None  # the rule's other settings; None: StopRule's defaults
    goal: str | None = None  # --goal: throughput | latency | balanced (tuner/results/goals.py)


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
    gave_up: str | None = None  # why the run stopped waiting for other workers' trials
    launched: int = 0  # configurations launched and measured (what --trials counts)
    budget: int = 0  # --trials
    stopped_because: str | None = None  # the stop rule ended the study before --trials
    goal: str | None = None  # the study's --goal
    # Trials the stage pruner stopped before their last stage, and the benchmark seconds
    # (modelled on the simulator) their remaining stages would have taken.
    pruned: int = 0
    pruned_saved_s: float = 0.0
    # The feasible trial with the most throughput that meets every SLO by at least
    # `SLO_NOISE` of its limit (tuner/results/goals.py): what a rerun is unlikely to break.
    steady: optuna.trial.FrozenTrial | None = None


def check_options(options: StudyOptions) -> None:
    """Reject option values before anything is created (a UserError names option, value, fix)."""
    if options.sampler not in SAMPLERS:
        raise UserError(
            f"--sampler {options.sampler!r} is not a sampler: choose one of {', '.join(SAMPLERS)}"
        )
    if options.engine is not None and options.engine not in ENGINES:
        raise UserError(
            f"--engine {options.engine!r} is not an engine: choose sim (the simulator) or sglang"
        )
    positive = {
        "--timeout": options.timeout_s,
        "--time-scale": options.time_scale,
        "--gpu-memory-gb": options.gpu_memory_gb,
        "--heartbeat": options.heartbeat_s,
        "--trials": options.trials,
        "--tp-size": options.tp_size,
    }
    for option, value in positive.items():
        if value is not None and not value > 0:
            raise UserError(f"{option} {value}: give a number above 0")
    goal_named(options.goal)  # an unknown goal, or one not built yet, is a UserError
    if not 0 <= options.min_gain < 1:
        raise UserError(
            f"--min-gain {options.min_gain:g}: give a share from 0 (off: run every trial) to "
            "below 1, e.g. 0.01 to stop when the rest is unlikely to gain 1%"
        )
    if options.engine == "sim" and (options.engine_python or options.engine_env):
        given = "--engine-python" if options.engine_python else "--engine-env"
        raise UserError(f"{given} applies to --engine sglang only: drop it, or add --engine sglang")
    if options.time_scale is not None and options.engine == "sglang":
        raise UserError(
            f"--time-scale {options.time_scale} applies to the simulator only: drop it, "
            "or use --engine sim"
        )


def parse_engine_env(items: list[str]) -> dict[str, str]:
    """`--engine-env KEY=VALUE` options as a mapping; a malformed one is a UserError."""
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not ENV_NAME.fullmatch(key):
            raise UserError(
                f"--engine-env {item!r}: give KEY=VALUE with an environment variable name, "
                "e.g. --engine-env SGLANG_USE_CPU_ENGINE=1"
            )
        env[key] = value
    return env
