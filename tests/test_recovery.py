"""Who owns a running trial, and what happens to a trial whose owner is gone: in-process studies
with real processes as owners and servers (no simulator, no wall-clock asserts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from optuna.trial import TrialState

from tuner import signals
from tuner.results import record
from tuner.signals import stop_like_ctrl_c
from tuner.study.loop import run_trials
from tuner.study.recovery import (
    OwnerHeartbeat,
    process_alive,
    process_start,
    recover_abandoned,
    this_owner,
)
from tuner.study.storage import trial_id

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/stat"), reason="process start times come from /proc"
)


def _study() -> optuna.Study:
    study = optuna.create_study(directions=["maximize", "minimize"])
    study.enqueue_trial({"x": 3}, user_attrs={record.IS_DEFAULT: False})
    return study


def _running(study: optuna.Study, **attrs: object) -> optuna.Trial:
    trial = study.ask()
    trial.suggest_int("x", 0, 10)
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    return trial


def _sleeper() -> subprocess.Popen[bytes]:
    """A process in its own session, standing in for a server (or a live owner)."""
    return subprocess.Popen(["sleep", "60"], start_new_session=True)


def _dead_pid() -> tuple[int, int | None]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    start = process_start(proc.pid)
    proc.wait()
    return proc.pid, start


def _owner(pid: int, start: int | None, **kw: object) -> dict[str, object]:
    return {**this_owner(), "pid": pid, "start": start, **kw}


def test_a_dead_owner_on_this_host_is_failed_its_server_killed_and_retried_once():
    study = _study()
    pid, start = _dead_pid()
    server = _sleeper()  # started after its owner, as a server is
    try:
        trial = _running(
            study, **{record.OWNER: _owner(pid, start), record.SERVER_PGID: server.pid}
        )
        events: list[tuple[str, dict]] = []
        recover_abandoned(study, 10, on_event=lambda kind, data: events.append((kind, data)))
        assert server.wait(timeout=10) == -signal.SIGKILL
    finally:
        if server.poll() is None:
            server.kill()
    trials = study.get_trials()
    assert trials[trial.number].state == TrialState.FAIL
    assert "is gone" in trials[trial.number].user_attrs[record.ABANDONED]
    (retry,) = [t for t in trials if t.state == TrialState.WAITING]
    assert retry.params == {"x": 3} and retry.user_attrs[record.RETRY_OF] == trial.number
    assert retry.system_attrs["failed_trial"] == trial.number
    assert [kind for kind, _ in events] == ["recovered"]
    assert events[0][1]["retry"] == retry.number
    recover_abandoned(study, 10)  # nothing RUNNING any more: queued once
    assert len(study.get_trials(states=(TrialState.WAITING,))) == 1


def test_the_stop_rules_remeasurement_is_retried_as_one():
    """A re-measurement reuses no earlier result (tuner/trial/objective.py); its retry after a
    dead worker must not either, or the study would take the first measurement back."""
    study = _study()
    pid, start = _dead_pid()
    trial = _running(
        study,
        **{record.OWNER: _owner(pid, start), record.GUIDED_BY: record.REMEASURE_CHECK},
    )
    recover_abandoned(study, 10)
    (retry,) = study.get_trials(states=(TrialState.WAITING,))
    assert retry.user_attrs[record.RETRY_OF] == trial.number
    assert retry.user_attrs[record.GUIDED_BY] == record.REMEASURE_CHECK


def test_a_live_owner_is_left_alone_and_a_reused_pid_is_not_taken_for_it():
    study = _study()
    owner = _sleeper()
    try:
        start = process_start(owner.pid)
        assert start is not None and process_alive(owner.pid, start)
        alive = _running(study, **{record.OWNER: _owner(owner.pid, start)})
        # The same pid with another start time: a process that reused the pid of a dead owner.
        reused = _running(study, **{record.OWNER: _owner(owner.pid, start - 1)})
        recover_abandoned(study, 10)
    finally:
        owner.kill()
        owner.wait()
    trials = study.get_trials()
    assert trials[alive.number].state == TrialState.RUNNING
    assert trials[reused.number].state == TrialState.FAIL


def test_owners_on_other_hosts_are_judged_by_their_heartbeat():
    study = _study()
    elsewhere = {"host": "another-host", "pid": 1, "start": 1, "boot": "x"}
    fresh = _running(study, **{record.OWNER: elsewhere, record.HEARTBEAT: time.time()})
    stale = _running(study, **{record.OWNER: elsewhere, record.HEARTBEAT: time.time() - 100})
    # The same host name with another boot id: another machine, or this one rebooted.
    rebooted = _running(
        study,
        **{record.OWNER: {**this_owner(), "boot": "other"}, record.HEARTBEAT: time.time() - 100},
    )
    recover_abandoned(study, 10)  # stale after 30 s
    trials = study.get_trials()
    assert trials[fresh.number].state == TrialState.RUNNING
    assert trials[stale.number].state == TrialState.FAIL
    assert "no heartbeat from another-host:1" in trials[stale.number].user_attrs[record.ABANDONED]
    assert trials[rebooted.number].state == TrialState.FAIL


def test_the_heartbeat_records_the_owner_and_keeps_beating():
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(storage=storage, directions=["maximize", "minimize"])
    trial = study.ask()
    beat = OwnerHeartbeat(storage, trial_id(storage, study, trial.number), 0.05)
    first = study.get_trials()[trial.number].user_attrs[record.HEARTBEAT]
    deadline = time.monotonic() + 30
    while study.get_trials()[trial.number].user_attrs[record.HEARTBEAT] == first:
        assert time.monotonic() < deadline, "the heartbeat did not move"
        time.sleep(0.05)
    beat.stop()
    attrs = study.get_trials()[trial.number].user_attrs
    assert attrs[record.OWNER] == this_owner()
    assert attrs[record.WORKER] == f"{os.uname().nodename}:{os.getpid()}"


def test_a_worker_with_nothing_to_start_says_what_it_waits_for_and_gives_up():
    study = optuna.create_study(directions=["maximize", "minimize"])
    owner = _sleeper()
    try:
        _running(study, **{record.OWNER: _owner(owner.pid, process_start(owner.pid))})
        events: list[tuple[str, dict]] = []
        message = run_trials(
            study,
            lambda trial: (1.0, 1.0),
            total=1,
            poll_s=0.05,
            on_event=lambda kind, data: events.append((kind, data)),
            wait_timeout_s=0.3,
        )
    finally:
        owner.kill()
        owner.wait()
    tag = f"{os.uname().nodename}:{owner.pid}"
    assert events[0][0] == "waiting"
    assert f"waiting for trial 0 (worker {tag}) to finish" in events[0][1]["message"]
    assert events[-1][0] == "gave_up"
    assert message is not None and "gave up after 0 s" in message
    assert "run the same command again" in message


def test_only_the_first_stop_signal_interrupts():
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        stop_like_ctrl_c((signal.SIGTERM, signal.SIGHUP))
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends
        os.kill(os.getpid(), signal.SIGHUP)  # ignored: the cleanup must not be cut short
        time.sleep(0.01)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        signals._state = signals._State()  # no signal received, for the tests that follow


def test_the_wrapped_rdb_storage_keeps_optunas_heartbeat_and_stale_trial_retry(tmp_path):
    from optuna.storages import RDBStorage, RetryHeartbeatStaleTrialCallback, fail_stale_trials

    from tuner.study.storage import SignalSafeStorage, optuna_heartbeat_s, signal_safe

    rdb = RDBStorage(
        f"sqlite:///{tmp_path / 'hb.db'}",
        heartbeat_interval=1,
        grace_period=1,
        heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(max_retry=3),
    )
    storage = signal_safe(rdb)
    assert isinstance(storage, SignalSafeStorage) and optuna_heartbeat_s(storage) == 1
    study = optuna.create_study(storage=storage, directions=["maximize", "minimize"])
    trial = study.ask()
    # The tuner's heartbeat thread records Optuna's heartbeat on such a storage...
    beat = OwnerHeartbeat(storage, trial_id(storage, study, trial.number), 1, optuna_beat_s=1)
    beat.stop()
    assert record.HEARTBEAT not in study.get_trials()[0].user_attrs
    time.sleep(2.5)  # ...and after the grace period without one, the public helper fails it.
    fail_stale_trials(study)
    states = [t.state for t in study.get_trials()]
    assert states == [TrialState.FAIL, TrialState.WAITING], states
