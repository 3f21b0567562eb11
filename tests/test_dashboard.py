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
from support.chromium_helper import launch
from support.ctrl_c import sigint_as_in_a_terminal
from support.fixture_studies import sqlite_study

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


def _dashboard_json(app, path: str) -> dict:
    """One GET on optuna-dashboard's own WSGI app (the bottle app `tuner dashboard` serves)."""
    import io
    import json
    from wsgiref.util import setup_testing_defaults

    environ: dict = {"PATH_INFO": path, "REQUEST_METHOD": "GET", "wsgi.input": io.BytesIO()}
    setup_testing_defaults(environ)
    status: list[str] = []
    body = b"".join(app(environ, lambda s, _headers, _exc=None: status.append(s)))
    assert status[0].startswith("200"), (path, status, body[:300])
    return json.loads(body)


def _dashboard_front(trials: list[dict]) -> set[int]:
    """The Pareto front optuna-dashboard 0.21's front-end draws (its bundle.js): COMPLETE trials
    with values, split by `constraints.every(c => c <= 0)`, non-dominated among the feasible."""
    feasible = [
        t
        for t in trials
        if t["state"] == "Complete" and t.get("values") and all(c <= 0 for c in t["constraints"])
    ]

    def dominates(a: dict, b: dict) -> bool:
        (ta, la), (tb, lb) = a["values"], b["values"]  # maximize throughput, minimize latency
        return ta >= tb and la <= lb and (ta, la) != (tb, lb)

    return {t["number"] for t in feasible if not any(dominates(o, t) for o in feasible)}


def test_optuna_dashboard_api_marks_slo_violations_and_pruned_trials_infeasible(tmp_path):
    from pathlib import Path

    import optuna_dashboard
    from optuna_dashboard import wsgi
    from support.fixture_studies import PARETO

    from tuner.results.report import analyse
    from tuner.results.study_records import load_records

    sqlite_study(tmp_path, "qwen-mtp")
    storage = open_storage(None, "qwen-mtp", tmp_path)
    app = wsgi(storage)
    studies = _dashboard_json(app, "/api/studies")["study_summaries"]
    study_id = next(s["study_id"] for s in studies if s["study_name"] == "qwen-mtp")
    detail = _dashboard_json(app, f"/api/studies/{study_id}")
    trials = {t["number"]: t for t in detail["trials"]}

    # Trial 1 served the benchmark (COMPLETE) at the lowest TPOT of all but broke
    # p99_ttft_ms <= 2000; trial 4 is PRUNED after a failed launch; trial 6 was stopped
    # (PRUNED) with p99 TTFT 2600 ms. The dashboard must see each as infeasible.
    assert trials[1]["state"] == "Complete"
    for number in (1, 4, 6):
        assert any(c > 0 for c in trials[number]["constraints"]), trials[number]
    # The rule _dashboard_front mirrors, as the dashboard's front-end bundle writes it.
    bundle = Path(optuna_dashboard.__file__).parent / "public" / "bundle.js"
    assert "constraints.every(e=>e<=0)" in bundle.read_text(encoding="utf-8")
    front = _dashboard_front(list(trials.values()))
    assert 1 not in front and 4 not in front and 6 not in front
    assert front == set(PARETO)
    # ... the same front as the report's.
    meta, records = load_records(storage, "qwen-mtp")
    assert set(analyse(meta, records).front) == front


def test_set_constraints_writes_the_list_form_beside_the_per_key_one():
    from tuner.results import record

    study = optuna.create_study(directions=["maximize", "minimize"])
    trial = study.ask()
    record.set_constraints(trial, {"launch": 0.0, "slo:p99_ttft_ms": 0.25})
    study.tell(trial, [1.0, 2.0])
    frozen = study.trials[0]
    assert frozen.system_attrs[record.LIST_CONSTRAINTS] == [0.0, 0.25]
    assert frozen.user_attrs[record.CONSTRAINTS] == {"launch": 0.0, "slo:p99_ttft_ms": 0.25}
    named = record.named_constraints(frozen.constraints)
    assert named == {"launch": 0.0, "slo:p99_ttft_ms": 0.25}
    assert not record.feasible(frozen.constraints)
