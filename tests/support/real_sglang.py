"""Real sglang 0.5.23 on this CPU, for the `real_sglang` tests and the benchmarks.

    python = venv_python()                  # None until tools/install_real_sglang.sh has run
    model = build_tiny_model(python, tmp)   # a 1.8 MB Llama directory (tests/support/tiny_llama.py)
    with RealServer.start(python, model, ["--max-running-requests", "8"], log) as server:
        httpx.post(server.url + "/generate", json={...})

The environment lives outside the repository (tools/install_real_sglang.sh); CPU mode and its
thread settings are environment variables (CPU_ENV, docs/real-sglang-cpu.md).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[2]
TINY_LLAMA = Path(__file__).resolve().parent / "tiny_llama.py"
DEFAULT_VENV = Path.home() / ".cache" / "sglang-tuner" / "real-sglang"
STAMP = ".sglang-tuner-stamp"

INSTALL_HINT = (
    "real sglang is not installed: run tools/install_real_sglang.sh (about 2 minutes, 2.7 GB "
    "under ~/.cache/sglang-tuner/real-sglang or $TUNER_REAL_SGLANG_VENV), or deselect these "
    'tests with -m "not real_sglang"'
)

# CPU mode is an environment variable in sglang 0.5.23; OpenMP is pinned to one core so that a
# busy neighbour does not slow every step 30-fold, and `--max-total-tokens` must then be given.
CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1", "SGLANG_CPU_OMP_THREADS_BIND": "0"}
# Fixed on every CPU launch: the KV pool (sglang cannot size it from host memory with the
# binding above), the idle scheduler asleep instead of spinning a core.
CPU_FLAGS = ["--device", "cpu", "--sleep-on-idle", "--max-total-tokens", "8192"]


def venv_dir() -> Path:
    return Path(os.environ.get("TUNER_REAL_SGLANG_VENV") or DEFAULT_VENV)


def venv_python() -> Path | None:
    """The real-sglang environment's Python when the install script finished there, else None."""
    venv = venv_dir()
    python = venv / "bin" / "python"
    return python if (venv / STAMP).is_file() and python.is_file() else None


def build_tiny_model(python: Path, out: Path) -> Path:
    """Build the tiny Llama into `out` (once: an existing config.json is reused)."""
    if not (out / "config.json").is_file():
        subprocess.run(
            [str(python), str(TINY_LLAMA), str(out)],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return out


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RealServer:
    """`python -m sglang.launch_server` in its own process group, logging to a file."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    _log: IO[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @classmethod
    @contextlib.contextmanager
    def start(
        cls,
        python: Path,
        model: Path,
        flags: list[str],
        log_path: Path,
        timeout_s: float = 180.0,
    ) -> Iterator[RealServer]:
        port = free_port()
        log = log_path.open("wb")
        argv = [str(python), "-m", "sglang.launch_server", "--model-path", str(model)]
        argv += [*CPU_FLAGS, *flags, "--host", "127.0.0.1", "--port", str(port)]
        process = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **CPU_ENV},
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        server = cls(process, port, log_path, log)
        try:
            server._wait_ready(timeout_s)
            yield server
        finally:
            server.stop()

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"real sglang exited ({self.process.returncode}):\n{self.log()}")
            if "The server is fired up and ready to roll!" in self.log():
                with (
                    contextlib.suppress(urllib.error.URLError, OSError),
                    urllib.request.urlopen(self.url + "/health", timeout=2) as response,
                ):
                    if response.status == 200:
                        return
            time.sleep(0.2)
        raise RuntimeError(f"real sglang not ready after {timeout_s:.0f} s:\n{self.log()[-3000:]}")

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        self._log.close()


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout_s: float) -> bool:
    """True once `url`/health answers 200; False when `process` exits or `timeout_s` passes
    (a server started by a script the test runs, not by RealServer)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process.poll() is None:
        with (
            contextlib.suppress(urllib.error.URLError, OSError),
            urllib.request.urlopen(url + "/health", timeout=2) as response,
        ):
            if response.status == 200:
                return True
        time.sleep(0.5)
    return False


def group_processes(pgid: int) -> list[str]:
    """Names of the live (not zombie) processes of process group `pgid`."""
    names = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            text = stat.read_text()
            comm = text[text.index("(") + 1 : text.rindex(")")]
            fields = text.rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                names.append(comm)
    return names
