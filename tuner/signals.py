"""SIGTERM and SIGHUP stop a study as Ctrl-C does: the server is stopped, the trial recorded.

Slurm, Kubernetes and systemd stop a job with SIGTERM, a closed terminal sends SIGHUP. Each
raises KeyboardInterrupt in the main thread, where the study loop already turns Ctrl-C into a
failed trial marked interrupted (queued again by the next run) and exit code 130. Only the first
signal interrupts: the ones that follow (a second Ctrl-C, SIGTERM from a supervisor after the
terminal's SIGINT) are ignored, so they cannot cut the cleanup short. A signal the tuner was
started with ignored (SIGHUP under `nohup`) stays ignored.

A signal never interrupts a storage call: an exception raised inside Optuna's journal file lock
(between its rename and its unlink) turns into a FileNotFoundError, and one raised while a
storage replays its log leaves it half applied. While the main thread runs inside `deferred()`
(every call of the storage wrapper tuner/study/storage.py puts around a study's storage, and the
tuner's own steps that must not be split, such as asking for a trial and writing its owner), the
signal is only noted; the KeyboardInterrupt is raised when the outermost `deferred()` block ends.

A signal that arrives while an asyncio event loop runs in the main thread (the benchmark client,
tuner/bench/runner.py) is raised from a callback of that loop, not wherever the thread happens
to be: raised inside the loop's own bookkeeping (as `run_forever` leaves), it can leave the loop
marked running. `run_async` (asyncio.run for the tuner) also keeps the signal out of the code
around the loop: raised while `asyncio.run` creates the loop, or while it closes it (inside
`loop.close()`, half of the self-pipe closed), it leaves a loop that is closed again at garbage
collection, which prints a traceback from `BaseEventLoop.__del__` after the tuner's
"interrupted" line. A signal there is raised when `asyncio.run` returns, or by the coroutine's
first step when it came before the loop ran it.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _State:
    def __init__(self) -> None:
        self.fired: str | None = None  # the name of the first stop signal
        self.depth = 0  # nested deferred() blocks of the main thread
        self.pending = False  # a signal arrived inside them


_state = _State()


def stop_like_ctrl_c(signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> None:
    """From now on, the first of `signals` raises KeyboardInterrupt (at the end of the
    `deferred()` block the main thread is in, if any); later ones are ignored."""
    global _state
    _state = state = _State()

    def handler(signum: int, _frame: FrameType | None) -> None:
        if state.fired is not None:
            return
        state.fired = signal.Signals(signum).name
        loop = _running_loop()
        if loop is not None:
            # Raised by the loop between its callbacks: it leaves run_forever cleanly, and
            # asyncio.run closes it. A loop that stops first runs it as it shuts down.
            loop.call_soon_threadsafe(_interrupt, state.fired)
        if state.depth:
            state.pending = True  # and raised at the end of the block, if the loop did not
        elif loop is None:
            raise KeyboardInterrupt(state.fired)

    for sig in signals:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, handler)


def _interrupt(name: str) -> None:
    raise KeyboardInterrupt(name)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return None if loop.is_closed() else loop


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, interrupted by a stop signal only while its loop runs `main`: one
    that arrives while the loop is made or closed is raised when `asyncio.run` returns (the
    module docstring), or before `main` starts when it came before the loop ran."""

    async def guarded() -> T:
        if _state.pending:
            main.close()
            raise KeyboardInterrupt(_state.fired)
        return await main

    with deferred():
        return asyncio.run(guarded())


def stop_requested() -> str | None:
    """The name of the stop signal received, or None."""
    return _state.fired


@contextmanager
def deferred() -> Iterator[None]:
    """A stop signal that arrives inside the block raises KeyboardInterrupt when the outermost
    block ends (even when the block raised: the interruption is what the caller must see).
    Other threads are never interrupted by signals, and pass through."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    state = _state
    state.depth += 1
    try:
        yield
    finally:
        state.depth -= 1
        if not state.depth and state.pending:
            state.pending = False
            raise KeyboardInterrupt(state.fired)
