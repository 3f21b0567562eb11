"""`tuner optimize` end to end: the live display, the study on one or more workers, the summary."""

from __future__ import annotations

import sys

from rich.console import Console

from tuner.optimize.cost import study_cost
from tuner.optimize.preflight import preflight
from tuner.optimize.progress import OptimizeDisplay
from tuner.optimize.summary import print_summary
from tuner.optimize.version_check import for_installed_release
from tuner.results.report import write_report
from tuner.results.storage import open_storage
from tuner.results.study_lock import ensure_writable_dir
from tuner.signals import stop_like_ctrl_c
from tuner.study.loop import quiet_optuna, run_study
from tuner.study.options import StudyOptions, check_options
from tuner.study.run import resolve_run
from tuner.study.workers import gpu_groups, run_parallel


def run_optimize(options: StudyOptions, workers: int, report: bool, dry_run: bool = False) -> int:
    """Run (or resume) the study with a live display, print the summary, write the report.
    First the cost; `dry_run` stops after it and the first configurations
    (tuner/optimize/preflight.py).

    Returns the exit code: 0, 130 when Ctrl-C, SIGTERM or SIGHUP interrupted the study, 1 when
    it stopped waiting for other workers' trials.
    """
    studies_dir = options.studies_dir
    check_options(options)  # before anything is created: no empty study behind a typo
    quiet_optuna()
    # A log file gets whole lines, not 80-column pieces.
    console = Console(soft_wrap=not sys.stdout.isatty())
    run = resolve_run(options)  # bad YAML: one line, exit 2; the host asked once
    # GPUs per server: --tp-size or the space's fixed tp_size (resolve_run settles which)
    groups = gpu_groups(options.gpus, run.options.tp_size, workers)
    loaded_space = run.space
    # --engine sglang: the space in the installed release's flag names, the translation shown
    run = for_installed_release(run, dry_run, say=lambda line: _say(console, line))
    if preflight(console, run, dry_run):
        return 0  # a dry run: nothing launched, no study created
    ensure_writable_dir(
        studies_dir, "--studies-dir", "give a writable directory with --studies-dir"
    )
    stop_like_ctrl_c()  # Slurm, Kubernetes and systemd stop jobs with SIGTERM
    display = OptimizeDisplay(
        console,
        options.trials,
        loaded_space.objectives.throughput,
        loaded_space.objectives.latency,
        tuple(loaded_space.slos),
    )
    try:
        with display:
            if len(groups) > 1:
                summary = run_parallel(run, groups, on_event=display)
            else:
                summary = run_study(run.for_worker(groups[0], options.seed), on_event=display)
    except KeyboardInterrupt:  # before the first trial (opening the study) or after the last
        console.print("interrupted: run the same command again to resume")
        return 130
    saved = study_cost(run, done=summary.launched) if summary.stopped_because else None
    print_summary(console, summary, loaded_space, studies_dir, saved)
    if report and summary.counts.get("COMPLETE", 0):
        path = write_report(
            open_storage(summary.storage, summary.study_name, studies_dir),
            summary.study_name,
            studies_dir=studies_dir,
        )
        console.print(f"report: {path}")
    if summary.interrupted:
        console.print("interrupted: run the same command again to resume")
        return 130
    if summary.gave_up:
        console.print(summary.gave_up)
        return 1
    return 0


def _say(console: Console, line: str) -> None:
    console.print(line, markup=False, highlight=False, soft_wrap=True)
