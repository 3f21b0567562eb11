"""Before the first launch: the installed sglang's release, the host, the cost, a dry run.

    if preflight(console, run, dry_run=True): return   # nothing launched or stored

With `--engine sglang` the run's space is already in the installed release's flag names
(tuner/optimize/version_check.py, called before this); before a real run the host is checked as
`tuner doctor` does (tuner/doctor/): a failed check stops here with one line, warnings are
printed. A resumed study made with another engine, sglang release or GPU says so in one line (its
provenance, tuner/results/provenance.py). The cost (tuner/optimize/cost.py) is printed for every
run, and a dry run adds the first configurations the study would launch
(tuner/optimize/preview.py): no server is started and no study is created or changed.
"""

from __future__ import annotations

from collections.abc import Callable

import optuna
from rich.console import Console

from tuner.doctor import FAIL, OK, DoctorSetting, run_checks, tally
from tuner.errors import UserError
from tuner.host import installed_sglang
from tuner.optimize.cost import study_cost
from tuner.optimize.preview import first_configurations
from tuner.results.provenance import read_provenance, resume_warning
from tuner.results.storage import open_storage
from tuner.study.budget import measured_count
from tuner.study.run import Run


def preflight(console: Console, run: Run, dry_run: bool) -> bool:
    """Print the cost (and with `dry_run` the first configurations); True when it was a dry run."""
    options = run.options
    cost = study_cost(run, done=_launched(run))

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    if options.engine == "sglang" and not dry_run:
        check_host(run, say)  # as `tuner doctor` does; a failed check stops here
    warning = _resumed_elsewhere(run)
    if warning:
        say(warning)
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


def check_host(run: Run, say: Callable[[str], None]) -> None:
    """`tuner doctor`'s checks for this run: warnings and failures are printed, the rest
    counted; a failure is a UserError (one line, exit 2) before anything is launched."""
    setting = DoctorSetting(
        python=run.target.python,
        python_source="the engine's Python",
        space=run.space,
        space_path=run.space_path,
        env=dict(run.target.env),
        studies_dir=run.options.studies_dir,
        gpus=run.options.gpus,
    )
    checks = run_checks(setting)
    for check in checks:
        if check.status != OK:
            say(check.line())
    say(f"host: {len(checks)} checks, {tally(checks)} (tuner doctor lists every one)")
    failed = [c for c in checks if c.status == FAIL]
    if failed:
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        raise UserError(
            f"host check failed: {failed[0].name}: {failed[0].reason}{more}; "
            "tuner doctor --space FILE shows every check"
        )


def _resumed_elsewhere(run: Run) -> str | None:
    """One line when the study this run resumes was made with another engine, sglang release
    or GPU (its provenance, tuner/results/provenance.py); None for a new study."""
    study = _existing_study(run)
    if study is None:
        return None
    sglang = run.options.engine == "sglang"
    release = installed_sglang(run.target.python) if sglang else run.space.engine_version
    recorded = read_provenance(study.user_attrs)
    return resume_warning(recorded, run.engine, release, run.host.gpu_name)


def _launched(run: Run) -> int:
    """Launched configurations a resumed study already holds; 0 when there is no study yet."""
    study = _existing_study(run)
    return 0 if study is None else measured_count(study.get_trials(deepcopy=False))


def _existing_study(run: Run) -> optuna.Study | None:
    """The study this run resumes; None when there is none yet."""
    name, options = run.study_name, run.options
    try:
        storage = open_storage(options.storage, name, options.studies_dir)
        return optuna.load_study(study_name=name, storage=storage)
    except (UserError, KeyError):
        return None
