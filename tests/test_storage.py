"""open_storage / locate_study: every storage form the commands accept, and the errors."""

from __future__ import annotations

import os
import time

import optuna
import pytest
from optuna.storages import RDBStorage
from optuna.storages.journal import JournalStorage
from support.fixture_studies import build_study, sqlite_study

from tuner.errors import UserError
from tuner.results.storage import locate_study, open_storage, study_files

optuna.logging.set_verbosity(optuna.logging.WARNING)


def _trial_count(storage, name: str) -> int:
    return len(optuna.load_study(study_name=name, storage=storage).trials)


def test_default_is_the_sqlite_file_in_studies_dir(tmp_path):
    sqlite_study(tmp_path, "alpha")
    storage = open_storage(None, "alpha", tmp_path)
    assert isinstance(storage, RDBStorage)
    assert _trial_count(storage, "alpha") == 16


def test_missing_study_lists_the_studies_found(tmp_path):
    sqlite_study(tmp_path, "alpha")
    with pytest.raises(UserError) as err:
        open_storage(None, "beta", tmp_path)
    message = str(err.value)
    assert "beta" in message and "alpha" in message
    assert not (tmp_path / "beta.db").exists()  # a reader never creates a storage


def test_journal_file_by_path_and_by_default(tmp_path):
    path = tmp_path / "gamma.journal"
    from optuna.storages.journal import JournalFileBackend

    build_study(JournalStorage(JournalFileBackend(str(path))), "gamma", only=[0, 2, 4])
    by_path = open_storage(str(path), "gamma", tmp_path)
    assert isinstance(by_path, JournalStorage)
    assert _trial_count(by_path, "gamma") == 3
    # With no --storage, a study that only has a journal is found there.
    assert _trial_count(open_storage(None, "gamma", tmp_path), "gamma") == 3


def test_sqlite_url_and_plain_db_path(tmp_path):
    url = sqlite_study(tmp_path, "delta")
    assert _trial_count(open_storage(url, "delta", tmp_path / "elsewhere"), "delta") == 16
    db_path = str(tmp_path / "delta.db")
    assert _trial_count(open_storage(db_path, "delta", tmp_path / "elsewhere"), "delta") == 16


def test_sqlite_url_to_a_missing_file_is_an_error_and_creates_nothing(tmp_path):
    missing = tmp_path / "nope.db"
    with pytest.raises(UserError, match="does not exist"):
        open_storage(f"sqlite:///{missing}", "x", tmp_path)
    assert not missing.exists()


@pytest.mark.parametrize("value", ["nosuchdialect://host/db", "not-a-storage"])
def test_bad_storage_value_is_one_clear_error(tmp_path, value):
    with pytest.raises(UserError) as err:
        open_storage(value, "x", tmp_path)
    assert "storage" in str(err.value)


def test_unreachable_server_error_hides_the_password(tmp_path):
    # Port 1 on localhost refuses at once; the message must not echo the password.
    url = "postgresql://tuner:s3cret-pw@127.0.0.1:1/tuner?connect_timeout=2"
    with pytest.raises(UserError) as err:
        open_storage(url, "x", tmp_path)
    assert "s3cret-pw" not in str(err.value)
    assert "cannot open storage" in str(err.value)


def test_create_makes_a_new_sqlite_file(tmp_path):
    storage = open_storage(None, "fresh", tmp_path / "studies", create=True)
    optuna.create_study(study_name="fresh", storage=storage, directions=["maximize", "minimize"])
    assert (tmp_path / "studies" / "fresh.db").exists()
    assert open_storage(None, "fresh", tmp_path / "studies") is not None


def test_locate_study_without_a_name(tmp_path):
    with pytest.raises(UserError, match="no studies"):
        locate_study(None, None, tmp_path)
    sqlite_study(tmp_path, "only")
    location, note = locate_study(None, None, tmp_path)
    assert location.study_name == "only" and note is None

    sqlite_study(tmp_path, "newer", only=[0])
    # mtime resolution can be coarse: make the newest file unambiguous.
    old = time.time() - 100
    os.utime(tmp_path / "only.db", (old, old))
    location, note = locate_study(None, None, tmp_path)
    assert location.study_name == "newer"
    assert note is not None and "--study" in note
    assert [p.name for p in study_files(tmp_path)] == ["newer.db", "only.db"]


def test_locate_study_in_a_storage_with_several_studies(tmp_path):
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    build_study(url, "one", only=[0])
    build_study(url, "two", only=[0])
    with pytest.raises(UserError, match="one, two"):
        locate_study(url, None, tmp_path)
    location, _ = locate_study(url, "two", tmp_path)
    assert location.study_name == "two"
