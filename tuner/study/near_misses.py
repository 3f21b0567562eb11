"""The stop rule's check of near misses: a trial just past an SLO, measured again.

One measurement of a p99 tail cannot tell 10.9 ms from 11.1 ms against an 11 ms limit: sglang's
run-to-run variation is 0.1-2.5% (`SLO_NOISE`, 2% of a limit, tuner/results/goals.py). Before
the stop rule stops (tuner/study/stopping.py), once a study:

- *Re-measure* (`REMEASURE_CHECK`): of the configurations that served the whole benchmark,
  missed an SLO by less than `SLO_NOISE` and never measured within it, the one that missed by
  least is launched again, when it measured more than `--min-gain` over the reference trial (the
  best that meets every SLO by `SLO_NOISE` or more). The second launch records the mean of both
  measurements (tuner/trial/objective.py `_pooled`).

It does not read the estimate: it is a function of the space and the trials.
"""

from __future__ import annotations

from optuna.trial import FrozenTrial, TrialState

from tuner.results import record
from tuner.results.goals import SLO_NOISE, slo_margins, slo_words
from tuner.space.model import SearchSpace
from tuner.study.moves import key
from tuner.study.standing import within_slos
from tuner.study.stopping import REMEASURE_CHECK, Outlook


def remeasure_check(
    space: SearchSpace, trials: list[FrozenTrial], min_gain: float
) -> Outlook | None:
    """The re-measurement to make before stopping, or None (made already, or none is close)."""
    if any(t.user_attrs.get(record.GUIDED_BY) == REMEASURE_CHECK for t in trials):
        return None
    measured = _served(trials)
    feasible = [t for t in measured if within_slos(t)]
    passed = {key(t.params) for t in feasible}
    ref = _reference(feasible)
    if ref is None:
        return None
    close = [
        t
        for t in measured
        if -SLO_NOISE <= record.least_slo_margin(t) < 0
        and key(t.params) not in passed
        and t.values[0] > ref.values[0] * (1 + min_gain)
    ]
    if not close:
        return None
    miss = max(close, key=lambda t: (record.least_slo_margin(t), t.values[0]))
    gain = float(miss.values[0]) / float(ref.values[0]) - 1
    slo, margin = slo_margins(record.trial_constraints(miss), space.slos)[0]
    return Outlook(
        dict(miss.params),
        gain,
        f"trial {miss.number} missed {slo_words(slo)} by {-margin:.1%}, less than a rerun's "
        f"noise, with {gain:+.1%} over trial {ref.number}: it is measured again",
        REMEASURE_CHECK,
        miss.number,
    )


def _served(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The launched trials that served their whole benchmark."""
    return [
        t
        for t in trials
        if t.state == TrialState.COMPLETE
        and t.values
        and record.DUPLICATE_OF not in t.user_attrs
        and record.trial_constraints(t).get("launch", 0.0) <= 0
    ]


def _reference(feasible: list[FrozenTrial]) -> FrozenTrial | None:
    """Of SLO-feasible trials, the one with the most throughput among those that meet every SLO
    by `SLO_NOISE` or more (among all, when none does)."""
    sure = [t for t in feasible if record.least_slo_margin(t) >= SLO_NOISE] or feasible
    return max(sure, key=lambda t: t.values[0]) if sure else None
