"""A study's goals as data: its two objectives (metric and direction) and its SLOs.

The search space, the objective and every reader of a study use these classes, so an SLO is
parsed, checked and printed one way everywhere.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from tuner.errors import UserError

MAXIMIZE: Final = "maximize"
MINIMIZE: Final = "minimize"


@dataclass(frozen=True)
class Objective:
    """One study objective: a benchmark metric and whether to maximize or minimize it."""

    metric: str  # a key of the trial's METRICS, sglang's benchmark name
    direction: str  # "maximize" | "minimize"


# What a study without the `objectives` attr (made by hand, or by an older tuner) optimized.
DEFAULT_OBJECTIVES = (
    Objective("output_throughput", MAXIMIZE),
    Objective("median_tpot_ms", MINIMIZE),
)


_OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le,
    "<": operator.lt,
    ">=": operator.ge,
    ">": operator.gt,
}


# METRIC OP LIMIT. Wider than what is allowed (==, =, any limit text), so that the parsers can
# say what is wrong instead of "not an SLO".
SLO_PATTERN = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(<=|>=|<|>|==|=)\s*(\S+)\s*$")


@dataclass(frozen=True)
class Slo:
    """A limit on one benchmark metric, e.g. p99_ttft_ms <= 2000."""

    metric: str
    op: str
    limit: float

    @classmethod
    def parse(cls, text: str) -> Slo:
        """Parse `'p99_ttft_ms<=2000'` (operators <=, <, >=, >)."""
        match = SLO_PATTERN.match(text)
        if match is None or match.group(2) not in _OPS:
            raise UserError(
                f"--slo {text!r} is not a limit: write METRIC<=NUMBER, e.g. 'p99_ttft_ms<=2000' "
                "(operators <=, <, >=, >)"
            )
        metric, op, number = match.groups()
        try:
            limit = float(number)
        except ValueError:
            raise UserError(f"--slo {text!r}: {number!r} is not a number") from None
        return cls(metric, op, limit)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Slo:
        return cls(str(data["metric"]), str(data.get("op", "<=")), float(data["limit"]))

    def violation(self, value: float) -> float:
        """Graded violation for `trial.set_constraint`: > 0 violated, <= 0 met.

        Relative to the limit so that SLOs of different units weigh alike in the sampler.
        """
        scale = abs(self.limit) or 1.0
        excess = value - self.limit if self.op in ("<=", "<") else self.limit - value
        return excess / scale

    def satisfied_by(self, metrics: Mapping[str, Any]) -> bool:
        """False when the metric is missing or not a number: an unmeasured limit is not met."""
        value = as_float(metrics.get(self.metric))
        if value is None:
            return False
        return _OPS[self.op](value, self.limit)

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.limit:g}"


def as_float(value: Any) -> float | None:
    """A finite float, or None for anything else (missing, text, inf, NaN)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
