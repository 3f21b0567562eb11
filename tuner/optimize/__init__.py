"""`tuner optimize`, the command: pre-flight, the live display, the study, the summary.

    code = run_optimize(StudyOptions(trials=40), workers=1, report=True)

Modules: `command` (the command end to end), `preflight` (before the first launch: the installed
sglang, the cost, `--dry-run`), `cost` (launches, GPU hours, wall time), `preview` (the first
configurations a study would launch), `version_check` (the installed sglang against the space's
release), `progress` (the live display), `summary` (the end-of-study printout).
"""

from tuner.optimize.command import run_optimize

__all__ = ["run_optimize"]
