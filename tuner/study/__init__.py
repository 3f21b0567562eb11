"""The study: a run resolved once, the ask/tell loop to the budget, and what keeps it honest.

    run = resolve_run(StudyOptions(trials=40))
    summary = run_study(run)

Modules: `options` (what a run is asked to do, what it reports back), `run` (the run resolved
once: space, launch target, host facts), `loop` (open or resume the study, run trials to the
budget, summarize), `sampler` (the Optuna sampler), `budget` (what `--trials` counts),
`baseline` (sglang's defaults as the first trial), `guide` (the estimate's warm start and the
late polish), `workers` (several trials at once), `recovery` (trials left by a killed process),
`storage` (the study's storage wrapped so that a stop signal, tuner/signals.py, never lands
inside a write, and trial ids by number).
"""

from tuner.study.baseline import default_trial_params
from tuner.study.budget import SpaceMostlyInfeasible, is_free
from tuner.study.guide import Guide, GuideSettings, make_guide
from tuner.study.loop import (
    ensure_study_attrs,
    open_study,
    queue_baseline_and_retries,
    quiet_optuna,
    run_study,
    run_trials,
)
from tuner.study.options import ENGINES, StudyOptions, StudySummary, check_options
from tuner.study.run import Run, launch_target, resolve_run
from tuner.study.sampler import SAMPLERS, grid_search_space, make_sampler
from tuner.study.stopping import Stopping, StopRule
from tuner.study.workers import gpu_groups, run_parallel

__all__ = [
    "ENGINES",
    "SAMPLERS",
    "Guide",
    "GuideSettings",
    "Run",
    "SpaceMostlyInfeasible",
    "StopRule",
    "Stopping",
    "StudyOptions",
    "StudySummary",
    "check_options",
    "default_trial_params",
    "ensure_study_attrs",
    "gpu_groups",
    "grid_search_space",
    "is_free",
    "launch_target",
    "make_guide",
    "make_sampler",
    "open_study",
    "queue_baseline_and_retries",
    "quiet_optuna",
    "resolve_run",
    "run_parallel",
    "run_study",
    "run_trials",
]
