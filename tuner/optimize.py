"""`tuner optimize` end to end: the live display, the study on one or more workers, the summary."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console

from tuner.preflight import preflight
from tuner.progress import OptimizeDisplay
from tuner.results.report import write_report
from tuner.results.storage import open_storage
from tuner.results.study_lock import ensure_writable_dir
from tuner.search.capacity import load_space_for_run
from tuner.search.options import StudyOptions, check_options
from tuner.search.signals import stop_like_ctrl_c
from tuner.search.space_load import default_space_path, load_space
from tuner.search.study import quiet_optuna, run_study
from tuner.search.workers import gpu_groups, run_parallel
from tuner.summary import print_summary


def run_optimize(
    options: StudyOptions, space: Path | None, workers: int, report: bool, dry_run: bool = False
) -> int:
    """Run (or resume) the study with a live display, print the summary, write the report.
    First the cost; `dry_run` stops after it and the first configurations (tuner/preflight.py).

    Returns the exit code: 0, 130 when Ctrl-C, SIGTERM or SIGHUP interrupted the study, 1 when
    it stopped waiting for other workers' trials.
    """
    gpus, tp_size, studies_dir = options.gpus, options.tp_size, options.studies_dir
    check_options(options)  # before anything is created: no empty study behind a typo
    groups = gpu_groups(gpus, tp_size, workers)
    quiet_optuna()
    # A log file gets whole lines, not 80-column pieces.
    console = Console(soft_wrap=not sys.stdout.isatty())
    loaded_space = load_space(space or default_space_path())  # bad YAML: one line, exit 2
    if loaded_space.needs_capacity:  # a bound relative to what this GPU can run
        loaded_space = load_space_for_run(space or default_space_path(), options)
    if preflight(console, loaded_space, options, dry_run):
        return 0  # a dry run: nothing launched, no study created
    ensure_writable_dir(
        studies_dir, "--studies-dir", "give a writable directory with --studies-dir"
    )
    stop_like_ctrl_c()  # Slurm, Kubernetes and systemd stop jobs with SIGTERM
    display = OptimizeDisplay(
        console, options.trials, loaded_space.objectives.throughput, loaded_space.objectives.latency
    )
    try:
        with display:
            if len(groups) > 1:
                summary = run_parallel(options, groups, on_event=display)
            else:
                options.gpus = groups[0]
                summary = run_study(options, on_event=display)
    except KeyboardInterrupt:  # before the first trial (opening the study) or after the last
        console.print("interrupted: run the same command again to resume")
        return 130
    print_summary(console, summary, loaded_space, studies_dir)
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
