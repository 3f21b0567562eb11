"""A study's goals as data: its two objectives (metric and direction) and its SLOs.

The search space, the objective and every reader of a study use these classes, so an SLO is
parsed, checked and printed one way everywhere.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from tuner.errors import UserError

MAXIMIZE: Final = "maximize"
MINIMIZE: Final = "minimize"
# The capacity objective: the highest request rate at which every SLO held, found by a rate
# search within one server's lifetime (tuner/trial/capacity.py). A space whose throughput
# objective is this metric is measured that way; `--goal capacity` sets it.
SUSTAINED_RATE: Final = "sustained_request_rate"


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
    latency: str  # the latency objective
    slos: tuple[str, ...]
    pick: str  # a tuner.results.pick.Pick value
    measure: str  # "throughput", "latency" or "front"
    says: str  # one line for the help and the README
    throughput: str = DEFAULT_OBJECTIVES[0].metric  # the objective maximized
    # Relative run-to-run noise of the first objective, for the stop rule: a move within it is
    # chance. The capacity search finds a rate to within its tolerance, so two equal servers
    # may differ by that much.
    noise: float = 0.0


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
        Goal(
            "capacity",
            "p99_tpot_ms",
            ("p99_ttft_ms <= 3000",),
            "max-throughput",
            "throughput",
            "the highest request rate every SLO holds at (p99 TTFT <= 3 s), against p99 TPOT "
            "there; needs an open-loop space (bench.request_rate); exports the highest rate",
            throughput=SUSTAINED_RATE,
            noise=0.02,  # half the search's 4% tolerance (tuner/trial/capacity.py)
        ),
    )
}


def goal_named(name: str | None) -> Goal | None:
    """The goal `--goal NAME` asks for (None: the space as it is); a UserError otherwise."""
    if name is None:
        return None
    if name in GOALS:
        return GOALS[name]
    choices = "; ".join(f"{goal.name} ({goal.says})" for goal in GOALS.values())
    raise UserError(f"--goal {name!r} is not a goal: choose one of {choices}")


def goal_defaults(goal: Goal | None, space_file: object) -> dict[str, Any]:
    """The top-level keys a goal gives a space file that lacks them: the file's own
    `objectives:` and `slos:` win when given.

    Capacity is the one exception: what it maximizes is what the goal means, so the sustained
    rate replaces the file's throughput objective (its latency objective stays)."""
    if goal is None or not isinstance(space_file, Mapping):
        return {}
    out: dict[str, Any] = {}
    own = space_file.get("objectives")
    if own is None:
        out["objectives"] = {"throughput": goal.throughput, "latency": goal.latency}
    elif goal.throughput == SUSTAINED_RATE and isinstance(own, Mapping):
        out["objectives"] = {**own, "throughput": SUSTAINED_RATE}
    if "slos" not in space_file:
        out["slos"] = list(goal.slos)
    return out


def is_capacity(throughput_metric: str) -> bool:
    """Whether a study with this first objective measures each trial by a rate search."""
    return throughput_metric == SUSTAINED_RATE


def capacity_words(rate: float, slos: Sequence[Slo]) -> str:
    """A sustained rate in words: 'sustains 7.5 req/s with p99 TTFT <= 3 s'."""
    if rate <= 0:
        held = " and ".join(slo_words(s) for s in slos) or "its SLOs"
        return f"sustains no tested rate with {held}"
    within = " and ".join(slo_words(s) for s in slos)
    return f"sustains {rate:.3g} req/s" + (f" with {within}" if within else "")


# Run-to-run noise of one measured latency tail: sglang's coefficient of variation on identical
# input is 0.1-2.5% by concurrency (vllm-project/vllm issue 53436,
# docs/decisions.md#ties-a-noise-margin-for-the-local-search). A trial that
# meets an SLO by less than this share of its limit may break it when measured again, and on
# another draw of the same workload more so: of tpot-8b's configurations within its SLOs, those
# within by less held on 5 of 16 fresh draws, the others on 46 of 52
# (benchmarks/results/draw_check.md).
SLO_NOISE: Final = 0.02


_T = TypeVar("_T")


def steadiest(
    items: Iterable[_T], margin: Callable[[_T], float], value: Callable[[_T], float]
) -> _T | None:
    """The item with the most `value` of those that meet every SLO by `SLO_NOISE` or more
    (`margin`: the share of its limit by which an item meets its closest SLO): what a close
    call's steadier choice is, in the summary and in `tuner export`. None when none does."""
    return max((i for i in items if margin(i) >= SLO_NOISE), key=value, default=None)


def slo_margins(constraints: Mapping[str, float], slos: Sequence[Slo]) -> list[tuple[Slo, float]]:
    """(SLO, the share of its limit by which a trial meets it) for each SLO its graded
    constraints hold (`slo:METRIC`, `Slo.violation` as the study recorded it: a re-measured
    configuration's is the mean of its measurements), closest first; below 0 is a miss."""
    out = [
        (slo, -float(constraints[key]))
        for slo in slos
        if isinstance(constraints.get(key := f"slo:{slo.metric}"), int | float)
    ]
    return sorted(out, key=lambda pair: pair[1])


def close_call(margins: Sequence[tuple[Slo, float]]) -> str | None:
    """'meets p99 TPOT <= 11 ms by 1.2%, less than a rerun's noise (~2%): ...' when the closest
    of `margins` (`slo_margins`' order) meets its SLO by less than `SLO_NOISE`, else None."""
    if not margins or not 0 <= margins[0][1] < SLO_NOISE:
        return None
    return (
        f"meets {margin_words(*margins[0])}, less than a rerun's noise (~{SLO_NOISE:.0%}): "
        "measured again, or on other requests like these, it may break it"
    )


def margin_words(slo: Slo, margin: float, short: bool = False) -> str:
    """'p99 TPOT <= 11 ms by 0.9%' (met), 'p99 TPOT <= 11 ms missed by 3.0%'; `short`: 'p99
    TPOT 0.9% within its limit', 'p99 TPOT 3.0% past its limit'."""
    if short:
        return f"{slo_name(slo)} {abs(margin):.1%} {'within' if margin >= 0 else 'past'} its limit"
    if margin >= 0:
        return f"{slo_words(slo)} by {margin:.1%}"
    return f"{slo_words(slo)} missed by {-margin:.1%}"


def slo_words(slo: Slo) -> str:
    """`p99_ttft_ms <= 3000` as a reader says it: 'p99 TTFT <= 3 s'."""
    name = slo_name(slo)
    if name == slo.metric:
        return str(slo)
    limit = f"{slo.limit / 1000:g} s" if slo.limit >= 1000 else f"{slo.limit:g} ms"
    return f"{name} {slo.op} {limit}"


def slo_name(slo: Slo) -> str:
    """The metric an SLO limits as a reader says it: 'p99 TTFT' (else the metric's own name)."""
    match = re.match(r"^(mean|median|p90|p95|p99)_(ttft|tpot|itl|e2e_latency)_ms$", slo.metric)
    if match is None:
        return slo.metric
    stat, quantity = match.groups()
    return f"{stat} {dict(e2e_latency='E2E latency').get(quantity, quantity.upper())}"
