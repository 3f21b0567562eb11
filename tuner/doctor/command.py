"""`tuner doctor`: print every check, one line each, and exit 2 when one fails."""

from __future__ import annotations

from collections.abc import Callable

from tuner.doctor.check import FAIL, tally
from tuner.doctor.checks import each_check
from tuner.doctor.setting import DoctorSetting


def doctor(setting: DoctorSetting, say: Callable[[str], None], err: Callable[[str], None]) -> int:
    """Returns the exit code: 0, or 2 when a check failed (after one `error:` line)."""
    checks = []
    for check in each_check(setting):
        say(check.line())
        checks.append(check)
    say(f"{len(checks)} checks: {tally(checks)}")
    failed = [c.name for c in checks if c.status == FAIL]
    if failed:
        err(f"error: {len(failed)} check(s) failed ({', '.join(failed)}): see the fail lines above")
        return 2
    return 0
