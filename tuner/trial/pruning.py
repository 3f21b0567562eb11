"""A stage pruner that works in multi-objective studies.

Optuna's pruners raise NotImplementedError in multi-objective studies, so the decision is made
here, from the per-stage metrics every trial stores in its user attrs. A trial is pruned after a
benchmark stage when it is clearly dominated at that same stage: its throughput is below a low
percentile of the completed trials' throughput, AND enough completed trials that met the SLOs had
both clearly more throughput and no worse latency at that stage. Latency alone never prunes: a
slow-but-snappy configuration may sit on the Pareto front.

The front cut (`front_cut`) asks a second question after each stage: can this trial still reach
the front of feasible full runs at all? The study's completed trials say how far a full run ends
from its own stage-k figures (the ramp-up of a closed loop makes the first stage slower than the
whole run, and measurement noise adds to it): on the seed space with the oracle's noise, full-run
throughput ended 0.93x to 1.41x the first stage's, latency 0.89x to 1.18x. The trial's best case is
its stage-k throughput times the largest such factor seen, and its latency times the smallest,
each widened by `_FRONT_SLACK`; when a feasible completed trial's full run beats even that best
case in both objectives, the rest of the benchmark cannot put the trial on the front, and it is
cut. benchmarks/early_cut.py measures what that saves and loses.

The SLO cut (`slo_cut`) asks the same of the SLOs: can this trial still end within each of
them? Each SLO's figure is kept as its load, the stage's value over the limit (the limit over
the value for a lower bound), so that more than 1 is broken. The completed trials say how far a
full run's load ended from its stage-k load; the trial's best case is its stage load times the
smallest such factor seen, narrowed by `_SLO_SLACK`, and when that is still over 1 the full
run cannot meet the SLO: the trial cannot be on the front of feasible runs, whatever its
latency. The front cut alone kept such trials, since an SLO-breaking configuration can have
the lowest per-token latency of all: a running cap of 1 with 16 clients (p99 TTFT 77 s against
a 10 s limit) ran its whole benchmark, 3.5 times a normal trial's GPU time.

Once `_FRONT_MIN_TRIALS` full runs are known, the front cut alone decides: the first rule compares
stage figures across configurations with a fixed 10% margin, and configurations ramp differently
(in the quality benchmark's tpot-8b space the first rule cut a study's best configuration after
its first stage, which measured 2,734 tok/s against the 4,074 of its full run). Before that, the
first rule counts as dominators only completed trials with the trial's own categorical choices:
what ramps differently is a different prefill chunk, queue policy, cache or draft (chunks of
16,384 ramped 1.16-1.18x from their first stage to a full run in a chat cell on an H200, which
no trial with chunks of 4,096 or 8,192 had shown), while trials apart only in numbers are
compared as before. The front cut bounds a trial's ramp by every full run.

    pruner = StagePruner(StagePrunerConfig(n_startup_trials=5))
    decision = pruner.decide(stage=1, n_stages=4, current=StagePoint(120.0, 35.0), history=[...])
    if decision.prune:
        raise optuna.TrialPruned(decision.reason)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tuner.results.record import CUT_DOMINATED, CUT_FRONT, CUT_SLO


@dataclass(frozen=True)
class StagePoint:
    """One trial's cumulative measurement after a stage."""

    throughput: float  # the throughput objective (maximised)
    latency: float  # the latency objective (minimised)
    duration_s: float = 0.0  # modelled seconds the stage took (to estimate time saved)
    feasible: bool = True  # a completed trial that met every constraint (SLOs)
    # A completed trial's full-run (throughput, latency): what its stage figures ended as.
    final: tuple[float, float] | None = None
    # Each SLO's load at this stage (value over limit; over 1 is broken), in the space's order,
    # and a completed trial's full-run loads.
    slos: tuple[float, ...] = ()
    final_slos: tuple[float, ...] | None = None
    # The configuration's categorical choices (chunk size, policy, HiCache, draft algorithm):
    # configurations that share them ramp alike (the first rule); None: not known.
    group: tuple[tuple[str, str], ...] | None = None


# The front and the SLO cut's constants (measured: benchmarks/early_cut.py).
_FRONT_MIN_TRIALS = 8  # full runs whose stage-to-full-run factors bound the front cut
_FRONT_SLACK = 0.05  # widens the largest factors seen: a few trials miss the extremes
_SLO_MIN_TRIALS = 4  # full runs whose stage-to-full-run SLO factors bound the SLO cut
_SLO_SLACK = 0.25  # narrows the smallest SLO factor seen, so the SLO cut starts early


@dataclass(frozen=True)
class StagePrunerConfig:
    """The first rule's settings: a trial far below most completed ones and dominated."""

    n_startup_trials: int = 5  # completed trials with this stage before anything is pruned
    percentile: float = 25.0  # throughput below this percentile of theirs is "poor"
    margin: float = 0.10  # a dominator has >= (1 + margin) x the throughput
    min_dominators: int = 2  # how many completed trials must dominate it


@dataclass(frozen=True)
class PruneDecision:
    prune: bool
    reason: str
    time_saved_s: float = 0.0
    # Which rule cut the trial (tuner/results/record.py CUT_*), None when none did. After
    # the SLO cut the trial broke an SLO, and its stage figures are what the estimate learns
    # from (tuner/study/guide.py), as from a full run.
    rule: str | None = None


def decide(
    stage: int,
    n_stages: int,
    current: StagePoint,
    history: Sequence[StagePoint],
    config: StagePrunerConfig,
) -> PruneDecision:
    """Pure decision: prune `current` at `stage` given completed trials' points at that stage:
    unable to meet an SLO (the SLO cut), dominated at this stage (the first rule), or unable to
    reach the front (the front cut)."""
    if stage >= n_stages - 1:
        return PruneDecision(False, "last stage: nothing left to save")
    if (broken := slo_cut(stage, n_stages, current, history, config)).prune:
        return broken
    if len(_full_runs(history)) >= _FRONT_MIN_TRIALS:
        # The trials' own stage-to-full-run factors now bound what this one can end as; the
        # first rule's fixed margin assumes every configuration ramps alike, and they do not.
        return front_cut(stage, n_stages, current, history, config)
    dominated = _dominated_at_stage(stage, n_stages, current, history, config)
    if dominated.prune:
        return dominated
    cut = front_cut(stage, n_stages, current, history, config)
    return cut if cut.prune else dominated


def _time_saved(stage: int, n_stages: int, current: StagePoint) -> float:
    per_stage = current.duration_s / (stage + 1) if current.duration_s > 0 else 0.0
    return (n_stages - 1 - stage) * per_stage


def _dominated_at_stage(
    stage: int,
    n_stages: int,
    current: StagePoint,
    history: Sequence[StagePoint],
    config: StagePrunerConfig,
) -> PruneDecision:
    if len(history) < config.n_startup_trials:
        return PruneDecision(
            False, f"only {len(history)} of {config.n_startup_trials} start-up trials completed"
        )
    throughputs = np.array([p.throughput for p in history], dtype=float)
    floor = float(np.percentile(throughputs, config.percentile))
    if current.throughput >= floor:
        return PruneDecision(
            False, f"throughput {current.throughput:.1f} >= p{config.percentile:g} {floor:.1f}"
        )
    # Only trials that met the SLOs count as dominators: a configuration beaten only by
    # infeasible ones may still be the best feasible choice. And only trials with its own
    # categorical choices, whose first stages ramp as its does: the fixed margin holds there.
    alike = current.group is not None
    dominators = [
        p
        for p in history
        if p.feasible
        and (not alike or p.group == current.group)
        and p.throughput >= current.throughput * (1.0 + config.margin)
        and p.latency <= current.latency
    ]
    if len(dominators) < config.min_dominators:
        return PruneDecision(
            False,
            f"throughput low but only {len(dominators)} trials"
            f"{' with its categorical choices' if alike else ''} dominate it "
            f"(need {config.min_dominators})",
        )
    reason = (
        f"stage {stage + 1}/{n_stages}: throughput {current.throughput:.1f} below "
        f"p{config.percentile:g} {floor:.1f} of {len(history)} completed trials"
    )
    if dominators:
        best = max(dominators, key=lambda p: p.throughput)
        reason += (
            f", and {len(dominators)} of them{' with its categorical choices' if alike else ''} "
            f"dominate it (best {best.throughput:.1f} at "
            f"latency {best.latency:.1f} vs {current.latency:.1f})"
        )
    return PruneDecision(
        True,
        reason,
        time_saved_s=_time_saved(stage, n_stages, current),
        rule=CUT_DOMINATED,
    )


def front_cut(
    stage: int,
    n_stages: int,
    current: StagePoint,
    history: Sequence[StagePoint],
    config: StagePrunerConfig,
) -> PruneDecision:
    """Cut `current` when a feasible full run beats its best case (the module docstring)."""
    if stage >= n_stages - 1:
        return PruneDecision(False, "last stage: nothing left to save")
    known = _full_runs(history)
    if len(known) < _FRONT_MIN_TRIALS:
        return PruneDecision(
            False, f"{len(known)} of {_FRONT_MIN_TRIALS} full runs to bound a stage by"
        )
    ramps = known
    up = _up(ramps, config)
    assert up is not None
    down = min(p.final[1] / p.latency for p in ramps if p.final) / (1 + _FRONT_SLACK)
    best_throughput, best_latency = current.throughput * up, current.latency * down
    beaten_by = [
        p
        for p in known
        if p.feasible and p.final and p.final[0] >= best_throughput and p.final[1] <= best_latency
    ]
    if not beaten_by:
        return PruneDecision(
            False,
            f"best case {best_throughput:.1f} at latency {best_latency:.1f} is not beaten",
        )
    best = max(beaten_by, key=lambda p: p.final[0] if p.final else 0.0)
    assert best.final is not None
    return PruneDecision(
        True,
        f"stage {stage + 1}/{n_stages}: cannot reach the front: at best {best_throughput:.1f} "
        f"at latency {best_latency:.1f} (x{up:.2f} and x{down:.2f}, the widest a full run of "
        f"{len(ramps)} completed trials ended from its stage {stage + 1}), and a feasible full "
        f"run measured {best.final[0]:.1f} at {best.final[1]:.1f}",
        time_saved_s=_time_saved(stage, n_stages, current),
        rule=CUT_FRONT,
    )


def slo_cut(
    stage: int,
    n_stages: int,
    current: StagePoint,
    history: Sequence[StagePoint],
    config: StagePrunerConfig,
) -> PruneDecision:
    """Cut `current` when even its best case breaks an SLO (the module docstring)."""
    if stage >= n_stages - 1:
        return PruneDecision(False, "no SLO cut at this stage")
    known = [
        p
        for p in history
        if p.final_slos is not None and len(p.final_slos) == len(p.slos) == len(current.slos)
    ]
    if len(known) < _SLO_MIN_TRIALS:
        return PruneDecision(
            False, f"{len(known)} of {_SLO_MIN_TRIALS} full runs to bound an SLO by"
        )
    factors = [
        [
            p.final_slos[i] / p.slos[i]
            for p in known
            if p.final_slos is not None
            and 0 < p.slos[i] < math.inf
            and 0 < p.final_slos[i] < math.inf
        ]
        for i in range(len(current.slos))
    ]
    for i, load in enumerate(current.slos):
        ratios = factors[i]
        if len(ratios) < _SLO_MIN_TRIALS or not 0 < load < math.inf:
            continue  # an SLO metric the stage lacks says nothing yet
        down = min(ratios) / (1 + _SLO_SLACK)
        if load * down > 1:
            return PruneDecision(
                True,
                f"stage {stage + 1}/{n_stages}: cannot meet SLO {i + 1}: at {load:.2f}x its "
                f"limit, and a full run ended at best x{down:.2f} of its stage {stage + 1} "
                f"(the lowest of {len(ratios)} completed trials)",
                time_saved_s=_time_saved(stage, n_stages, current),
                rule=CUT_SLO,
            )
    return PruneDecision(False, "every SLO can still be met")


def _up(history: Sequence[StagePoint], config: StagePrunerConfig) -> float | None:
    """The largest factor a full run's throughput ended from its stage's, widened by
    `_FRONT_SLACK`; None without a full run to say it."""
    factors = [p.final[0] / p.throughput for p in _full_runs(history) if p.final]
    return max(factors) * (1 + _FRONT_SLACK) if factors else None


def _full_runs(history: Sequence[StagePoint]) -> list[StagePoint]:
    """Completed trials whose stage and full-run figures can bound a stage's ratio."""
    return [
        p
        for p in history
        if p.final is not None
        and p.throughput > 0
        and 0 < p.latency < math.inf
        and 0 < p.final[1] < math.inf
    ]


class StagePruner:
    """Holds the configuration; `decide` is the pure function above."""

    def __init__(self, config: StagePrunerConfig | None = None, enabled: bool = True) -> None:
        self.config = config or StagePrunerConfig()
        self.enabled = enabled

    def decide(
        self, stage: int, n_stages: int, current: StagePoint, history: Sequence[StagePoint]
    ) -> PruneDecision:
        if not self.enabled:
            return PruneDecision(False, "pruning disabled")
        return decide(stage, n_stages, current, history, self.config)
