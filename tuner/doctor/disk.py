"""Disk for the studies directory: the storage, and each trial's server log."""

from __future__ import annotations

import os
import shutil

from tuner.doctor.check import FAIL, OK, WARN, Check
from tuner.doctor.setting import DoctorSetting

GB = 1e9
# A trial leaves its server log (up to a few MB) and a few rows in the storage; a study of
# hundreds of trials needs well under a GB, and a full disk corrupts a SQLite storage.
_FAIL_BELOW_GB = 0.2
_WARN_BELOW_GB = 2.0


def disk_check(setting: DoctorSetting) -> Check:
    directory = setting.studies_dir
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return Check("disk", FAIL, f"{directory}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        return Check(
            "disk",
            FAIL,
            f"{existing} is not writable: trial logs and the study cannot be written "
            "(give a writable --studies-dir)",
        )
    free = shutil.disk_usage(existing).free / GB
    made = "" if existing == directory else " (made at the first run)"
    found = f"{directory}{made}: {free:.1f} GB free"
    if free < _FAIL_BELOW_GB:
        return Check("disk", FAIL, f"{found}; trial logs and the study need room")
    if free < _WARN_BELOW_GB:
        return Check("disk", WARN, f"{found}; a long study's logs may fill it")
    return Check("disk", OK, found)
