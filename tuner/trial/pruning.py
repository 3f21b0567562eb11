"""A stage pruner that works in multi-objective studies.

Optuna's pruners raise NotImplementedError in multi-objective studies, so the decision is made
here, from the per-stage metrics every trial stores in its user attrs. A trial is pruned after a
benchmark stage when it is clearly dominated at that same stage: its throughput is below a low
percentile of the completed trials' throughput, AND enough completed trials that met the SLOs had
both clearly more throughput and no worse latency at that stage. Latency alone never prunes: a
slow-but-snappy configuration may sit on the Pareto front.

    pruner = StagePruner(StagePrunerConfig(n_startup_trials=5))
    decision = pruner.decide(stage=1, n_stages=4, current=StagePoint(120.0, 35.0), history=[...])
    if decision.prune:
        raise optuna.TrialPruned(decision.reason)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StagePoint:
    """One trial's cumulative measurement after a stage."""

    throughput: float  # the throughput objective (maximised)
    latency: float  # the latency objective (minimised)
    duration_s: float = 0.0  # modelled seconds the stage took (to estimate time saved)
    feasible: bool = True  # a completed trial that met every constraint (SLOs)


@dataclass(frozen=True)
class StagePrunerConfig:
    n_startup_trials: int = 5  # completed trials with this stage before anything is pruned
    percentile: float = 25.0  # throughput below this percentile of theirs is "poor"
    margin: float = 0.10  # a dominator has >= (1 + margin) x the throughput
    min_dominators: int = 2  # how many completed trials must dominate it
    min_stage: int = 0  # earliest stage index at which pruning may happen


@dataclass(frozen=True)
class PruneDecision:
    prune: bool
    reason: str
    time_saved_s: float = 0.0


def decide(
    stage: int,
    n_stages: int,
    current: StagePoint,
    history: Sequence[StagePoint],
    config: StagePrunerConfig,
) -> PruneDecision:
    """Pure decision: prune `current` at `stage` given completed trials' points at that stage."""
    if stage >= n_stages - 1:
        return PruneDecision(False, "last stage: nothing left to save")
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
    # infeasible ones may still be the best feasible choice.
    dominators = [
        p
        for p in history
        if p.feasible
        and p.throughput >= current.throughput * (1.0 + config.margin)
        and p.latency <= current.latency
    ]
    if len(dominators) < config.min_dominators:
        return PruneDecision(
            False,
            f"throughput low but only {len(dominators)} trials dominate it "
            f"(need {config.min_dominators})",
        )
    remaining = n_stages - 1 - stage
    per_stage = current.duration_s / (stage + 1) if current.duration_s > 0 else 0.0
    reason = (
        f"stage {stage + 1}/{n_stages}: throughput {current.throughput:.1f} below "
        f"p{config.percentile:g} {floor:.1f} of {len(history)} completed trials"
    )
    if dominators:
        best = max(dominators, key=lambda p: p.throughput)
        reason += (
            f", and {len(dominators)} of them dominate it (best {best.throughput:.1f} at "
            f"latency {best.latency:.1f} vs {current.latency:.1f})"
        )
    return PruneDecision(True, reason, time_saved_s=remaining * per_stage)


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
