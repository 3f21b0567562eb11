"""`tuner optimize` end to end: the live display, the study on one or more workers, the summary."""

from __future__ import annotations

import sys

import optuna
from rich.console import Console

from tuner.errors import UserError
from tuner.host import installed_sglang, nvml_gpu
from tuner.optimize.cost import study_cost
from tuner.optimize.preflight import preflight
from tuner.optimize.progress import OptimizeDisplay
from tuner.optimize.summary import print_summary
from tuner.optimize.version_check import for_installed_release
from tuner.results import record
from tuner.results.engine_label import engine_label
from tuner.results.report import write_report
from tuner.results.storage import open_storage
from tuner.results.study_lock import ensure_writable_dir
from tuner.signals import stop_like_ctrl_c
from tuner.study.loop import quiet_optuna, run_study
from tuner.study.options import StudyOptions, check_options
from tuner.study.run import Run, engine_python, resolve_run
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
    # Where the figures come from, first: a study on the simulator must never pass for a GPU's.
    console.print(f"engine: {run.engine_label}", markup=False, highlight=False, soft_wrap=True)
    for note in simulator_notes(run, engine_given=options.engine is not None):
        console.print(note, markup=False, highlight=False, soft_wrap=True)
    check_same_engine(run)
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
        engine=run.engine_label,
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
    print_summary(console, summary, loaded_space, studies_dir, saved, engine=run.engine_label)
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


def check_same_engine(run: Run) -> None:
    """A study goes on where it began: modelled and measured trials in one study would train
    the sampler and fill the front with figures of two different machines. A UserError names
    both engines and the ways out."""
    try:
        storage = open_storage(run.options.storage, run.study_name, run.options.studies_dir)
        study = optuna.load_study(study_name=run.study_name, storage=storage)
    except (UserError, KeyError):
        return  # no such study yet
    began = study.user_attrs.get(record.STUDY_ENGINE)
    if began is None or began == run.options.engine:
        return
    other = "sim" if began == "sim" else "sglang"
    raise UserError(
        f"study {run.study_name!r} ran on "
        f"{engine_label(began, study.user_attrs.get(record.STUDY_SGLANG_VERSION))}, this run "
        f"on {engine_label(run.options.engine, run.space.engine_version)}: give --study NEW for "
        f"a new study, or --engine {other} to go on with this one"
    )


def simulator_notes(run: Run, engine_given: bool) -> list[str]:
    """What a study on the simulator must not leave unsaid: the GPU it models when the space
    names none, and a real GPU beside it that could have measured instead."""
    if run.options.engine != "sim":
        return []
    notes = []
    if not run.space.sim:
        notes.append(
            f"note: the space has no sim: block, so the simulator models its default GPU "
            f"({run.host.gpu_name}), not yours: `tuner init --engine sim --gpu NAME` writes a "
            "space whose simulator models your GPU"
        )
    if (unused := unused_gpu_note(run, engine_given)) is not None:
        notes.append(unused)
    return notes


def unused_gpu_note(run: Run, engine_given: bool) -> str | None:
    """One line when a study runs on the simulator on a host that has a GPU (NVML) and sglang:
    its figures are modelled, and the GPU beside it could have measured them."""
    if run.options.engine != "sim":
        return None
    gpu = nvml_gpu()
    if gpu is None:
        return None
    try:  # the space's sglang interpreter, else the tuner's own
        python = engine_python(run.space.engine.python)
    except UserError:
        python = None
    release = installed_sglang(python)
    if release is None:
        return None
    why = "--engine sim" if engine_given else f"{run.space_path} says engine.server: simulated"
    return (
        f"note: this host has a GPU ({gpu[0]}) and sglang {release}, but the study runs on the "
        f"simulator ({why}): its figures are modelled; --engine sglang measures the GPU"
    )


def _say(console: Console, line: str) -> None:
    console.print(line, markup=False, highlight=False, soft_wrap=True)
