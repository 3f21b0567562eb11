"""Faults a cluster delivers and input people get wrong, with real processes: a tuner killed or
stopped mid-benchmark and the same command run again, two tuners started together on a new study,
and bad options that must fail in one line before anything is created."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from support.sim_spaces import small_space
from test_parallel import postgres  # noqa: F401  (the fixture: a throw-away PostgreSQL server)

from tuner.errors import UserError
from tuner.results import record
from tuner.results.storage import open_storage

TRIALS = 3
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# Two tuners started together, this many times (a development run used 10).
REPEAT = int(os.environ.get("TUNER_FAULTS_REPEAT", "3"))


def _cmd(space: Path, studies: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space),
        "--trials", str(TRIALS), "--studies-dir", str(studies), "--no-report", *extra,
    ]  # fmt: skip


def _loader(storage: str | None, name: str, studies: Path):
    def load() -> optuna.Study | None:
        try:
            opened = open_storage(storage, name, studies)
        except UserError:  # not created yet
            return None
        return optuna.load_study(study_name=name, storage=opened)

    return load


def _servers_left(tmp_path: Path, timeout_s: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
        left = [ln for ln in out.splitlines() if "tuner.sim" in ln and str(tmp_path) in ln]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _freeze_mid_benchmark(load, pid: int, timeout_s: float = 120, stages: int = 3) -> int:
    """SIGSTOP the tuner while a trial's server is up and its benchmark has not recorded all its
    `stages` (small_space runs 3); return the trial.

    Frozen, the tuner cannot finish the trial between the check and the signal that follows. A
    trial with every stage recorded may be frozen inside the tell that completes it, still
    uncommitted when looked at: a signal never interrupts a storage call (tuner/signals.py), so
    that write lands and the trial ends complete, not interrupted (seen once on PostgreSQL).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        study = load()
        running = [
            t
            for t in (study.get_trials(deepcopy=False) if study else [])
            if t.state == TrialState.RUNNING
            and t.user_attrs.get(record.SERVER_PGID)
            and len(t.user_attrs.get(record.STAGES) or ()) < stages
        ]
        if running:
            os.kill(pid, signal.SIGSTOP)
            number = running[0].number
            # Frozen in the middle of a write, the storage may not open this instant: look again.
            again = load()
            if again and again.get_trials(deepcopy=False)[number].state == TrialState.RUNNING:
                return number
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.05)
    pytest.fail("no trial with a live server to interrupt")


@pytest.mark.parametrize(
    "storage_kind", ["sqlite", "journal", pytest.param("postgres", marks=pytest.mark.postgres)]
)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_killed_tuner_run_again_finishes_the_budget(tmp_path, request, storage_kind, sig):
    space = small_space(tmp_path, name="fx", sim={"time_scale": 50})
    studies = tmp_path / "studies"
    storage = {
        "sqlite": None,
        "journal": str(studies / "fx.journal"),
        "postgres": request.getfixturevalue("postgres") if storage_kind == "postgres" else None,
    }[storage_kind]
    cmd = _cmd(space, studies, "--seed", "0", *(["--storage", storage] if storage else []))
    load = _loader(storage, "fx", studies)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        number = _freeze_mid_benchmark(load, proc.pid)
        os.kill(proc.pid, sig)
        os.kill(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = out.decode()
    if sig == signal.SIGTERM:  # stopped as Ctrl-C stops it
        assert proc.returncode == 130, text
        assert "Traceback" not in text and "run the same command again" in text
        assert load().get_trials()[number].user_attrs.get(record.INTERRUPTED)
    else:
        assert proc.returncode == -signal.SIGKILL
        assert load().get_trials()[number].state == TrialState.RUNNING
    assert not _servers_left(tmp_path)

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Traceback" not in again.stdout + again.stderr
    trials = load().get_trials()
    assert sum(t.state in FINISHED for t in trials) == TRIALS, [t.state for t in trials]
    assert trials[number].state == TrialState.FAIL
    retries = [t for t in trials if t.user_attrs.get(record.RETRY_OF) == number]
    assert len(retries) == 1 and retries[0].state in FINISHED
    assert retries[0].params == trials[number].params
    if sig == signal.SIGKILL:
        assert "gone" in trials[number].user_attrs[record.ABANDONED]
        assert f"trial {number}" in again.stdout and "abandoned" in again.stdout
    assert not _servers_left(tmp_path)


@pytest.mark.parametrize("iteration", range(REPEAT))
@pytest.mark.parametrize("storage_kind", ["sqlite", "journal"])
def test_two_tuners_started_together_on_a_new_study(tmp_path, storage_kind, iteration):
    space = small_space(tmp_path, name="both")
    studies = tmp_path / "studies"
    storage = str(studies / "both.journal") if storage_kind == "journal" else None
    extra = ["--storage", storage] if storage else []
    procs = [
        subprocess.Popen(
            _cmd(space, studies, "--seed", str(seed), *extra),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for seed in (iteration, iteration + 100)
    ]
    try:
        outs = [p.communicate(timeout=240)[0].decode() for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out
        # A configuration that fails to launch names the server's error; the tuner's own none.
        own = "\n".join(line for line in out.splitlines() if "launch_failed:" not in line)
        assert "error" not in own.lower() and "Traceback" not in out, out
    trials = _loader(storage, "both", studies)().get_trials()
    finished = [t for t in trials if t.state in FINISHED]
    assert len(finished) == TRIALS, [(t.number, t.state.name) for t in trials]
    assert sum(1 for t in finished if t.user_attrs.get(record.IS_DEFAULT)) == 1
    assert not [t for t in trials if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    assert not _servers_left(tmp_path)


def _read_only(path: Path, cmd: list[str]) -> list[str]:
    """`cmd` run with `path` read-only: chmod for a user, a read-only bind mount for root."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        path.chmod(0o555)
        return cmd
    if not shutil.which("unshare"):
        pytest.skip("root without unshare: cannot make a read-only directory")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("root without mount namespaces: cannot make a read-only directory")
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
    return ["unshare", "-m", "sh", "-c", script, str(path), *cmd]


BAD_INPUTS = {
    "read-only studies dir": (
        ["--studies-dir", "{ro}"],
        ["--studies-dir {ro} is read-only", "writable"],
    ),
    "read-only storage dir": (
        ["--storage", "{ro}/study.db"],
        ["storage directory {ro} is read-only", "writable"],
    ),
    "sampler": (["--sampler", "foo"], ["--sampler 'foo'", "choose one of tpe"]),
    "engine": (["--engine", "foo"], ["--engine 'foo'", "choose sim"]),
    "timeout": (["--timeout", "-5"], ["--timeout -5", "above 0"]),
    "time scale": (["--time-scale", "0"], ["--time-scale 0", "above 0"]),
    "time scale with sglang": (
        ["--engine", "sglang", "--time-scale", "50"],
        ["--time-scale 50.0 applies to the simulator only", "--engine sim"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_leaves_no_study(tmp_path, case):
    args, expected = BAD_INPUTS[case]
    space = small_space(tmp_path, name="bad")
    studies, ro = tmp_path / "studies", tmp_path / "ro"
    args = [a.replace("{ro}", str(ro)) for a in args]
    cmd = [sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space), "--trials", "1"]
    cmd += ["--no-report", *([] if "--studies-dir" in args else ["--studies-dir", str(studies)])]
    cmd += args
    if "read-only" in case:
        cmd = _read_only(ro, cmd)
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        if ro.exists():
            ro.chmod(0o755)
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    for part in expected:
        assert part.replace("{ro}", str(ro)) in lines[0], lines[0]
    assert "Traceback" not in out.stdout + out.stderr
    listing = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "studies", "--studies-dir", str(studies)],
        capture_output=True,
        text=True,
    )
    assert listing.stdout.strip() == "no studies found", listing.stdout
    assert not ro.exists() or not list(ro.iterdir())  # nothing written where it must not be


def _serving(study: optuna.Study | None) -> bool:
    trials = study.get_trials(deepcopy=False) if study else []
    return any(
        t.state == TrialState.RUNNING and t.user_attrs.get(record.SERVER_PGID) for t in trials
    )


def test_sigterm_to_a_tuner_with_workers_stops_them_all_and_the_rerun_finishes(tmp_path):
    space = small_space(tmp_path, name="wk", sim={"time_scale": 50})
    studies = tmp_path / "studies"
    cmd = [*_cmd(space, studies, "--seed", "0", "--workers", "2"), "--trials", "5"]
    load = _loader(str(studies / "wk.journal"), "wk", studies)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while not _serving(load()):
            assert time.monotonic() < deadline and proc.poll() is None, "no trial started"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGTERM)  # the supervisor only, as `kill` or Slurm would
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = out.decode()
    assert proc.returncode == 130, text
    assert "Traceback" not in text and "run the same command again" in text
    assert not _servers_left(tmp_path)
    trials = load().get_trials()
    assert not [t for t in trials if t.state == TrialState.RUNNING]
    interrupted = [t.number for t in trials if t.user_attrs.get(record.INTERRUPTED)]
    assert interrupted, [(t.number, t.state.name) for t in trials]

    again = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    trials = load().get_trials()
    assert sum(t.state in FINISHED for t in trials) == 5, [t.state for t in trials]
    for number in interrupted:
        retries = [t for t in trials if t.user_attrs.get(record.RETRY_OF) == number]
        assert len(retries) == 1 and retries[0].params == trials[number].params
    assert not _servers_left(tmp_path)
