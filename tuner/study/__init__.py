"""The study: a run resolved once, the ask/tell loop to the budget, and what keeps it honest.

    run = resolve_run(StudyOptions(trials=40))
    summary = run_study(run)

Modules: `options` (what a run is asked to do, what it reports back), `run` (the run resolved
once: space, launch target, host facts), `loop` (open or resume the study, run trials to the
budget, summarize), `sampler` (the Optuna sampler), `budget` (what `--trials` counts),
`baseline` (sglang's defaults as the first trial), `guide` (the estimate's warm start and the
late polish), `workers` (several trials at once), `recovery` (trials left by a killed process),
`signals` (SIGTERM and SIGHUP act as Ctrl-C).
"""

from tuner.study.loop import open_study, quiet_optuna, run_study, run_trials
from tuner.study.options import ENGINES, StudyOptions, StudySummary, check_options
from tuner.study.run import Run, launch_target, resolve_run
from tuner.study.sampler import SAMPLERS, make_sampler
from tuner.study.workers import gpu_groups, run_parallel

__all__ = [
    "ENGINES",
    "SAMPLERS",
    "Run",
    "StudyOptions",
    "StudySummary",
    "check_options",
    "gpu_groups",
    "launch_target",
    "make_sampler",
    "open_study",
    "quiet_optuna",
    "resolve_run",
    "run_parallel",
    "run_study",
    "run_trials",
]
