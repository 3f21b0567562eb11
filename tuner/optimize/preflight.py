"""Before the first launch: the installed sglang's release, what the study will cost, a dry run.

    if preflight(console, run, dry_run=True): return   # nothing launched or stored

With `--engine sglang` the run's space is already in the installed release's flag names
(tuner/optimize/version_check.py, called before this). The cost (tuner/optimize/cost.py) is
printed for every run, and a dry run adds the first configurations the study would launch
(tuner/optimize/preview.py): no server is started and no study is created or changed.
"""

from __future__ import annotations

import optuna
from rich.console import Console

from tuner.errors import UserError
from tuner.optimize.cost import study_cost
from tuner.optimize.preview import first_configurations
from tuner.results.storage import open_storage
from tuner.study.budget import measured_count
from tuner.study.run import Run


def preflight(console: Console, run: Run, dry_run: bool) -> bool:
    """Print the cost (and with `dry_run` the first configurations); True when it was a dry run."""
    options = run.options
    cost = study_cost(run, done=_launched(run))

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    for line in cost.lines():
        say(line)
    if not dry_run:
        return False
    rows = first_configurations(run, count=min(6, options.trials))
    common = rows[0].argv  # the defaults: model path and fixed flags, in every launch
    release = f"sglang {run.space.engine_version}"
    say(f"first configurations for {release} (every launch passes {' '.join(common)}, then):")
    for row in rows:
        number = "  skip   " if row.number is None else f"  trial {row.number}"
        tuned = row.argv[len(common) :] if row.argv[: len(common)] == common else row.argv
        say(f"{number} {row.chosen_by}: {' '.join(tuned) or '(nothing: sglang defaults)'}")
        if row.skip:
            say(f"          not launched, not counted: {row.skip}")
    say("dry run: nothing launched, no study created")
    return True


def _launched(run: Run) -> int:
    """Launched configurations a resumed study already holds; 0 when there is no study yet."""
    name, options = run.study_name, run.options
    try:
        storage = open_storage(options.storage, name, options.studies_dir)
        study = optuna.load_study(study_name=name, storage=storage)
    except (UserError, KeyError):
        return 0
    return measured_count(study.get_trials(deepcopy=False))
