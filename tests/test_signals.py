"""A stop signal (SIGTERM, SIGHUP, Ctrl-C) never lands inside a storage call: it is delivered
when the call ends, and the trial it interrupts ends FAIL, marked interrupted, exactly once. The
signal is raised by the test itself at chosen points (no wall-clock asserts)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.storages.journal import _file as journal_file
from optuna.trial import TrialState

from tuner import signals
from tuner.results import record
from tuner.signals import deferred, run_async, stop_like_ctrl_c
from tuner.study.loop import queue_baseline_and_retries, run_trials
from tuner.study.storage import signal_safe

SIG = signal.SIGUSR1


@pytest.fixture(autouse=True)
def stop_on_sigusr1():
    previous = signal.getsignal(SIG)
    stop_like_ctrl_c((SIG,))
    yield
    signal.signal(SIG, previous)
    signals._state = signals._State()  # no signal received, for the tests that follow


class _SignalInUnlink:
    """Optuna's journal file module with an `os` whose `unlink` raises SIG once it is armed:
    inside the lock's release, between its rename and the end of its try block, where a
    KeyboardInterrupt makes it unlink the file again (FileNotFoundError)."""

    def __init__(self) -> None:
        self.armed = False
        self.fired = 0

    def unlink(self, path: str) -> None:
        os.unlink(path)
        if self.armed:
            self.armed = False
            self.fired += 1
            signal.raise_signal(SIG)

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)


@pytest.fixture
def journal(tmp_path, monkeypatch):
    fake_os = _SignalInUnlink()
    monkeypatch.setattr(journal_file, "os", fake_os)
    path = tmp_path / "s.journal"
    storage = signal_safe(JournalStorage(JournalFileBackend(str(path))))
    study = optuna.create_study(storage=storage, directions=["maximize", "minimize"])
    return SimpleNamespace(study=study, storage=storage, path=path, os=fake_os)


def _reloaded(path: Path) -> list[optuna.trial.FrozenTrial]:
    storage = JournalStorage(JournalFileBackend(str(path)))
    return optuna.load_study(study_name=None, storage=storage).get_trials()


def _check_interrupted_once(path: Path) -> None:
    assert not Path(str(path) + ".lock").exists()
    trials = _reloaded(path)
    assert [t.state for t in trials] == [TrialState.FAIL]
    assert trials[0].user_attrs.get(record.INTERRUPTED) is True
    assert record.ERROR not in trials[0].user_attrs
    study = optuna.load_study(
        study_name=None, storage=JournalStorage(JournalFileBackend(str(path)))
    )
    queue_baseline_and_retries(study)
    queue_baseline_and_retries(study)
    retries = [t for t in study.get_trials() if t.user_attrs.get(record.RETRY_OF) == 0]
    assert len(retries) == 1 and retries[0].state == TrialState.WAITING


def test_a_signal_inside_a_deferred_block_is_raised_when_the_block_ends():
    reached = []
    with pytest.raises(KeyboardInterrupt, match="SIGUSR1"), deferred():
        with deferred():
            signal.raise_signal(SIG)
            reached.append("inner")
        reached.append("outer")  # the outermost block delivers it
    assert reached == ["inner", "outer"]
    signal.raise_signal(SIG)  # the signals that follow are ignored


def test_a_signal_while_an_event_loop_runs_is_raised_by_the_loop_which_is_then_closed():
    """The benchmark client runs in asyncio.run: the interrupt comes from a callback of its
    loop, between steps, never from inside the step (or the loop's bookkeeping) under way."""
    import asyncio

    steps = []

    async def bench() -> None:
        signal.raise_signal(SIG)
        steps.append("the step under way ends")  # not interrupted in the middle
        await asyncio.sleep(5)
        steps.append("never")

    with pytest.raises(KeyboardInterrupt, match="SIGUSR1"):
        asyncio.run(bench())
    assert steps == ["the step under way ends"]
    assert asyncio._get_running_loop() is None
    signal.raise_signal(SIG)  # the signals that follow are ignored


class _LoopClosedWithASignal(asyncio.DefaultEventLoopPolicy):
    """Event loops whose close() receives SIG before it has closed anything: the window in
    which asyncio.run's teardown used to be interrupted, leaving a half-closed loop."""

    def __init__(self) -> None:
        super().__init__()
        self.loops: list[asyncio.AbstractEventLoop] = []

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        loop = super().new_event_loop()
        close = loop.close

        def close_after_a_signal() -> None:
            signal.raise_signal(SIG)
            close()

        loop.close = close_after_a_signal  # type: ignore[method-assign]
        self.loops.append(loop)
        return loop


def test_a_signal_while_asyncio_run_closes_its_loop_is_raised_once_the_loop_is_closed():
    policy = _LoopClosedWithASignal()
    previous = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(policy)
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGUSR1"):
            run_async(_seven())
    finally:
        asyncio.set_event_loop_policy(previous)
    (loop,) = policy.loops
    assert loop.is_closed() and not loop.is_running()


def test_a_signal_before_the_loop_runs_the_benchmark_stops_it_before_its_first_step():
    steps = []

    async def bench() -> None:
        steps.append("started")

    with pytest.raises(KeyboardInterrupt, match="SIGUSR1"), deferred():
        signal.raise_signal(SIG)  # noted, as while asyncio.run makes its loop
        run_async(bench())
    assert steps == []
    assert run_async(_seven()) == 7  # later calls run as usual


async def _seven() -> int:
    return 7


def test_a_signal_inside_the_journal_lock_interrupts_the_trial_after_the_write(journal, caplog):
    after_write = []

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        journal.os.armed = True
        trial.set_user_attr("written", 1)  # SIG arrives inside the journal lock's release
        after_write.append(trial.number)  # never: the interrupt comes as the write ends
        return 1.0, 1.0

    with caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
        run_trials(journal.study, objective, total=1, heartbeat_s=3600, storage=journal.storage)
    assert journal.os.fired == 1 and not after_write
    assert not caplog.records  # no "raised; recorded as FAIL", no traceback
    _check_interrupted_once(journal.path)
    assert _reloaded(journal.path)[0].user_attrs["written"] == 1


def test_a_signal_while_a_trial_is_asked_interrupts_that_trial(journal):
    journal.os.armed = True  # the ask's write is the first

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        raise AssertionError("the interrupted trial must not run")

    with pytest.raises(KeyboardInterrupt):
        run_trials(journal.study, objective, total=1, heartbeat_s=3600, storage=journal.storage)
    assert journal.os.fired == 1
    _check_interrupted_once(journal.path)


def test_an_error_after_the_signal_is_an_interrupt_in_one_line(journal, caplog):
    def objective(trial: optuna.Trial) -> tuple[float, float]:
        try:
            signal.raise_signal(SIG)  # outside any storage call: raised at once
        except KeyboardInterrupt:
            raise RuntimeError("the server did not stop cleanly") from None
        return 1.0, 1.0

    with caplog.at_level(logging.WARNING), pytest.raises(KeyboardInterrupt):
        run_trials(journal.study, objective, total=1, heartbeat_s=3600, storage=journal.storage)
    [line] = caplog.records
    assert line.exc_info is None
    assert "interrupted by SIGUSR1" in line.getMessage() and "did not stop" in line.getMessage()
    _check_interrupted_once(journal.path)
