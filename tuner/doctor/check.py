"""One check's verdict: ok, warn or fail, with a short reason that says what to do."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "warn", "fail"]
OK: Status = "ok"
WARN: Status = "warn"
FAIL: Status = "fail"


@dataclass(frozen=True)
class Check:
    """`name` says what was checked (a word or two); `reason` what was found, in one line."""

    name: str
    status: Status
    reason: str

    def line(self) -> str:
        return f"{self.status:<4} {self.name}: {self.reason}"


def tally(checks: Sequence[Check]) -> str:
    """How many checks ended each way: "8 ok, 1 warn"."""
    return ", ".join(
        f"{sum(1 for c in checks if c.status == s)} {s}"
        for s in (OK, WARN, FAIL)
        if any(c.status == s for c in checks)
    )
