"""Start an inference server in its own process group, wait until it is ready, stop it.

The launcher knows processes, ports, logs and HTTP readiness; it does not know sglang's flags or
log wording. What a failure *means* is decided by a classifier the caller passes in (the engine
adapter's `classify_failure`), so the same launcher drives real sglang and the simulator.

    spec = LaunchSpec(module="tuner.sim", server_args=[...], log_path=Path("server.log"))
    with launch(spec, classify=classify_failure, ready_line=READY_LINE) as server:
        print(server.url, server.server_info)
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from tuner.host import nvml_compute_processes

Classifier = Callable[[str, int | None], tuple[str, str]]

PORT_IN_USE = "port_in_use"
NEVER_READY = "never_ready"


@dataclass(frozen=True)
class LaunchTarget:
    """Which program serves a study's trials: real sglang, or the simulator with its options."""

    module: str = "sglang.launch_server"
    extra_args: tuple[str, ...] = ()
    gpus: str | None = None
    api_key: str | None = None
    ready_timeout_s: float = 900.0
    python: str = sys.executable  # the interpreter that runs `module` (another venv's, say)
    env: tuple[tuple[str, str], ...] = ()  # set in the server's environment, over the tuner's


@dataclass(frozen=True)
class LaunchSpec:
    """Everything needed to start one server."""

    module: str  # "sglang.launch_server" or "tuner.sim"
    server_args: list[str]  # engine flags, without --host/--port/--api-key
    log_path: Path
    host: str = "127.0.0.1"
    port: int | None = None  # None: pick a free port
    extra_args: list[str] = field(default_factory=list)  # e.g. the simulator's --sim-* flags
    gpus: str | None = None  # CUDA_VISIBLE_DEVICES, e.g. "0,1"
    api_key: str | None = None  # passed through the environment variable, never logged
    ready_timeout_s: float = 900.0
    python: str = sys.executable
    env: dict[str, str] = field(default_factory=dict)  # over the tuner's environment

    def argv(self, port: int) -> list[str]:
        argv = [self.python, "-m", self.module, *self.server_args, *self.extra_args]
        argv += ["--host", self.host, "--port", str(port)]
        return argv


class LaunchError(Exception):
    """The server did not come up (or died). `failure_class` is a record.FAILURE_CLASSES."""

    def __init__(
        self, failure_class: str, message: str, log_tail: str = "", elapsed_s: float = 0.0
    ) -> None:
        super().__init__(f"{failure_class}: {message}")
        self.failure_class = failure_class
        self.message = message
        self.log_tail = log_tail
        self.elapsed_s = elapsed_s  # time the failed start cost (0: not measured)


@dataclass
class RunningServer:
    """A server that answered /health and printed its ready line."""

    spec: LaunchSpec
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    launch_s: float
    server_info: dict[str, Any]

    @property
    def url(self) -> str:
        return f"http://{self.spec.host}:{self.port}"

    def alive(self) -> bool:
        return self.process.poll() is None

    def log_text(self) -> str:
        return _read(self.log_path)


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_port_free(host: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not port_is_free(host, port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


def start(
    spec: LaunchSpec,
    classify: Classifier,
    ready_line: str,
    *,
    port_wait_s: float = 30.0,
    poll_s: float = 0.1,
) -> RunningServer:
    """Start the server and block until it is ready; raise LaunchError otherwise.

    The process is always stopped before LaunchError is raised, so a failed start leaves nothing
    behind.
    """
    port = spec.port if spec.port is not None else free_port(spec.host)
    # The previous server (or a stranger) may still hold the port for a moment after exiting.
    if not wait_port_free(spec.host, port, port_wait_s):
        raise LaunchError(PORT_IN_USE, f"port {port} on {spec.host} is still in use")

    spec.log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **spec.env}
    if spec.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = spec.gpus
    argv = spec.argv(port)
    if spec.api_key:
        # sglang reads --api-key only from argv; keep the key out of the log we write.
        argv += ["--api-key", spec.api_key]
    log: IO[bytes] = spec.log_path.open("wb")
    if spec.env:
        log.write(("# env: " + " ".join(f"{k}={v}" for k, v in spec.env.items()) + "\n").encode())
    log.write(("# " + " ".join(spec.argv(port)) + "\n").encode())
    log.flush()
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # own process group: we can kill the whole tree
        preexec_fn=die_with_parent,
    )
    log.close()

    url = f"http://{spec.host}:{port}"
    deadline = started + spec.ready_timeout_s
    try:
        with httpx.Client(timeout=2.0) as client:
            while True:
                code = process.poll()
                if code is not None:
                    text = _read(spec.log_path)
                    failure_class, message = _classify_exit(classify, text, code)
                    raise LaunchError(failure_class, message, _tail(text))
                if ready_line in _read(spec.log_path) and _healthy(client, url):
                    info = _server_info(client, url)
                    return RunningServer(
                        spec=spec,
                        process=process,
                        port=port,
                        log_path=spec.log_path,
                        launch_s=time.monotonic() - started,
                        server_info=info,
                    )
                if time.monotonic() > deadline:
                    raise LaunchError(
                        NEVER_READY,
                        f"not ready after {spec.ready_timeout_s:.0f} s",
                        _tail(_read(spec.log_path)),
                    )
                time.sleep(poll_s)
    except BaseException:
        # Ctrl-C or a failure while waiting: never leave the process behind.
        _stop_process(process, spec.host, port)
        raise


def die_with_parent() -> None:
    """In the child before exec: get SIGTERM if the tuner dies, even by SIGKILL.

    The server runs in its own session so that we can kill its whole group; that also detaches
    it from the terminal, so without this a killed worker would leave its server running.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _classify_exit(classify: Classifier, text: str, code: int) -> tuple[str, str]:
    lowered = text.lower()
    if "address already in use" in lowered or "errno 98" in lowered:
        line = next((ln for ln in text.splitlines() if "already in use" in ln.lower()), "in use")
        return PORT_IN_USE, line.strip()
    return classify(text, code)


def _healthy(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(f"{url}/health").status_code == 200
    except httpx.HTTPError:
        return False


def _server_info(client: httpx.Client, url: str) -> dict[str, Any]:
    # /server_info in sglang 0.5.23; older releases only have /get_server_info.
    for path in ("/server_info", "/get_server_info"):
        try:
            response = client.get(f"{url}{path}")
        except httpx.HTTPError:
            continue
        if response.status_code == 200:
            with contextlib.suppress(ValueError):
                data = response.json()
                if isinstance(data, dict):
                    return data
    return {}


def _stop_process(
    process: subprocess.Popen[bytes], host: str, port: int, grace_s: float = 10.0
) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=grace_s)
    # The leader may be gone while children of its group live on: kill the group regardless.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    # Real sglang is several processes (the launcher, sglang::scheduler, sglang::detokenizer);
    # return only when none of the group is left, so the next trial finds the host as it was.
    wait_group_gone(process.pid, grace_s)


def group_alive(pgid: int) -> bool:
    """Whether any process of the process group `pgid` still runs (zombies, which hold nothing
    and wait only for their new parent to reap them, do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # a member exists but belongs to someone else
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after its ")".
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def wait_group_gone(pgid: int, timeout_s: float) -> bool:
    """Wait until process group `pgid` is empty; whether it emptied within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while group_alive(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def stop(server: RunningServer, port_wait_s: float = 30.0) -> bool:
    """SIGTERM the process group, SIGKILL what is left, wait until the port is free.

    Returns whether the port was released within `port_wait_s`.
    """
    _stop_process(server.process, server.spec.host, server.port)
    freed = wait_port_free(server.spec.host, server.port, port_wait_s)
    _wait_gpu_memory_released(server.spec.gpus)
    return freed


def _wait_gpu_memory_released(gpus: str | None, timeout_s: float = 60.0) -> None:
    """On a GPU host with nvidia-ml-py, wait until the next trial will find the memory free."""
    if gpus is None:
        return
    indices = [int(g) for g in gpus.split(",") if g.strip()]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not nvml_compute_processes(indices):  # none left, or no NVML to ask
            return
        time.sleep(0.5)


@contextlib.contextmanager
def launch(spec: LaunchSpec, classify: Classifier, ready_line: str) -> Iterator[RunningServer]:
    """Context manager: the server is stopped (and its port freed) however the block ends."""
    server = start(spec, classify, ready_line)
    try:
        yield server
    finally:
        stop(server)
