"""The launcher against the simulator: readiness, every start-up failure class, clean stops."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from pathlib import Path

import httpx
import pytest

from tuner.engines.sglang import READY_LINE, classify_failure
from tuner.launcher import LaunchError, LaunchSpec, free_port, port_is_free, start, stop

SIM = ["--sim-time-scale", "100", "--sim-load-time", "0.2"]


def _spec(tmp_path: Path, args: list[str], extra: list[str] | None = None, **kw) -> LaunchSpec:
    return LaunchSpec(
        module="tuner.sim",
        server_args=["--model-path", "Qwen/Qwen3.6-27B", *args],
        extra_args=[*SIM, *(extra or [])],
        log_path=tmp_path / "server.log",
        ready_timeout_s=kw.pop("ready_timeout_s", 30.0),
        **kw,
    )


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie still answers kill(0); it is reaped by Popen.wait in stop()
    return False


def test_start_reads_capacity_and_stop_frees_port(tmp_path):
    server = start(_spec(tmp_path, []), classify_failure, READY_LINE)
    try:
        assert server.alive()
        assert httpx.get(f"{server.url}/health").status_code == 200
        assert server.server_info["max_total_num_tokens"] > 0
        assert READY_LINE in server.log_text()
    finally:
        assert stop(server)
    assert port_is_free("127.0.0.1", server.port)
    assert _gone(server.process.pid)


@pytest.mark.parametrize(
    ("args", "failure_class"),
    [
        (["--no-such-flag", "1"], "bad_argument"),
        (["--mem-fraction-static", "0.55"], "not_enough_memory"),
        (["--mem-fraction-static", "0.995", "--disable-cuda-graph"], "out_of_memory"),
        (["--mem-fraction-static", "0.995"], "cuda_graph"),
        (["--speculative-algorithm", "MTP"], "startup_rule"),
    ],
)
def test_startup_failures_are_classified(tmp_path, args, failure_class):
    with pytest.raises(LaunchError) as info:
        start(_spec(tmp_path, args), classify_failure, READY_LINE)
    assert info.value.failure_class == failure_class, info.value.message
    assert info.value.message


def test_a_crash_with_an_unknown_message_is_exited_before_ready(tmp_path):
    spec = LaunchSpec(
        module="tuner.no_such_module",
        server_args=[],
        log_path=tmp_path / "server.log",
        ready_timeout_s=10,
    )
    with pytest.raises(LaunchError) as info:
        start(spec, classify_failure, READY_LINE)
    assert info.value.failure_class == "exited_before_ready"


def test_never_ready_times_out_and_leaves_nothing(tmp_path):
    spec = _spec(tmp_path, [], ["--sim-fault-never-ready"], ready_timeout_s=2.0)
    started = time.monotonic()
    with pytest.raises(LaunchError) as info:
        start(spec, classify_failure, READY_LINE)
    assert info.value.failure_class == "never_ready"
    assert time.monotonic() - started < 20
    out = os.popen("ps -eo args").read()
    assert str(tmp_path) not in out


def test_port_in_use_is_classified(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        spec = _spec(tmp_path, [], port=port)
        with pytest.raises(LaunchError) as info:
            start(spec, classify_failure, READY_LINE, port_wait_s=0.5)
    assert info.value.failure_class == "port_in_use"


def test_stop_waits_for_a_port_held_after_exit(tmp_path):
    server = start(
        _spec(tmp_path, [], ["--sim-fault-hold-port", "1.5"]), classify_failure, READY_LINE
    )
    assert stop(server, port_wait_s=20)
    assert port_is_free("127.0.0.1", server.port)


def test_free_port_is_bindable():
    port = free_port()
    assert port_is_free("127.0.0.1", port)


def test_server_dies_when_its_parent_is_killed(tmp_path):
    """A worker killed with SIGKILL must not leave its server behind (PR_SET_PDEATHSIG)."""
    script = tmp_path / "parent.py"
    pidfile = tmp_path / "server.pid"
    script.write_text(
        "import sys, time\n"
        "from pathlib import Path\n"
        "from tuner.engines.sglang import READY_LINE, classify_failure\n"
        "from tuner.launcher import LaunchSpec, start\n"
        f"spec = LaunchSpec(module='tuner.sim', server_args=[], extra_args={SIM!r},\n"
        f"                  log_path=Path({str(tmp_path / 'child.log')!r}))\n"
        "server = start(spec, classify_failure, READY_LINE)\n"
        f"Path({str(pidfile)!r}).write_text(str(server.process.pid))\n"
        "time.sleep(60)\n"
    )
    import subprocess

    parent = subprocess.Popen([sys.executable, str(script)])
    try:
        deadline = time.monotonic() + 30
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        server_pid = int(pidfile.read_text())
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.kill(server_pid, 0)
            except ProcessLookupError:
                break
            # reparented to init (or a subreaper): a zombie is reaped there, so poll its state
            stat = Path(f"/proc/{server_pid}/stat")
            if stat.exists() and stat.read_text().split()[2] == "Z":
                break
            time.sleep(0.1)
        else:
            os.kill(server_pid, 9)
            pytest.fail("server outlived its killed parent")
    finally:
        if parent.poll() is None:
            parent.kill()


def test_stopping_leaves_no_process_of_the_group(tmp_path):
    """Real sglang is a launcher and its scheduler / detokenizer children: stop returns only
    when the whole group is gone, a child that ignores SIGTERM and outlives its parent too."""
    import subprocess

    from tuner.launcher import _stop_process, group_alive

    child = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    leader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]);"
            " time.sleep(60)",
        ],
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 10
        members = 0
        while members < 2 and time.monotonic() < deadline:
            members = sum(
                1
                for stat in Path("/proc").glob("[0-9]*/stat")
                if stat.exists()
                and stat.read_text().rsplit(")", 1)[1].split()[2] == str(leader.pid)
            )
            time.sleep(0.05)
        assert members == 2
        _stop_process(leader, "127.0.0.1", 0, grace_s=5.0)
        assert not group_alive(leader.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader.pid, 9)
