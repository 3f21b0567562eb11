"""Faults on demand (``--sim-fault-*``), for the launcher's and the benchmark's reliability tests.

- crash after N accepted generate requests: the process dies at once, mid-flight, like a
  scheduler crash (exit code 1, a CUDA error line on stderr);
- never ready: /health stays 503 and the ready line never comes;
- error rate P: that fraction of generate requests is answered with HTTP 500;
- hold port S: on SIGTERM the server exits but an orphaned child (own session, ignoring SIGTERM)
  keeps the listening socket bound for S seconds, like a stuck worker process.
Slow start is ``--sim-load-time``.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import sys
import time

from tuner.sim.startup_log import emit


class Faults:
    def __init__(
        self,
        crash_after: int | None,
        error_rate: float,
        hold_port_s: float,
        never_ready: bool,
        seed: int,
    ) -> None:
        self.crash_after = crash_after
        self.error_rate = error_rate
        self.hold_port_s = hold_port_s
        self.never_ready = never_ready
        self._rng = random.Random(seed)
        self.accepted = 0

    def accept(self) -> None:
        """Count one accepted generate request; crash when the limit is reached."""
        self.accepted += 1
        if self.crash_after is not None and self.accepted >= self.crash_after:
            emit(f"[sim fault] crashing after {self.accepted} accepted requests")
            emit("Scheduler hit an exception: Traceback (most recent call last):")
            sys.stderr.write("RuntimeError: CUDA error: an illegal memory access was encountered\n")
            sys.stderr.flush()
            os._exit(1)

    def should_fail(self) -> bool:
        return self.error_rate > 0 and self._rng.random() < self.error_rate


def exit_holding_port(sock: socket.socket | None, seconds: float) -> None:
    """Exit now, leaving an orphaned child that keeps ``sock`` bound for ``seconds``."""
    sys.stdout.flush()
    sys.stderr.flush()
    if sock is not None and seconds > 0:
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                time.sleep(seconds)
            finally:
                os._exit(0)
    os._exit(0)
