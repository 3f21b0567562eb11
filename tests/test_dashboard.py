"""tuner dashboard: optuna-dashboard on the study, seen in a real browser, stopped by Ctrl-C."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import optuna
import pytest
from chromium_helper import launch
from ctrl_c import sigint_as_in_a_terminal
from fixture_studies import sqlite_study

from tuner.errors import UserError
from tuner.results.storage import open_storage

optuna.logging.set_verbosity(optuna.logging.WARNING)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    """Nobody listens, and a new server (SO_REUSEADDR, as HTTP servers set it) can bind: the
    browser's closed connections may leave TIME_WAIT entries, which do not hold the port."""
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            return False
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return False
        return True


def _read_url(proc: subprocess.Popen[str], deadline_s: float = 60.0) -> str:
    # The command prints the URL once the socket listens; anything before it is a note.
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if line.startswith("optuna-dashboard: "):
            return line.split(": ", 1)[1].strip()
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"no URL printed; stderr: {proc.stderr.read()}")  # type: ignore[union-attr]


@pytest.mark.browser
def test_dashboard_shows_the_study_and_stops_cleanly_on_ctrl_c(tmp_path):
    from playwright.sync_api import sync_playwright

    sqlite_study(tmp_path / "studies", "qwen-mtp")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tuner.cli",
            "dashboard",
            "--study",
            "qwen-mtp",
            "--port",
            str(port),
            "--studies-dir",
            str(tmp_path / "studies"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=sigint_as_in_a_terminal,
    )
    try:
        url = _read_url(proc)
        assert url.startswith(f"http://127.0.0.1:{port}/dashboard/studies/")
        with sync_playwright() as p:
            browser = launch(p)
            try:
                page = browser.new_page()
                page.goto(url)
                page.get_by_text("qwen-mtp").first.wait_for(timeout=30_000)
                page.goto(f"http://127.0.0.1:{port}/dashboard/")
                page.get_by_text("qwen-mtp").first.wait_for(timeout=30_000)
            finally:
                browser.close()

        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "dashboard stopped" in out
    assert port_is_free(port)


def test_busy_port_is_a_user_error(tmp_path):
    from tuner.results.dashboard import serve_dashboard

    sqlite_study(tmp_path, "s", only=[0])
    storage = open_storage(None, "s", tmp_path)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        with pytest.raises(UserError, match=f"port {busy} on 127.0.0.1 is in use"):
            serve_dashboard(storage, port=busy)
