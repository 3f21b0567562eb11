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


@dataclass(frozen=True)
class Goal:
    """What `--goal WORD` stands for: the objectives and SLOs a space without its own
    `objectives:` / `slos:` gets, the trial `tuner export` picks, and what the stop rule
    watches (tuner/study/stopping.py)."""

    name: str
    latency: str  # the latency objective (the throughput one is output_throughput)
    slos: tuple[str, ...]
    pick: str  # a tuner.results.pick.Pick value
    measure: str  # "throughput", "latency" or "front"
    says: str  # one line for the help and the README


GOALS: Final = {
    goal.name: goal
    for goal in (
        Goal(
            "throughput",
            "median_tpot_ms",
            (),
            "max-throughput",
            "throughput",
            "most output tok/s; no SLO; exports the highest-throughput trial",
        ),
        Goal(
            "latency",
            "p99_tpot_ms",
            ("p99_ttft_ms <= 2000",),
            "min-latency",
            "latency",
            "lowest p99 TPOT with the first token within 2 s (p99); exports the fastest trial",
        ),
        Goal(
            "balanced",
            "median_tpot_ms",
            ("p99_ttft_ms <= 5000",),
            "knee",
            "front",
            "the throughput/latency front with p99 TTFT <= 5 s; exports the knee",
        ),
    )
}
NOT_YET: Final = ("capacity",)  # named, not built yet (issue 21, item 2)


def goal_named(name: str | None) -> Goal | None:
    """The goal `--goal NAME` asks for (None: the space as it is); a UserError otherwise."""
    if name is None:
        return None
    if name in GOALS:
        return GOALS[name]
    if name in NOT_YET:
        raise UserError(
            f"--goal {name}: not yet: a trial cannot measure the highest SLO-meeting request "
            f"rate yet; choose {', '.join(GOALS)}"
        )
    choices = "; ".join(f"{goal.name} ({goal.says})" for goal in GOALS.values())
    raise UserError(f"--goal {name!r} is not a goal: choose one of {choices}")


def goal_defaults(goal: Goal | None, space_file: object) -> dict[str, Any]:
    """The top-level keys a goal gives a space file that lacks them: the file's own
    `objectives:` and `slos:` win when given."""
    if goal is None or not isinstance(space_file, Mapping):
        return {}
    out: dict[str, Any] = {}
    if "objectives" not in space_file:
        out["objectives"] = {"throughput": DEFAULT_OBJECTIVES[0].metric, "latency": goal.latency}
    if "slos" not in space_file:
        out["slos"] = list(goal.slos)
    return out
