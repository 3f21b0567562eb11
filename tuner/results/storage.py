"""Open the Optuna storage that holds a study, from a study name or a `--storage` value.

Every command that reads or writes a study goes through `open_storage`, so the rules for what a
`--storage` value may be live in one place:

    None                      -> studies/<study>.db (SQLite), or studies/<study>.journal when only
                                 the journal exists
    "sqlite:///x.db", "postgresql://..." or any other SQLAlchemy URL -> RDBStorage
    "x.journal" / "x.log"     -> a journal file (JournalFileBackend), the one for parallel workers
    "x.db" / "x.sqlite"       -> the SQLite file at that path

Example:
    >>> storage = open_storage(None, "qwen-mtp")  # doctest: +SKIP
    >>> optuna.load_study(study_name="qwen-mtp", storage=storage)  # doctest: +SKIP
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optuna.storages import BaseStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend, JournalStorage

from tuner.errors import UserError

DEFAULT_STUDIES_DIR = Path("studies")
JOURNAL_SUFFIXES = (".journal", ".log")
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")
# What `tuner studies` and the "studies found" hints look for in studies/. Not *.log: per-trial
# server logs may sit there too.
SCANNED_SUFFIXES = (".db", ".journal")

# A reader (report, dashboard) may open the file while `tuner optimize` writes to it: wait for
# SQLite's lock instead of failing at once.
_SQLITE_BUSY_TIMEOUT_S = 30


@dataclass(frozen=True)
class StudyLocation:
    """A study name together with the storage that holds it."""

    study_name: str
    storage: BaseStorage
    description: str  # where it lives, for messages: a path or a URL with its password hidden


def open_storage(
    storage: str | None,
    study_name: str,
    studies_dir: Path = DEFAULT_STUDIES_DIR,
    *,
    create: bool = False,
    heartbeat_s: int | None = None,
) -> BaseStorage:
    """Open the storage for `study_name` (see the module docstring for what `storage` may be).

    Readers (the default): a missing file, or a storage without that study, is a UserError that
    lists the studies found. `create=True` is for the writer: the storage may be new (a new
    SQLite file under `studies_dir` when `storage` is None) and need not hold the study yet.
    """
    opened = _open(storage, study_name, studies_dir, must_exist=not create, heartbeat_s=heartbeat_s)
    if not create:
        names = _study_names(opened)
        if study_name not in names:
            where = describe_storage(storage, study_name, studies_dir)
            raise UserError(
                f"no study named {study_name!r} in {where}; "
                + _found_hint(storage, names, studies_dir)
            )
    return opened


def open_existing_storage(storage: str, studies_dir: Path = DEFAULT_STUDIES_DIR) -> BaseStorage:
    """Open a `--storage` value that must already exist, whatever studies it holds."""
    return _open(storage, "", studies_dir, must_exist=True)


def locate_study(
    storage: str | None,
    study_name: str | None,
    studies_dir: Path = DEFAULT_STUDIES_DIR,
) -> tuple[StudyLocation, str | None]:
    """Resolve an optional `--study` to an existing study and open its storage.

    Without a name: the only study in the storage, or, with no `--storage`, the study in the most
    recently written file of `studies_dir`. Returns the location and a note to print when the
    name was guessed (None when it was given).
    """
    if study_name is not None:
        opened = open_storage(storage, study_name, studies_dir)
        return StudyLocation(
            study_name, opened, describe_storage(storage, study_name, studies_dir)
        ), None

    if storage is not None:
        opened = open_existing_storage(storage, studies_dir)
        names = _study_names(opened)
        if len(names) == 1:
            return StudyLocation(names[0], opened, describe_storage(storage, "", studies_dir)), None
        if not names:
            raise UserError(f"no studies in {describe_storage(storage, '', studies_dir)}")
        raise UserError(
            f"{describe_storage(storage, '', studies_dir)} holds several studies "
            f"({', '.join(names)}); pass --study NAME"
        )

    files = study_files(studies_dir)
    if not files:
        raise UserError(
            f"no studies in {studies_dir}/ (no *.db or *.journal file); run `tuner optimize` "
            "first or pass --storage URL"
        )
    newest = max(files, key=lambda p: p.stat().st_mtime)
    opened = storage_for_file(newest)
    names = _study_names(opened)
    if not names:
        raise UserError(f"{newest} holds no study; pass --study NAME or --storage URL")
    # The file is named after its study; fall back to its only study when it is not.
    name = newest.stem if newest.stem in names else names[0]
    note = None
    if len(files) > 1 or len(names) > 1:
        note = f"using study {name!r} ({newest}, the most recently written); pass --study to choose"
    return StudyLocation(name, opened, str(newest)), note


def study_files(studies_dir: Path = DEFAULT_STUDIES_DIR) -> list[Path]:
    """The storage files directly under `studies_dir`, sorted by name."""
    if not studies_dir.is_dir():
        return []
    return sorted(p for p in studies_dir.iterdir() if p.is_file() and p.suffix in SCANNED_SUFFIXES)


def storage_for_file(path: Path) -> BaseStorage:
    """Open an existing storage file: SQLite for .db/.sqlite, journal for .journal/.log."""
    if path.suffix in JOURNAL_SUFFIXES:
        return _journal(path)
    return _rdb(f"sqlite:///{path}", shown=str(path))


def storage_file(storage: str | None, study_name: str, studies_dir: Path) -> Path | None:
    """The file a `--storage` value (None: the default) keeps the study in; None for a server
    database or an in-memory one."""
    if storage is None:
        return _default_file(study_name, studies_dir)
    if "://" in storage:
        if not storage.startswith("sqlite:"):
            return None
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            database = make_url(storage).database
        except ArgumentError:
            return None
        return Path(database) if database and database != ":memory:" else None
    return Path(storage)


def describe_storage(storage: str | None, study_name: str, studies_dir: Path) -> str:
    """Where a study lives, for messages; a URL's password is never shown."""
    if storage is None:
        return str(_default_file(study_name, studies_dir))
    if "://" in storage:
        return _hide_password(storage)
    return storage


def _open(
    storage: str | None,
    study_name: str,
    studies_dir: Path,
    *,
    must_exist: bool,
    heartbeat_s: int | None = None,
):
    if storage is None:
        path = _default_file(study_name, studies_dir)
        if not path.exists():
            if must_exist:
                raise UserError(
                    f"no study named {study_name!r}: {path} does not exist; "
                    + _found_hint(None, [], studies_dir)
                )
            path.parent.mkdir(parents=True, exist_ok=True)
        return storage_for_file(path)

    if "://" in storage:
        if storage.startswith("sqlite:"):
            _check_sqlite_file(storage, must_exist=must_exist)
        server_db = not storage.startswith("sqlite:")
        return _rdb(
            storage, shown=_hide_password(storage), heartbeat_s=heartbeat_s if server_db else None
        )

    path = Path(storage)
    if path.suffix in JOURNAL_SUFFIXES or path.suffix in SQLITE_SUFFIXES:
        if must_exist and not path.exists():
            raise UserError(f"storage file {path} does not exist")
        if not must_exist:
            path.parent.mkdir(parents=True, exist_ok=True)
        return storage_for_file(path)

    raise UserError(
        f"--storage {storage!r} is not a storage: give an Optuna URL (sqlite:///studies/x.db, "
        "postgresql://user@host/db), a journal file (*.journal or *.log) or a SQLite file (*.db)"
    )


def _default_file(study_name: str, studies_dir: Path) -> Path:
    # A study run with parallel workers lives in a journal; read it when there is no SQLite file.
    sqlite_file = studies_dir / f"{study_name}.db"
    journal_file = studies_dir / f"{study_name}.journal"
    if not sqlite_file.exists() and journal_file.exists():
        return journal_file
    return sqlite_file


def _check_sqlite_file(url: str, *, must_exist: bool) -> None:
    # SQLAlchemy creates an empty database file for a mistyped path; a reader must not.
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        database = make_url(url).database
    except ArgumentError as exc:
        raise UserError(f"--storage {url!r} is not a valid SQLAlchemy URL: {exc}") from None
    if not database or database == ":memory:":
        return
    path = Path(database)
    if must_exist and not path.exists():
        raise UserError(f"--storage {url!r}: the SQLite file {path} does not exist")
    if not must_exist:
        path.parent.mkdir(parents=True, exist_ok=True)


def _rdb(url: str, *, shown: str, heartbeat_s: int | None = None) -> RDBStorage:
    engine_kwargs = (
        {"connect_args": {"timeout": _SQLITE_BUSY_TIMEOUT_S}} if url.startswith("sqlite:") else {}
    )
    heartbeat: dict[str, Any] = {}
    if heartbeat_s:
        # Workers on several machines: a trial whose worker stops beating for three intervals
        # is failed by whichever worker notices, and queued again (up to three times).
        heartbeat = {
            "heartbeat_interval": heartbeat_s,
            "grace_period": 3 * heartbeat_s,
            "heartbeat_stale_trial_callback": RetryHeartbeatStaleTrialCallback(max_retry=3),
        }
    try:
        return _create_rdb(url, engine_kwargs, heartbeat)
    except ModuleNotFoundError as exc:
        raise UserError(
            f"cannot open storage {shown}: the database driver {exc.name!r} is not installed "
            "(for PostgreSQL: pip install 'sglang-tuner[postgres]')"
        ) from None
    except Exception as exc:  # SQLAlchemy raises many types for bad URLs and unreachable servers
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot open storage {shown}: {first_line}") from None


# Two processes creating the tables at the same moment: the later one fails on what the first one
# created (SQLite: "table study_directions already exists", PostgreSQL: a duplicate key); the
# tables are there by then, so opening again succeeds. File storages also hold a lock file for it.
_CREATION_RACE = ("already exists", "duplicate key", "unique constraint failed")


def _create_rdb(url: str, engine_kwargs: dict[str, Any], heartbeat: dict[str, Any]) -> RDBStorage:
    for attempt in range(5):
        try:
            return RDBStorage(url, engine_kwargs=engine_kwargs, **heartbeat)
        except Exception as exc:
            if attempt == 4 or not any(m in str(exc).lower() for m in _CREATION_RACE):
                raise
            time.sleep(0.1 + random.random() * 0.4 * (attempt + 1))
    raise AssertionError("unreachable")


def _journal(path: Path) -> JournalStorage:
    try:
        return JournalStorage(JournalFileBackend(str(path)))
    except Exception as exc:  # a corrupt or unreadable journal
        raise UserError(f"cannot open journal file {path}: {exc}") from None


def _study_names(storage: BaseStorage) -> list[str]:
    try:
        return [s.study_name for s in storage.get_all_studies()]
    except Exception as exc:  # e.g. a file that is not an Optuna database
        raise UserError(f"cannot list the studies in the storage: {exc}") from None


def _found_hint(storage: str | None, names_in_storage: list[str], studies_dir: Path) -> str:
    if storage is not None:
        if names_in_storage:
            return "studies found there: " + ", ".join(names_in_storage)
        return "it holds no study"
    found: list[str] = []
    for path in study_files(studies_dir):
        try:
            names = [s.study_name for s in storage_for_file(path).get_all_studies()]
        except Exception:  # an unreadable file must not hide the others
            names = []
        found.extend(f"{n} ({path})" for n in names)
    if not found:
        return f"no studies found in {studies_dir}/"
    return f"studies found in {studies_dir}/: " + ", ".join(found)


def _hide_password(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy understands: show only its scheme
        return url.split("://", 1)[0] + "://..."


__all__ = [
    "DEFAULT_STUDIES_DIR",
    "StudyLocation",
    "describe_storage",
    "locate_study",
    "open_existing_storage",
    "open_storage",
    "storage_file",
    "storage_for_file",
    "study_files",
]


def safe_file_stem(study_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", study_name).strip("._") or "study"
