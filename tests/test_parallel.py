"""Parallel and distributed studies: a real PostgreSQL server and a journal file, three workers
each, one of them killed with SIGKILL mid-trial."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from support.sim_spaces import small_space

from tuner.errors import UserError
from tuner.launcher import free_port
from tuner.results import record
from tuner.results.storage import open_storage
from tuner.study.budget import counts

TRIALS = 24
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def _pg_bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


@pytest.fixture
def postgres() -> Iterator[str]:
    """A throw-away PostgreSQL server on 127.0.0.1; its URL."""
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.fail(
            "PostgreSQL server binaries not installed (apt install postgresql); "
            "deselect the PostgreSQL tests with -m 'not postgres'"
        )
    # Not under pytest's tmp_path: as root that is private to root, and postgres runs as its
    # own user.
    root = Path(tempfile.mkdtemp(prefix="tuner-pg-"))
    data = root / "data"
    port = free_port()
    run_as: list[str] = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        run_as = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    subprocess.run(
        [*run_as, initdb, "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
    )
    opts = f"-c listen_addresses=127.0.0.1 -c port={port} -k {data} -c fsync=off"
    subprocess.run(
        [*run_as, pg_ctl, "-D", str(data), "-o", opts, "-l", str(data / "log"), "-w", "start"],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*run_as, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)


def _servers_left(tmp_path: Path) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "tuner.sim" in line and str(tmp_path) in line]


def _wait_servers_gone(tmp_path: Path, timeout_s: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while (left := _servers_left(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _kill_a_worker_mid_trial(study_loader, after_finished: int = 3, timeout_s: float = 180) -> int:
    """SIGKILL the worker of a trial whose server is up; return that trial's number.

    The worker is frozen (SIGSTOP) first and the trial read again, so that it cannot finish
    between the read and the kill.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        study = study_loader()
        if study is not None:
            trials = study.get_trials(deepcopy=False)
            done = sum(t.state in FINISHED for t in trials)
            running = [
                t
                for t in trials
                if t.state == TrialState.RUNNING and t.user_attrs.get(record.SERVER_PGID)
            ]
            if done >= after_finished and running:
                number = running[0].number
                pid = int(running[0].user_attrs[record.WORKER].rsplit(":", 1)[1])
                os.kill(pid, signal.SIGSTOP)
                again = study_loader()  # None if the storage cannot open this instant
                if again and again.get_trials(deepcopy=False)[number].state == TrialState.RUNNING:
                    os.kill(pid, signal.SIGKILL)
                    return number
                os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
    pytest.fail("no running trial with a live server to kill")


def _check_study(study: optuna.Study, killed: int) -> None:
    trials = study.get_trials(deepcopy=False)
    finished = [t for t in trials if t.state in FINISHED]
    # --trials counts launched configurations; skips and repeats are recorded on top.
    assert sum(counts(t) for t in finished) == TRIALS, [(t.number, t.state.name) for t in trials]
    # The killed trial failed and was run again, once, by another worker.
    assert trials[killed].state == TrialState.FAIL
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == killed]
    assert len(retries) == 1 and retries[0].state in FINISHED
    assert retries[0].params == trials[killed].params
    # No configuration launched twice (a proposal identical to a finished trial reuses its
    # result without a launch); the baseline ran exactly once.
    launched = [t for t in finished if record.DUPLICATE_OF not in t.user_attrs]
    configs = [tuple(sorted(t.params.items())) for t in launched]
    assert len(configs) == len(set(configs))
    assert sum(1 for t in finished if t.user_attrs.get(record.IS_DEFAULT)) == 1


def _base_cmd(space: Path, studies: Path) -> list[str]:
    return [
        sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space),
        "--trials", str(TRIALS), "--studies-dir", str(studies), "--no-report",
        "--min-gain", "0",  # the whole budget: the stop rule may end a study early
    ]  # fmt: skip


@pytest.mark.postgres
def test_three_workers_on_postgresql_survive_a_killed_worker(tmp_path, postgres):
    space = small_space(tmp_path, name="pg", sim={"time_scale": 50})
    studies = tmp_path / "studies"
    cmd = [*_base_cmd(space, studies), "--storage", postgres, "--heartbeat", "1"]
    workers = [
        subprocess.Popen(
            [*cmd, "--seed", str(i)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        for i in range(3)
    ]
    try:

        def load() -> optuna.Study | None:
            try:
                return optuna.load_study(study_name="pg", storage=postgres)
            except KeyError:
                return None

        killed = _kill_a_worker_mid_trial(load)
        for w in workers:
            w.wait(timeout=400)
        survivors = [w for w in workers if w.returncode != -signal.SIGKILL]
        assert len(survivors) == 2
        for w in survivors:
            assert w.returncode == 0, w.stderr.read().decode() if w.stderr else ""
        _check_study(load(), killed)
        assert not _wait_servers_gone(tmp_path)
    finally:
        for w in workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)


def test_workers_on_a_journal_file_survive_a_killed_worker(tmp_path):
    space = small_space(tmp_path, name="jr", sim={"time_scale": 50})
    studies = tmp_path / "studies"
    cmd = [*_base_cmd(space, studies), "--workers", "3", "--seed", "0"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:

        def load() -> optuna.Study | None:
            if not (studies / "jr.journal").exists():
                return None
            try:
                storage = open_storage(str(studies / "jr.journal"), "jr", studies)
            except UserError:  # the supervisor has not created the study yet
                return None
            return optuna.load_study(study_name="jr", storage=storage)

        killed = _kill_a_worker_mid_trial(load)
        out, _ = proc.communicate(timeout=400)
        assert proc.returncode == 0, out.decode()
        _check_study(load(), killed)
        assert not _wait_servers_gone(tmp_path)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
