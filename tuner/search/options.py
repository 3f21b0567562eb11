"""What a study run is asked to do (`StudyOptions`) and what it reports back (`StudySummary`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import optuna

from tuner.results.storage import DEFAULT_STUDIES_DIR
from tuner.search.pruning import StagePrunerConfig


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
    warm_start: bool = True  # the estimate picks the first trials (tuner/search/guide.py)
    polish: bool = True  # late neighbours of the best trial (tuner/search/guide.py)


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
