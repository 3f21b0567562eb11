"""The exported files against real sglang 0.5.23 on this CPU (marker `real_sglang`).

Two things that went wrong on the CPU tier, as a user met them: the .yaml's usage line
(`python3 -m sglang.launch_server --config ...`) failed as written, and the launch script, with
its port taken, started a second server that warmed up against the first for minutes. One launch
of the real server here (17-90 s on a 2-core host).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import optuna
import pytest
from support.fixture_studies import build_study
from support.real_sglang import (
    CPU_ENV,
    CPU_FLAGS,
    INSTALL_HINT,
    build_tiny_model,
    free_port,
    group_processes,
    venv_python,
    wait_healthy,
)

from tuner.results import record
from tuner.results.export import ExportResult, export_trial
from tuner.results.storage import open_storage

pytestmark = [pytest.mark.real_sglang, pytest.mark.timeout(600)]
optuna.logging.set_verbosity(optuna.logging.WARNING)


def exported(tmp_path: Path, python: Path, model: Path) -> ExportResult:
    """A study of the CPU tier's shape (its interpreter, variables and flags), exported."""
    url = f"sqlite:///{tmp_path / 'cpu.db'}"
    study = build_study(url, "cpu", only=[0], engine="sglang")
    study.set_user_attr(record.STUDY_ENGINE_PYTHON, str(python))
    study.set_user_attr(record.STUDY_ENGINE_ENV, CPU_ENV)
    study.add_trial(
        optuna.trial.create_trial(
            values=[1.0, 1.0],
            params={},
            distributions={},
            user_attrs={
                **study.trials[0].user_attrs,
                "server_args": ["--model-path", str(model), *CPU_FLAGS],
            },
            constraints={"launch": 0.0},
        )
    )
    return export_trial(open_storage(url, "cpu", tmp_path), "cpu", trial=1, out_dir=tmp_path)


def test_the_config_usage_line_serves_and_the_script_refuses_its_port(tmp_path):
    python = venv_python()
    if python is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    model = build_tiny_model(python, tmp_path / "tiny-llama")
    result = exported(tmp_path, python, model)
    usage = next(
        line.removeprefix("#").strip()
        for line in result.config.read_text().splitlines()
        if "-m sglang.launch_server --config" in line
    )
    port = free_port()
    # As written but for the port, which another server on this host may hold.
    usage = usage.replace("--port 30000", f"--port {port}")
    env = {k: v for k, v in os.environ.items() if k not in CPU_ENV and not k.startswith("SGLANG")}
    log_path = tmp_path / "config-server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            ["bash", "-c", usage],
            cwd=result.config.parent,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        assert wait_healthy(url, server, 300), log_path.read_text()[-3000:]

        # The port is taken now: the launch script says so and starts nothing.
        second = subprocess.run(
            ["bash", str(result.script)],
            env={**env, "SGLANG_PORT": str(port)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2
        assert second.stdout == ""
        assert second.stderr.strip().splitlines() == [
            f"port {port} on 127.0.0.1 is not free (Address already in use): stop the server "
            "holding it or set SGLANG_PORT to a free port"
        ]
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200  # the first one serves
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while group_processes(server.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        if group_processes(server.pid):  # sglang's children ignored the TERM: no orphans
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
