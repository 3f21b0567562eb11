"""SIGTERM and SIGHUP stop a study as Ctrl-C does: the server is stopped, the trial recorded.

Slurm, Kubernetes and systemd stop a job with SIGTERM, a closed terminal sends SIGHUP. Each
raises KeyboardInterrupt in the main thread, where the study loop already turns Ctrl-C into a
failed trial marked interrupted (queued again by the next run) and exit code 130. Only the first
signal interrupts: the ones that follow (a second Ctrl-C, SIGTERM from a supervisor after the
terminal's SIGINT) are ignored, so they cannot cut the cleanup short. A signal the tuner was
started with ignored (SIGHUP under `nohup`) stays ignored.
"""

from __future__ import annotations

import signal
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def stop_like_ctrl_c(signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> None:
    """From now on, the first of `signals` raises KeyboardInterrupt; later ones are ignored."""
    fired = False

    def handler(signum: int, _frame: FrameType | None) -> None:
        nonlocal fired
        if fired:
            return
        fired = True
        raise KeyboardInterrupt(signal.Signals(signum).name)

    for sig in signals:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, handler)
