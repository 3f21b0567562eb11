"""A lock file beside a storage file, and the one-line errors for storage paths that are read-only.

Processes started together on one study (two `tuner optimize`, a worker and its supervisor) take
it to create the study, recover dead trials and take a queued trial, one at a time: SQLite's
table creation and its trial queue are not safe against a second process doing the same at the
same moment. The lock is `flock` on `<storage file>.tuner-lock` (not `<file>.lock`, which the
journal file backend uses itself); the kernel releases it when its holder dies, so a killed
tuner never leaves it held. Server databases (PostgreSQL) have no file to lock and rely on
their own transactions.

    with StudyLock(lock_path(None, "qwen", Path("studies"))):
        study = optuna.create_study(...)
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Callable
from pathlib import Path

from tuner.errors import UserError

LOCK_SUFFIX = ".tuner-lock"
WAIT_LIMIT_S = 120.0  # the lock is held for milliseconds; minutes mean a stuck process
_READ_ONLY_ERRNOS = (errno.EROFS, errno.EACCES, errno.EPERM)


def read_only_error(option: str, path: Path, exc: OSError, fix: str) -> UserError:
    """`--studies-dir x is read-only (Read-only file system): <fix>`, or the OS error as is."""
    if exc.errno in _READ_ONLY_ERRNOS:
        return UserError(f"{option} {path} is read-only ({exc.strerror}): {fix}")
    return UserError(f"{option} {path}: {exc.strerror or exc}: {fix}")


def ensure_writable_dir(path: Path, option: str, fix: str) -> None:
    """Create `path` if needed and check that a file can be written in it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".tuner-write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise read_only_error(option, path, exc, fix) from None


def ensure_writable_file(path: Path, option: str, fix: str) -> None:
    """An existing storage file the tuner will write must be writable."""
    if path.exists() and not os.access(path, os.W_OK):
        raise read_only_error(option, path, PermissionError(errno.EACCES, "not writable"), fix)


class StudyLock:
    """`with StudyLock(path):` holds an exclusive flock on `path`; `path=None` holds nothing.

    Waits at most `limit_s`, telling `on_wait` once after a second, then raises a UserError.
    """

    def __init__(
        self,
        path: Path | None,
        on_wait: Callable[[str], None] | None = None,
        limit_s: float = WAIT_LIMIT_S,
    ) -> None:
        self.path = path
        self.on_wait = on_wait
        self.limit_s = limit_s
        self._fd: int | None = None

    def __enter__(self) -> StudyLock:
        if self.path is None:
            return self
        import fcntl

        fd = _open_lock_file(self.path)
        started = time.monotonic()
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                waited = time.monotonic() - started
                if waited > self.limit_s:
                    os.close(fd)
                    raise UserError(
                        f"gave up after {self.limit_s:.0f} s waiting for the lock {self.path}, "
                        "held by another tuner process on this study: stop that process or "
                        "run the same command again"
                    ) from None
                if waited > 1.0 and not told and self.on_wait is not None:
                    told = True
                    self.on_wait(
                        f"waiting for the lock {self.path} (another tuner process is creating "
                        f"the study or taking a trial; gives up after {self.limit_s:.0f} s)"
                    )
                time.sleep(0.02)
        self._fd = fd
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._fd is not None:
            import fcntl

            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def _open_lock_file(path: Path) -> int:
    fix = "give a writable directory with --studies-dir, or a storage file in one with --storage"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise read_only_error("storage directory", path.parent, exc, fix) from None
