"""Trials left RUNNING by a process that is gone: who owns a trial, its heartbeat, and recovery.

A trial records its owner (host, pid, the process's start time and the kernel's boot id) when it
starts. Any tuner process on the study checks the RUNNING trials of others:

- owner on this host (same name and boot id): alive while a process with that pid and that
  start time exists (a zombie counts as gone), so a pid reused by another program is not taken
  for the owner (containers that share a kernel need distinct host names, Docker's default);
- owner elsewhere, on a storage without Optuna's heartbeat (journal file, SQLite): alive while
  its HEARTBEAT user attr, refreshed every `interval_s` by a thread, is younger than three
  intervals (hosts should keep their clocks in sync, NTP); RDB storages with a heartbeat leave
  other hosts to Optuna's `fail_stale_trials`.

An abandoned trial is failed (the state change succeeds in one process only, so two processes
never both queue it), its server's process group is killed when it runs here, and its
configuration is queued again, so a rerun of the same command after `kill -9` continues.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from tuner.results import record
from tuner.results.study_lock import StudyLock
from tuner.signals import deferred
from tuner.study.policy import RETRY
from tuner.study.storage import optuna_heartbeat_s, storage_of, trial_id
from tuner.trial.objective import EventHook

_log = logging.getLogger(__name__)

MAX_RETRIES = 3  # a configuration whose trials keep losing their process is queued at most so often


def process_start(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks after boot; None when /proc cannot say."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()  # after "(comm)", which may hold spaces
    try:
        return int(fields[19])  # field 22 of proc(5); fields[0] is field 3 (state)
    except (IndexError, ValueError):
        return None


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def this_owner() -> dict[str, Any]:
    """This process as a trial's OWNER attr."""
    pid = os.getpid()
    return {
        "host": os.uname().nodename,
        "pid": pid,
        "start": process_start(pid),
        "boot": _boot_id(),
    }


def owner_tag(owner: dict[str, Any]) -> str:
    return f"{owner.get('host')}:{owner.get('pid')}"


def process_alive(pid: int, start: int | None) -> bool:
    """A process with this pid runs, and, when `start` is given, it started then."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            fields = stat.read_text().rsplit(")", 1)[-1].split()
        except OSError:
            return False
        if not fields or fields[0] in ("Z", "X"):  # a zombie or a dead process holds its pid only
            return False
        return start is None or process_start(pid) == start
    try:  # no /proc (macOS): the pid alone
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def trial_owner(trial: FrozenTrial) -> dict[str, Any] | None:
    """The OWNER attr, or what a WORKER "host:pid" attr of an older tuner says."""
    owner = trial.user_attrs.get(record.OWNER)
    if isinstance(owner, dict):
        return owner
    worker = trial.user_attrs.get(record.WORKER)
    if isinstance(worker, str) and ":" in worker:
        host, _, pid = worker.rpartition(":")
        if pid.isdigit():
            return {"host": host, "pid": int(pid), "start": None, "boot": None}
    return None


def _on_this_host(owner: dict[str, Any], me: dict[str, Any]) -> bool:
    if owner.get("host") != me["host"]:
        return False
    # The same name on another machine (or after a reboot) has another boot id.
    return owner.get("boot") is None or me["boot"] is None or owner.get("boot") == me["boot"]


def abandoned_reason(
    trial: FrozenTrial, stale_after_s: float, *, other_hosts: bool, now: float | None = None
) -> str | None:
    """Why this RUNNING trial has no live owner, or None while it may still be running.

    `other_hosts`: judge trials of other hosts by their HEARTBEAT attr (storages without
    Optuna's heartbeat).
    """
    me = this_owner()
    owner = trial_owner(trial)
    if owner is not None and _on_this_host(owner, me):
        pid, start = int(owner["pid"]), owner.get("start")
        if pid == me["pid"] and (start is None or start == me["start"]):
            return None  # this process's own trial
        if process_alive(pid, start):
            return None
        return f"its process {owner_tag(owner)} is gone"
    if not other_hosts:
        return None
    now = time.time() if now is None else now
    beat = trial.user_attrs.get(record.HEARTBEAT)
    if not isinstance(beat, int | float):
        if trial.datetime_start is None:
            return None
        beat = trial.datetime_start.timestamp()  # asked, owner not written yet
    age = now - float(beat)
    if age <= stale_after_s:
        return None
    who = owner_tag(owner) if owner else "an unknown process"
    return f"no heartbeat from {who} for {age:.0f} s (limit {stale_after_s:.0f} s)"


@dataclass(frozen=True)
class Recovered:
    """A trial failed because its owner is gone; `retry` is the queued trial's number."""

    number: int
    worker: str
    reason: str
    retry: int | None


def recover_trials(
    study: optuna.Study,
    abandoned: list[tuple[FrozenTrial, str]],
    storage: BaseStorage | None = None,
) -> list[Recovered]:
    """Fail each (trial, reason), kill its server when it runs here, queue its configuration.
    `storage`: the study's, as `open_study` gave it (else the study's own is read)."""
    storage = storage or storage_of(study)
    me = this_owner()
    recovered = []
    for trial, reason in abandoned:
        owner = trial_owner(trial)
        if owner is not None and _on_this_host(owner, me):
            _kill_server_group(trial, owner)
        with deferred():  # a stop signal must not fall between the FAIL and its retry
            tid = trial_id(storage, study, trial.number)
            with contextlib.suppress(Exception):
                storage.set_trial_user_attr(tid, record.ABANDONED, reason)
            try:
                won = storage.set_trial_state_values(tid, state=TrialState.FAIL)
            except Exception:  # another process failed it first (finished trial, locked database)
                won = False
            if not won:
                continue
            retry = queue_retry(study, trial, storage)
        recovered.append(Recovered(trial.number, owner_tag(owner) if owner else "?", reason, retry))
    return recovered


def queue_retry(
    study: optuna.Study, trial: FrozenTrial, storage: BaseStorage | None = None
) -> int | None:
    """Queue the trial's configuration again (Optuna's retry attrs, so `failed_trial` names the
    first of the series); None when it was retried MAX_RETRIES times already."""
    history = [*trial.system_attrs.get("retry_history", []), trial.number]
    if len(history) > MAX_RETRIES:
        return None
    user_attrs: dict[str, Any] = {record.RETRY_OF: trial.number}
    if trial.user_attrs.get(record.IS_DEFAULT):
        user_attrs[record.IS_DEFAULT] = True
    if trial.user_attrs.get(record.GUIDED_BY) == record.REMEASURE_CHECK:
        user_attrs[record.GUIDED_BY] = record.REMEASURE_CHECK  # launched again, not reused
    else:
        user_attrs[record.GUIDED_BY] = RETRY
    template = optuna.trial.create_trial(
        state=TrialState.WAITING,
        params=trial.params,
        distributions=trial.distributions,
        user_attrs=user_attrs,
        system_attrs={
            "failed_trial": trial.system_attrs.get("failed_trial", trial.number),
            "retry_history": history,
        },
    )
    storage = storage or storage_of(study)
    study_id = storage.get_study_id_from_name(study.study_name)
    new_id = storage.create_new_trial(study_id, template_trial=template)
    return storage.get_trial_number_from_id(new_id)


def _kill_server_group(trial: FrozenTrial, owner: dict[str, Any]) -> None:
    pgid = trial.user_attrs.get(record.SERVER_PGID)
    if not pgid:
        return
    leader_start = process_start(int(pgid))
    owner_start = owner.get("start")
    # A live leader older than the owner is not the server it started: the number was reused.
    if leader_start is not None and owner_start is not None and leader_start < owner_start:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(int(pgid), signal.SIGKILL)


class OwnerHeartbeat:
    """Writes OWNER and HEARTBEAT on a trial, then refreshes HEARTBEAT every `interval_s`
    from a thread until `stop()`. With `optuna_beat_s` (a storage with Optuna's own heartbeat,
    RDB with --heartbeat) the thread records that heartbeat every `optuna_beat_s` instead, the
    one `fail_stale_trials` judges, as Optuna's `study.optimize` does."""

    def __init__(
        self,
        storage: Any,
        trial_id: int,
        interval_s: float,
        *,
        optuna_beat_s: int | None = None,
    ) -> None:
        self.storage = storage
        self.trial_id = trial_id
        self.interval_s = float(optuna_beat_s or interval_s)
        self._optuna = optuna_beat_s is not None
        self._stop = threading.Event()
        owner = this_owner()
        storage.set_trial_user_attr(trial_id, record.OWNER, owner)
        storage.set_trial_user_attr(trial_id, record.WORKER, owner_tag(owner))
        self._beat()
        self._thread = threading.Thread(target=self._run, name="tuner-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        if self._optuna:
            self.storage.record_heartbeat(self.trial_id)
        else:
            self.storage.set_trial_user_attr(self.trial_id, record.HEARTBEAT, time.time())

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(Exception):  # a busy database: the next beat will do
                self._beat()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def recover_abandoned(
    study: optuna.Study,
    heartbeat_s: float,
    lock: StudyLock | None = None,
    on_event: EventHook | None = None,
    storage: BaseStorage | None = None,
) -> None:
    """Fail the RUNNING trials whose process is gone and queue their configurations again.
    `storage`: the study's, as `open_study` gave it (else the study's own is read)."""
    storage = storage or storage_of(study)
    other_hosts = optuna_heartbeat_s(storage) is None  # RDB heartbeats cover other hosts
    found = [
        (t, reason)
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if (reason := abandoned_reason(t, 3 * heartbeat_s, other_hosts=other_hosts))
    ]
    if not found:
        return
    with lock or StudyLock(None):
        recovered = recover_trials(study, found, storage)
    for r in recovered:
        if not on_event:
            _log.warning("trial %d abandoned (%s); queued again: %s", r.number, r.reason, r.retry)
        else:
            on_event(
                "recovered",
                {"number": r.number, "worker": r.worker, "reason": r.reason, "retry": r.retry},
            )
