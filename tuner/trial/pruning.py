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
each widened by `front_slack`; when a feasible completed trial's full run beats even that best
case in both objectives, the rest of the benchmark cannot put the trial on the front, and it is
cut. benchmarks/early_cut.py measures what that saves and loses.

The SLO cut (`slo_cut`) asks the same of the SLOs: can this trial still end within each of
them? Each SLO's figure is kept as its load, the stage's value over the limit (the limit over
the value for a lower bound), so that more than 1 is broken. The completed trials say how far a
full run's load ended from its stage-k load; the trial's best case is its stage load times the
smallest such factor seen, narrowed by `slo_slack`, and when that is still over 1 the full
run cannot meet the SLO: the trial cannot be on the front of feasible runs, whatever its
latency. The front cut alone kept such trials, since an SLO-breaking configuration can have
the lowest per-token latency of all: a running cap of 1 with 16 clients (p99 TTFT 77 s against
a 10 s limit) ran its whole benchmark, 3.5 times a normal trial's GPU time. The cut records
each SLO's load the full run would likely have ended at (the stage's times the median factor
seen), by which the local search can rank the trial among those past the SLOs
(tuner/study/standing.py `EXPECTED_CUT`, measured and off): a closed loop's early stage counts
only the requests that finished, not those still queued.

Once `front_min_trials` full runs are known, the front cut alone decides: the first rule compares
stage figures across configurations with a fixed 10% margin, and configurations ramp differently
(in the quality benchmark's tpot-8b space the first rule cut a study's best configuration after
its first stage, which measured 2,734 tok/s against the 4,074 of its full run). Before that, the
first rule counts as dominators only completed trials with the trial's own categorical choices
(`alike_dominators`): what ramps differently is a different prefill chunk, queue policy, cache or
draft (chunks of 16,384 ramped 1.16-1.18x from their first stage to a full run in a chat cell
on an H200, which no trial with chunks of 4,096 or 8,192 had shown), while trials apart only in
numbers are compared as before. The front cut can do the same (`front_alike`: a trial's ramp
bounded by full runs with its categorical choices alone, once `front_alike_min` are known); it
is off, since in the retrieval cell it was built for the ramp followed the running cap against
the clients, not the choices (benchmarks/results/carried_edges.md).

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


@dataclass(frozen=True)
class StagePrunerConfig:
    n_startup_trials: int = 5  # completed trials with this stage before anything is pruned
    percentile: float = 25.0  # throughput below this percentile of theirs is "poor"
    margin: float = 0.10  # a dominator has >= (1 + margin) x the throughput
    min_dominators: int = 2  # how many completed trials must dominate it
    alike_dominators: bool = True  # only trials with its categorical choices dominate it
    min_stage: int = 0  # earliest stage index at which pruning may happen
    front_cut: bool = True  # cut a trial whose best case cannot reach the front (module doc)
    front_min_trials: int = 8  # completed trials whose stage-to-full-run factors are known
    front_slack: float = 0.05  # widens the largest factors seen (a few trials miss extremes)
    front_min_stage: int = 0  # earliest stage index at which the front cut may happen
    # The front cut bounds a trial's ramp by full runs with its own categorical choices alone,
    # and waits until `front_alike_min` of them are known (module doc); off: by every full run.
    front_alike: bool = False
    front_alike_min: int = 2
    slo_cut: bool = True  # cut a trial whose best case still breaks an SLO (module doc)
    slo_min_trials: int = 4  # completed trials whose stage-to-full-run SLO factors are known
    slo_slack: float = 0.25  # narrows the smallest SLO factor seen (the SLO cut starts early)


@dataclass(frozen=True)
class PruneDecision:
    prune: bool
    reason: str
    time_saved_s: float = 0.0
    # Which rule cut the trial (tuner/results/record.py CUT_*), None when none did. After
    # the SLO cut the trial broke an SLO, and its stage figures are what the estimate learns
    # from (tuner/study/guide.py), as from a full run.
    rule: str | None = None
    # After the front or the dominated cut: the largest factor by which a full run's throughput
    # ended above its stage's (widened by `front_slack`), so that the trial's stage throughput
    # times it bounds what its full run could have measured; None when no full run says.
    up: float | None = None
    # After the SLO cut: each SLO's load its full run would likely have ended at, its stage
    # load times the median factor by which the completed trials' full runs ended from the
    # same stage (`slo_cut`); empty after any other rule.
    expected_slos: tuple[float, ...] = ()


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
    if config.slo_cut and (broken := slo_cut(stage, n_stages, current, history, config)).prune:
        return broken
    if config.front_cut and len(_full_runs(history)) >= config.front_min_trials:
        # The trials' own stage-to-full-run factors now bound what this one can end as; the
        # first rule's fixed margin assumes every configuration ramps alike, and they do not.
        return front_cut(stage, n_stages, current, history, config)
    dominated = _dominated_at_stage(stage, n_stages, current, history, config)
    if dominated.prune or not config.front_cut:
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
    if stage < config.min_stage:
        return PruneDecision(False, f"stage {stage} is before min_stage {config.min_stage}")
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
    alike = config.alike_dominators and current.group is not None
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
        up=_up(history, config),
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
    if stage < config.front_min_stage:
        return PruneDecision(False, f"stage {stage} is before front_min_stage")
    known = _full_runs(history)
    if len(known) < config.front_min_trials:
        return PruneDecision(
            False, f"{len(known)} of {config.front_min_trials} full runs to bound a stage by"
        )
    ramps = known
    if config.front_alike and current.group is not None:
        ramps = [p for p in known if p.group == current.group]
        if len(ramps) < config.front_alike_min:
            return PruneDecision(
                False,
                f"{len(ramps)} of {config.front_alike_min} full runs with its categorical "
                "choices to bound its ramp by",
            )
    up = _up(ramps, config)
    assert up is not None
    down = min(p.final[1] / p.latency for p in ramps if p.final) / (1 + config.front_slack)
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
        up=up,
    )


def slo_cut(
    stage: int,
    n_stages: int,
    current: StagePoint,
    history: Sequence[StagePoint],
    config: StagePrunerConfig,
) -> PruneDecision:
    """Cut `current` when even its best case breaks an SLO (the module docstring)."""
    if stage >= n_stages - 1 or stage < config.front_min_stage:
        return PruneDecision(False, "no SLO cut at this stage")
    known = [
        p
        for p in history
        if p.final_slos is not None and len(p.final_slos) == len(p.slos) == len(current.slos)
    ]
    if len(known) < config.slo_min_trials:
        return PruneDecision(
            False, f"{len(known)} of {config.slo_min_trials} full runs to bound an SLO by"
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
        if len(ratios) < config.slo_min_trials or not 0 < load < math.inf:
            continue  # an SLO metric the stage lacks says nothing yet
        down = min(ratios) / (1 + config.slo_slack)
        if load * down > 1:
            return PruneDecision(
                True,
                f"stage {stage + 1}/{n_stages}: cannot meet SLO {i + 1}: at {load:.2f}x its "
                f"limit, and a full run ended at best x{down:.2f} of its stage {stage + 1} "
                f"(the lowest of {len(ratios)} completed trials)",
                time_saved_s=_time_saved(stage, n_stages, current),
                rule=CUT_SLO,
                expected_slos=tuple(
                    load * float(np.median(r)) if r and 0 < load < math.inf else load
                    for load, r in zip(current.slos, factors, strict=True)
                ),
            )
    return PruneDecision(False, "every SLO can still be met")


def _up(history: Sequence[StagePoint], config: StagePrunerConfig) -> float | None:
    """The largest factor a full run's throughput ended from its stage's, widened by
    `front_slack`; None without a full run to say it."""
    factors = [p.final[0] / p.throughput for p in _full_runs(history) if p.final]
    return max(factors) * (1 + config.front_slack) if factors else None


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
