"""The exported script, pointed at the simulator instead of sglang, brings a server up.

`SGLANG_LAUNCH_MODULE=tuner.sim` swaps `python -m sglang.launch_server` for `python -m tuner.sim`;
everything else (the tuned flags, host and port from the environment) is the script as exported.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import optuna
import pytest
import yaml
from support.fixture_studies import sqlite_study

from tuner.results.export import export_trial
from tuner.results.storage import open_storage

optuna.logging.set_verbosity(optuna.logging.WARNING)
READY = "The server is fired up and ready to roll!"
_PASSED_THROUGH = (
    "mem-fraction-static",
    "speculative-num-steps",
    "speculative-num-draft-tokens",
    "enable-hierarchical-cache",
    "hicache-ratio",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    # A reader thread, so that waiting for the ready line can time out.
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _wait_ready(proc: subprocess.Popen[str], lines: queue.Queue[str], timeout_s: float) -> str:
    seen: list[str] = []
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            if proc.poll() is not None:
                break
            continue
        seen.append(line)
        if READY in line:
            return "".join(seen)
    raise AssertionError(f"no ready line (exit code {proc.poll()}):\n{''.join(seen)[-3000:]}")


@pytest.mark.parametrize("pick", ["knee", "max-throughput"])
def test_exported_script_brings_up_the_simulator(tmp_path, pick):
    sqlite_study(tmp_path / "studies", "qwen-mtp")
    storage = open_storage(None, "qwen-mtp", tmp_path / "studies")
    result = export_trial(storage, "qwen-mtp", pick=pick, out_dir=tmp_path)
    port = free_port()
    env = {
        **os.environ,
        "SGLANG_PYTHON": sys.executable,
        "SGLANG_LAUNCH_MODULE": "tuner.sim",
        "SGLANG_HOST": "127.0.0.1",
        "SGLANG_PORT": str(port),
    }
    env.pop("SGLANG_API_KEY", None)
    proc = subprocess.Popen(
        [str(result.script)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the script execs; the group is the server and its children
    )
    try:
        _wait_ready(proc, _lines(proc), timeout_s=120)
        health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
        assert health.status_code == 200
        # The tuned flags reached the server (values the server may not adjust on its own).
        info = httpx.get(f"http://127.0.0.1:{port}/server_info", timeout=10).json()
        config = yaml.safe_load(result.config.read_text())
        checked = [k for k in _PASSED_THROUGH if k in config]
        assert "mem-fraction-static" in checked
        for key in checked:
            assert info[key.replace("-", "_")] == config[key], key
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
