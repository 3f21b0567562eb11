"""Several trials at once on one machine: one worker process per GPU group (or per `--workers`).

Each worker is an ordinary study worker (`run_trials`) on a shared storage: the journal file by
default, because SQLite with several processes on one study ran duplicate trials in our measurements
(docs/design.md#storage). This supervisor starts them, relays their progress events, and watches
them: when a worker dies mid-trial, its trial is failed and queued again, its server's process group
is killed (tuner/study/recovery.py), and a new worker takes its place. SIGTERM or SIGHUP to the
supervisor is passed on to the workers, which stop as on Ctrl-C. Across machines no supervisor is
needed: run `tuner optimize --storage postgresql://...` on each node, and RDB heartbeats do the same
recovery.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import signal
import time
from dataclasses import replace
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from tuner.errors import UserError
from tuner.launcher import die_with_parent
from tuner.results.record import WORKER
from tuner.results.study_lock import StudyLock
from tuner.signals import stop_like_ctrl_c
from tuner.study.loop import (
    finished_count,
    open_study,
    quiet_optuna,
    run_study,
    study_lock,
    summarize,
)
from tuner.study.options import StudySummary
from tuner.study.recovery import recover_trials
from tuner.study.run import Run
from tuner.trial.objective import EventHook

_STOP_S = 30  # what an interrupted worker gets to stop its server and record its trial


def gpu_groups(gpus: str | None, tp_size: int, workers: int) -> list[str | None]:
    """`--gpus 0,1,2,3 --tp-size 2` -> ["0,1", "2,3"]; no GPUs -> `workers` x None."""
    if not gpus:
        return [None] * max(1, workers)
    ids = [g.strip() for g in gpus.split(",") if g.strip()]
    if tp_size < 1 or len(ids) % tp_size:
        raise UserError(f"--gpus {gpus} cannot be split into groups of --tp-size {tp_size}")
    return [",".join(ids[i : i + tp_size]) for i in range(0, len(ids), tp_size)]


def _worker_main(run: Run, index: int, events: Any) -> None:
    def relay(kind: str, data: dict[str, Any]) -> None:
        with contextlib.suppress(Exception):
            events.put((index, kind, data))

    # The supervisor forwards SIGTERM / SIGHUP; the terminal's Ctrl-C reaches workers directly.
    stop_like_ctrl_c()
    die_with_parent()  # a killed supervisor stops its workers as Ctrl-C would
    quiet_optuna()
    with contextlib.suppress(KeyboardInterrupt):
        run_study(run, on_event=relay)


def recover_dead_worker(
    study: optuna.Study,
    storage: BaseStorage,
    worker_tag: str,
    exitcode: int | None,
    lock: StudyLock,
) -> list[int]:
    """Fail the dead worker's running trials, kill their servers, and queue them again."""
    reason = f"its worker process {worker_tag} exited with code {exitcode}"
    with lock:  # the other workers may be recovering the same trial (SQLite)
        mine = [
            (t, reason)
            for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
            if t.user_attrs.get(WORKER) == worker_tag
        ]
        return [r.number for r in recover_trials(study, mine, storage)]


def run_parallel(
    run: Run, groups: list[str | None], on_event: EventHook | None = None
) -> StudySummary:
    """Run `len(groups)` workers on one study until it holds `run.options.trials` finished
    trials. Each worker gets the resolved run itself: no worker reads the space or the host."""
    options = run.options
    name = run.study_name
    if options.storage is None:
        options = replace(options, storage=str(options.studies_dir / f"{name}.journal"))
    options = replace(options, study_name=name)
    run = replace(run, options=options)
    # Creates the study and queues the baseline before the workers start.
    study, storage = open_study(run, on_event)
    lock = study_lock(options, name, on_event)
    ctx = mp.get_context("spawn")
    events = ctx.Queue()
    procs: dict[int, Any] = {}
    spawned = 0

    def spawn(index: int) -> None:
        nonlocal spawned
        proc = ctx.Process(
            target=_worker_main,
            # The same seed in two workers (or in a worker and its replacement) would sample
            # the same start-up configurations.
            args=(
                run.for_worker(
                    groups[index], None if options.seed is None else options.seed + spawned
                ),
                index,
                events,
            ),
            name=f"tuner-worker-{index}",
        )
        proc.start()
        procs[index] = proc
        spawned += 1

    if on_event:
        on_event("start", {"study": name, "done": finished_count(study), "total": options.trials})
    for index in range(len(groups)):
        spawn(index)
    interrupted = False
    try:
        while procs:
            _drain(events, on_event)
            for index, proc in list(procs.items()):
                if proc.is_alive():
                    continue
                proc.join()
                del procs[index]
                if proc.exitcode != 0:
                    tag = f"{os.uname().nodename}:{proc.pid}"
                    retried = recover_dead_worker(study, storage, tag, proc.exitcode, lock)
                    if on_event:
                        on_event(
                            "worker_died",
                            {"worker": index, "exitcode": proc.exitcode, "retried": retried},
                        )
                    if finished_count(study) < options.trials:
                        spawn(index)
            time.sleep(0.2)
    except KeyboardInterrupt:
        interrupted = True
        _stop_workers(study, storage, procs, lock, on_event)
    _drain(events, on_event)
    study = optuna.load_study(study_name=name, storage=storage)
    return summarize(study, options.studies_dir / name, options, interrupted)


def _stop_workers(
    study: optuna.Study,
    storage: BaseStorage,
    procs: dict[int, Any],
    lock: StudyLock,
    on_event: EventHook | None,
) -> None:
    """Interrupt every worker as Ctrl-C would (SIGTERM / SIGHUP reach the supervisor only; after
    the terminal's SIGINT the workers ignore it), give them time to stop their servers, then
    kill what is left and recover its trials."""
    for proc in procs.values():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(proc.pid, signal.SIGTERM)
    if on_event and procs:
        on_event("waiting", {"message": f"stopping {len(procs)} workers (at most {_STOP_S} s)"})
    deadline = time.monotonic() + _STOP_S
    for proc in procs.values():
        proc.join(max(0.1, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(5)
            recover_dead_worker(
                study, storage, f"{os.uname().nodename}:{proc.pid}", proc.exitcode, lock
            )


def _drain(events: Any, on_event: EventHook | None) -> None:
    while True:
        try:
            index, kind, data = events.get_nowait()
        except queue.Empty:
            return
        if on_event:
            on_event(kind, {**data, "worker": index})
