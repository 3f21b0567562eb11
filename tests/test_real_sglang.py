"""`--engine sglang` against real sglang 0.5.23 on this CPU (marker `real_sglang`).

Needs the environment tools/install_real_sglang.sh makes (`.ci/run` runs it); without it every
test here fails with the line saying how to install it, and `-m "not real_sglang"` deselects
them. The model is the tiny Llama of tests/support/tiny_llama.py, built once per session. Each
launch of the real server costs 17-26 s on an idle 2-core host, so the tests share studies:
7 launches in all, short benchmarks.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import optuna
import pytest
import yaml
from support.real_sglang import (
    CPU_ENV,
    INSTALL_HINT,
    build_tiny_model,
    free_port,
    group_processes,
    venv_python,
    wait_healthy,
)

from tuner.study.budget import FINISHED, is_free

pytestmark = [pytest.mark.real_sglang, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[1]
CPU_SPACE = REPO / "search_spaces" / "tiny-llama-cpu.yaml"
# Small enough that a trial's benchmark takes seconds on a busy 2-core host.
WORKLOAD = {"kind": "random", "requests": 8, "input_len": 32, "output_len": 8, "seed": 0}
BENCH = {"concurrency": 4, "warmup_requests": 1, "stages": 1, "timeout_s": 120}


@pytest.fixture(scope="session")
def real_python() -> Path:
    python = venv_python()
    if python is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    return python


@pytest.fixture(scope="session")
def tiny_model(real_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(real_python, tmp_path_factory.mktemp("model") / "tiny-llama")


def write_space(
    path: Path, python: Path, model: Path, params: dict[str, object], name: str
) -> Path:
    space = yaml.safe_load(CPU_SPACE.read_text())
    space.update(name=name, model_path=str(model), params=params, workload=WORKLOAD)
    space["engine"]["python"] = str(python)
    space["bench"] = {**space["bench"], **BENCH}
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


def tuner(*args: str, cwd: Path, timeout: float = 500) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def load(studies: Path, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=f"sqlite:///{studies / name}.db")


@pytest.fixture(scope="module")
def study(real_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A 3-trial study: sglang's defaults, a flag the CPU refuses, then a served one.

    The random sampler's seed 0 proposes --kv-cache-dtype fp8_e5m2 for trial 1 and auto for
    trial 2 (`tuner optimize --dry-run` shows it)."""
    work = tmp_path_factory.mktemp("study")
    params = {"kv_cache_dtype": {"choices": ["auto", "fp8_e5m2"]}}
    space = write_space(work / "space.yaml", real_python, tiny_model, params, "real-cpu")
    started = time.monotonic()
    result = tuner(
        "optimize",
        "--engine",
        "sglang",
        "--space",
        str(space),
        "--trials",
        "3",
        "--sampler",
        "random",
        "--seed",
        "0",
        "--no-report",
        "--studies-dir",
        str(work / "studies"),
        cwd=work,
    )
    return {
        "result": result,
        "work": work,
        "studies": work / "studies",
        "wall_s": time.monotonic() - started,
    }


def test_a_real_study_measures_sglangs_defaults_first(study):
    result = study["result"]
    assert result.returncode == 0, result.stdout + result.stderr
    trials = load(study["studies"], "real-cpu").trials
    default = trials[0]
    assert default.state == optuna.trial.TrialState.COMPLETE
    # Trial 0 passes no tuned flag; the sampler is told sglang's defaults as its params.
    assert default.params.get("kv_cache_dtype") in (None, "auto")
    tuned = default.user_attrs["server_args"]
    assert "--kv-cache-dtype" not in tuned and "--max-running-requests" not in tuned
    assert default.user_attrs["metrics"]["completed"] == WORKLOAD["requests"]
    assert default.values[0] > 0
    print(result.stdout)  # the study's summary, for the record (pytest -s)


def test_the_recorded_capacity_is_what_the_real_server_said(study):
    trials = load(study["studies"], "real-cpu").trials
    for trial in (t for t in trials if t.state == optuna.trial.TrialState.COMPLETE):
        log = (study["studies"] / "real-cpu" / f"trial-{trial.number}" / "server.log").read_text()
        # Read here with a pattern of its own, not the tuner's parser.
        summary = re.search(r"max_total_num_tokens=(\d+), .*max_running_requests=(\d+)", log)
        kv = re.search(r"KV Cache is allocated\. dtype: torch\.bfloat16, #tokens: (\d+)", log)
        assert summary and kv, log[-2000:]
        capacity = trial.user_attrs["capacity"]
        assert capacity["max_total_num_tokens"] == int(summary.group(1)) == 8192
        assert capacity["kv_cache_tokens"] == int(kv.group(1)) == 8192
        assert capacity["max_running_requests"] == int(summary.group(2))
        asked = trial.params.get("max_running_requests")
        assert capacity["max_running_requests"] == (asked or 2048)  # 2048: CPU default here


def test_a_flag_the_cpu_refuses_is_recorded_with_its_reason_and_the_study_goes_on(study):
    trials = load(study["studies"], "real-cpu").trials
    refused = trials[1]
    assert refused.params["kv_cache_dtype"] == "fp8_e5m2"
    assert refused.state == optuna.trial.TrialState.PRUNED
    assert refused.user_attrs["failure_class"] == "startup_rule"
    assert refused.user_attrs["failure_message"] == (
        "ValueError: --kv-cache-dtype fp8_e5m2 is not supported on CPU."
    )
    # The study went on: a later configuration was launched and served (proposals the crash
    # model skips before launch may come between; they launch nothing and do not count).
    later = [t for t in trials[2:] if t.state == optuna.trial.TrialState.COMPLETE]
    assert later and later[0].params["kv_cache_dtype"] == "auto"
    # --trials counts launched configurations: skips and repeats of a measured one are free.
    launched = [t for t in trials if t.state in FINISHED and not is_free(t)]
    assert len(launched) == 3, [(t.number, t.state, t.user_attrs.get("outcome")) for t in trials]


def test_a_real_study_records_its_provenance_and_shows_it(study, real_python):
    # Before trial 0 the host was checked as `tuner doctor` does: nothing failed.
    assert re.search(r"^host: 9 checks, \d+ ok", study["result"].stdout, re.M), study["result"]
    facts = load(study["studies"], "real-cpu").user_attrs["provenance"]
    assert facts["engine"] == "sglang" and facts["sglang_version"] == "0.5.23"
    torch = subprocess.run(
        [str(real_python), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout.strip()
    assert facts["torch_version"] == torch and facts["cuda_version"] is None  # a CPU build
    assert facts["server_env"]["SGLANG_USE_CPU_ENGINE"] == "1"
    assert len(facts["model_config_sha256"]) == 64
    listing = tuner("studies", "--studies-dir", str(study["studies"]), cwd=study["work"])
    assert f"  engine: sglang 0.5.23, torch {torch}, CUDA none, Python 3." in listing.stdout
    report = tuner(
        *("report", "--study", "real-cpu", "--studies-dir", str(study["studies"])),
        cwd=study["work"],
        timeout=120,
    )
    assert report.returncode == 0, report.stdout + report.stderr
    page = (study["studies"] / "real-cpu" / "report.html").read_text()
    assert f"<th>torch</th><td>{torch}</td>" in page
    assert "<th>sglang</th><td>0.5.23</td>" in page


def test_the_exported_script_starts_real_sglang(study):
    out = study["work"] / "export"
    exported = tuner(
        "export",
        "--study",
        "real-cpu",
        "--studies-dir",
        str(study["studies"]),
        "--pick",
        "knee",
        "--out-dir",
        str(out),
        cwd=study["work"],
        timeout=60,
    )
    assert exported.returncode == 0, exported.stdout + exported.stderr
    script = next(out.glob("launch_real-cpu_trial*.sh"))
    text = script.read_text()
    assert 'export SGLANG_USE_CPU_ENGINE="${SGLANG_USE_CPU_ENGINE:-1}"' in text
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in CPU_ENV}  # the script sets them
    env["SGLANG_PORT"] = str(port)
    log = (study["work"] / "exported.log").open("wb")
    server = subprocess.Popen(
        ["bash", str(script)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        assert wait_healthy(url, server, 240), (study["work"] / "exported.log").read_text()[-3000:]
        answer = httpx.post(
            f"{url}/generate",
            json={"input_ids": [300, 301, 302], "sampling_params": {"max_new_tokens": 4}},
            timeout=60,
        ).json()
        assert answer["meta_info"]["completion_tokens"] == 4
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
        log.close()


# --------------------------------------------------------------------------- interruptions


def _launcher_group(tuner_pid: int, timeout_s: float = 240) -> int:
    """The process group of the sglang server `tuner_pid` started, once its scheduler and
    detokenizer run (real sglang is three processes by then)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
                cmdline = (stat.parent / "cmdline").read_bytes()
            except OSError:
                continue
            if int(fields[1]) == tuner_pid and b"sglang.launch_server" in cmdline:
                pgid = int(fields[2])
                names = group_processes(pgid)
                # comm is cut at 15 characters: sglang::schedul, sglang::detoken
                if {"sglang::schedul", "sglang::detoken"} <= set(names):
                    return pgid
        time.sleep(0.2)
    raise AssertionError("the tuner's sglang server did not get its scheduler and detokenizer")


def _gone(pgid: int, timeout_s: float = 30) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while (left := group_processes(pgid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


@pytest.fixture(scope="module")
def interrupted(real_python: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("interrupted")
    params = {"max_running_requests": {"choices": [2, 4]}}
    space = write_space(work / "space.yaml", real_python, tiny_model, params, "real-stop")
    command = [sys.executable, "-m", "tuner.cli", "optimize", "--engine", "sglang"]
    command += ["--space", str(space), "--trials", "1", "--no-report", "--seed", "0"]
    command += ["--studies-dir", str(work / "studies")]
    return work, command


def _start(command: list[str], work: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_kill_9_then_sigterm_leave_no_sglang_process_and_the_trial_runs_again(interrupted):
    work, command = interrupted
    # kill -9 of the tuner while its trial's server runs: the whole group goes with it.
    first = _start(command, work)
    pgid = _launcher_group(first.pid)
    assert len(group_processes(pgid)) >= 3
    first.kill()
    first.wait(timeout=30)
    assert _gone(pgid) == [], "sglang processes left after kill -9 of the tuner"
    study = load(work / "studies", "real-stop")
    assert [t.state for t in study.trials] == [optuna.trial.TrialState.RUNNING]

    # The same command: the dead trial is found and queued again; SIGTERM it in turn.
    second = _start(command, work)
    pgid = _launcher_group(second.pid)
    second.send_signal(signal.SIGTERM)
    output, _ = second.communicate(timeout=60)
    assert second.returncode == 130, output
    assert _gone(pgid) == [], "sglang processes left after SIGTERM of the tuner"

    # And once more, left alone: the queued configuration is measured.
    third = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=500)
    assert third.returncode == 0, third.stdout + third.stderr
    trials = load(work / "studies", "real-stop").trials
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 1
    assert done[0].params == trials[0].params  # the interrupted configuration, run again
    assert done[0].user_attrs.get("retry_of") is not None
    assert {t.state for t in trials[:-1]} == {optuna.trial.TrialState.FAIL}


def test_no_trial_of_these_studies_left_a_server_behind(study, interrupted):
    # Every server the tests' tuner runs started was in its own group and is gone: no process
    # on this host still has the tiny model's path on its command line.
    model_users = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "tiny-llama" in text and "sglang" in text:
            model_users.append(text)
    assert model_users == []
