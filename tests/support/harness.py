"""Start and stop a simulator process from tests and benchmarks (no tuner code involved).

    with SimProcess.start(["--sim-time-scale", "50"]) as sim:
        httpx.get(sim.url + "/server_info")

The process runs in its own process group; ``stop`` sends SIGTERM, then SIGKILL to the group.
On Linux the server also gets SIGTERM when the thread that started it exits (PR_SET_PDEATHSIG),
so start it from a thread that outlives it (pytest's main thread does).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the parent dies (Linux), so a killed test run
    leaves no orphaned server behind. Elsewhere a no-op."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    """A port nothing listens on right now (bind port 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SimProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    _log_file: IO[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        self._log_file.flush()
        return self.log_path.read_text(errors="replace")

    @classmethod
    def launch(cls, argv: list[str], port: int | None = None) -> SimProcess:
        """Start without waiting for readiness."""
        port = port or free_port()
        fd, name = tempfile.mkstemp(prefix="sim-", suffix=".log")
        os.close(fd)
        log_file = open(name, "wb")  # noqa: SIM115 - closed in stop()
        proc = subprocess.Popen(
            [sys.executable, "-m", "tuner.sim", "--port", str(port), *argv],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        return cls(proc, port, Path(name), log_file)

    @classmethod
    def start(cls, argv: list[str], timeout: float = 20.0) -> SimProcess:
        """Start and wait until /health answers 200; raise with the log if it does not."""
        sim = cls.launch(argv)
        try:
            sim.wait_ready(timeout)
        except Exception:
            sim.stop()
            raise
        return sim

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"simulator exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.05)
        raise TimeoutError(f"simulator not ready after {timeout} s:\n{self.log()}")

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL the process group; returns the exit code."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self._log_file.close()
        return self.proc.returncode

    def __enter__(self) -> SimProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        self.log_path.unlink(missing_ok=True)
