"""Faults on demand, loading, and a prompt, clean shutdown."""

from __future__ import annotations

import signal
import socket
import time

import httpx
import pytest
from support.harness import SimProcess

GEN = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}


def port_bound(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def test_health_is_503_while_loading():
    sim = SimProcess.launch(["--sim-load-time", "2.0"])
    try:
        deadline = time.monotonic() + 5
        status = None
        while time.monotonic() < deadline and status is None:
            try:
                status = httpx.get(sim.url + "/health").status_code
            except httpx.TransportError:
                time.sleep(0.05)
        assert status == 503
        assert httpx.post(sim.url + "/generate", json=GEN).status_code == 503
        assert "fired up" not in sim.log()
        sim.wait_ready(10)
        assert httpx.get(sim.url + "/health").status_code == 200
        assert "The server is fired up and ready to roll!" in sim.log()
    finally:
        sim.stop()


def test_never_ready():
    sim = SimProcess.launch(["--sim-fault-never-ready", "--sim-load-time", "0"])
    try:
        with pytest.raises(TimeoutError):
            sim.wait_ready(1.5)
        assert httpx.get(sim.url + "/health").status_code == 503
        assert "max_total_num_tokens=" in sim.log()
        assert "ready to roll" not in sim.log()
    finally:
        sim.stop()


def test_crash_after_n_requests():
    with SimProcess.start(["--sim-fault-crash-after", "3", "--sim-time-scale", "100"]) as sim:
        for _ in range(2):
            assert httpx.post(sim.url + "/generate", json=GEN).status_code == 200
        with pytest.raises(httpx.TransportError):
            httpx.post(sim.url + "/generate", json=GEN)
        assert sim.proc.wait(5) != 0
        assert "CUDA error" in sim.log()


def test_error_rate():
    with SimProcess.start(
        ["--sim-fault-error-rate", "0.5", "--sim-time-scale", "100", "--sim-seed", "3"]
    ) as sim:
        codes = [httpx.post(sim.url + "/generate", json=GEN).status_code for _ in range(40)]
        assert set(codes) == {200, 500}
        assert 8 <= codes.count(500) <= 32
        errors = [r for r in httpx.get(sim.url + "/sim/requests").json()["requests"] if r["error"]]
        assert len(errors) == codes.count(500)


def test_sigterm_exits_promptly_and_frees_the_port():
    sim = SimProcess.start(["--sim-time-scale", "10"])
    try:
        # a long stream in flight must not delay the shutdown
        with httpx.stream(
            "POST",
            sim.url + "/generate",
            json={
                "input_ids": [1] * 10,
                "stream": True,
                "sampling_params": {"max_new_tokens": 100000, "ignore_eos": True},
            },
        ) as resp:
            next(resp.iter_lines())
            t0 = time.monotonic()
            sim.proc.send_signal(signal.SIGTERM)
            code = sim.proc.wait(5)
        assert time.monotonic() - t0 < 2.0
        assert code in (0, -signal.SIGTERM, 143)
        assert not port_bound(sim.port)
    finally:
        sim.stop()


def test_hold_port_after_sigterm():
    sim = SimProcess.start(["--sim-fault-hold-port", "2.0", "--sim-time-scale", "10"])
    try:
        sim.proc.send_signal(signal.SIGTERM)
        assert sim.proc.wait(5) == 0
        assert port_bound(sim.port)  # an orphan keeps it
        deadline = time.monotonic() + 8
        while port_bound(sim.port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not port_bound(sim.port)
    finally:
        sim.stop()


def test_port_in_use_fails():
    with SimProcess.start(["--sim-time-scale", "10"]) as first:
        second = SimProcess.launch(["--sim-time-scale", "10"], port=first.port)
        assert second.proc.wait(10) != 0
        assert "address already in use" in second.log()
        second.stop()
