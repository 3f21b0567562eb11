"""The verdict: one sentence that answers "was tuning worth it?" from a study's records.

It sets the best configuration within the SLOs against sglang's defaults, in the study's own
metrics. Pure: records in, text out.

The comparison is made at equal or better latency, so that a throughput gain is never bought
with a slower stream without saying so. Every case where that comparison cannot be made (no
default trial, a default that crashed or broke an SLO, no feasible trial) gets its own honest
sentence rather than a made-up ratio.

Example:
    >>> verdict(meta, trials).text  # doctest: +SKIP
    'Trial 2: x2.28 output tok/s (410 vs 180) at a better median TPOT (30.0 vs 45.0 ms) than ...'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tuner.results.goals import MAXIMIZE
from tuner.results.study_records import Category, StudyMeta, TrialRecord, is_candidate, metric_label

# Latencies within this fraction of the default's count as "the same": benchmark noise.
SAME_LATENCY_TOLERANCE = 0.05


# What a verdict says, for its colour on the page: a gain over the defaults, a recommendation
# with no baseline to measure it against, no gain over the defaults, or nothing to recommend.
IMPROVED = "improved"
NO_BASELINE = "no-baseline"
NO_GAIN = "no-gain"
NOTHING = "nothing"


@dataclass(frozen=True)
class Verdict:
    text: str
    best: int | None  # trial number recommended, None when nothing meets the SLOs
    default: int | None  # the default trial's number, None when the study has none
    kind: str  # IMPROVED, NO_BASELINE, NO_GAIN or NOTHING


def verdict(meta: StudyMeta, trials: Sequence[TrialRecord]) -> Verdict:
    tput, lat = meta.throughput, meta.latency
    pool = [t for t in trials if is_candidate(t, meta)]
    defaults = [t for t in trials if t.is_default]
    default = defaults[0] if defaults else None
    slo_text = ", ".join(str(s) for s in meta.slos)
    within = f"within {slo_text}" if slo_text else "within the constraints"

    if not pool:
        base = f"No trial served the whole benchmark {within}; nothing to recommend."
        if default is not None:
            base += f" sglang's defaults (trial {default.number}): {default.why()}."
        return Verdict(base, None, default.number if default else None, NOTHING)

    def value(t: TrialRecord, i: int) -> float:
        values = t.objective_values(meta)
        assert values is not None  # candidates are measured
        return values[i]

    def better_tput(a: float, b: float) -> bool:
        return a > b if tput.direction == MAXIMIZE else a < b

    def key_tput(t: TrialRecord) -> tuple[float, float, int]:
        s0 = 1.0 if tput.direction == MAXIMIZE else -1.0
        s1 = 1.0 if lat.direction == MAXIMIZE else -1.0
        return (s0 * value(t, 0), s1 * value(t, 1), -t.number)

    top = max(pool, key=key_tput)
    describe_top = (
        f"trial {top.number}: {_num(value(top, 0))} {_short(tput.metric)} at "
        f"{_num(value(top, 1))} {_unit_label(lat.metric)}"
    )

    if default is None:
        return Verdict(
            f"No default trial in this study, so no baseline to compare with; the highest "
            f"{_short(tput.metric)} {within} is {describe_top}.",
            top.number,
            None,
            NO_BASELINE,
        )
    if not default.served_benchmark:
        return Verdict(
            f"sglang's defaults (trial {default.number}) did not serve the benchmark "
            f"({default.why()}); the highest {_short(tput.metric)} {within} is {describe_top}.",
            top.number,
            default.number,
            NO_BASELINE,
        )
    default_values = default.objective_values(meta)
    assert default_values is not None  # served_benchmark implies measured
    d_tput, d_lat = default_values
    if default.category is Category.SLO_VIOLATED:
        return Verdict(
            f"sglang's defaults (trial {default.number}: {_num(d_tput)} {_short(tput.metric)} at "
            f"{_num(d_lat)} {_unit_label(lat.metric)}) break {', '.join(default.violated)}; "
            f"the highest {_short(tput.metric)} {within} is {describe_top}.",
            top.number,
            default.number,
            NO_BASELINE,
        )

    # Same or better latency than the default, up to noise.
    def no_worse_latency(t: TrialRecord) -> bool:
        limit = abs(d_lat) * SAME_LATENCY_TOLERANCE
        if lat.direction == MAXIMIZE:
            return value(t, 1) >= d_lat - limit
        return value(t, 1) <= d_lat + limit

    comparable = [t for t in pool if no_worse_latency(t)]
    best = max(comparable, key=key_tput) if comparable else default
    if best.number == default.number or not better_tput(value(best, 0), d_tput):
        text = (
            f"No configuration beat sglang's defaults (trial {default.number}: {_num(d_tput)} "
            f"{_short(tput.metric)} at {_num(d_lat)} {_unit_label(lat.metric)}) at the same or "
            f"better {_short(lat.metric)}"
        )
        if top.number != default.number and better_tput(value(top, 0), d_tput):
            text += (
                f"; more {_short(tput.metric)} costs latency: {describe_top} "
                f"(x{_ratio(value(top, 0), d_tput)} {_short(tput.metric)}, "
                f"x{_ratio(value(top, 1), d_lat)} {_short(lat.metric)})"
            )
        return Verdict(text + ".", default.number, default.number, NO_GAIN)

    b_tput, b_lat = value(best, 0), value(best, 1)
    if abs(b_lat - d_lat) <= abs(d_lat) * SAME_LATENCY_TOLERANCE:
        where = f"at the same {_short(lat.metric)}"
    else:
        where = f"at a better {_short(lat.metric)}"
    text = (
        f"Trial {best.number}: x{_ratio(b_tput, d_tput)} {_short(tput.metric)} "
        f"({_num(b_tput)} vs {_num(d_tput)}) {where} ({_num(b_lat)} vs {_num(d_lat)} "
        f"{_unit(lat.metric)}) than sglang's defaults (trial {default.number}), {within}"
    )
    if top.number != best.number:
        text += (
            f"; the highest {_short(tput.metric)} overall is {describe_top} "
            f"(x{_ratio(value(top, 0), d_tput)})"
        )
    return Verdict(text + ".", best.number, default.number, IMPROVED)


def _short(metric: str) -> str:
    return metric_label(metric).replace(" (ms)", "")


def _unit(metric: str) -> str:
    return "ms" if metric.endswith("_ms") else ""


def _unit_label(metric: str) -> str:
    unit = _unit(metric)
    return f"{unit} {_short(metric)}" if unit else _short(metric)


def _num(value: float) -> str:
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}"


def _ratio(a: float, b: float) -> str:
    if b == 0:
        return "inf"
    return f"{a / b:.2f}"
