"""Scoring: what a study found at its true worth, after each budget.

The best noise-free throughput and the hypervolume among the trials the tuner recorded as
complete and SLO-feasible, over the optimum's; trials and modelled GPU hours to 95% of the best;
what the default saves against its ablations; best-so-far curves.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmarks.quality.study import StudyRun, TrialLog
from benchmarks.quality.truth import OptimumReport, Truth, area
from tuner.results import record

REACH = 0.95  # "trials to reach 95% of the oracle's best"


@dataclass
class Figures:
    """One study's figures after its first `budget` trials."""

    best_fraction: float
    hv_fraction: float
    # The best among those trials that meet the SLOs without noise too: a trial measured
    # within a limit that it exceeds noise-free counts in best_fraction, not here.
    feasible_fraction: float
    trials_to_reach: int | None
    gpu_hours_to_reach: float | None
    gpu_hours: float
    crashed: int
    pruned: int
    skipped: int


def _padded(curve: list[float], length: int) -> list[float]:
    return curve + [curve[-1] if curve else 0.0] * (length - len(curve))


def _recorded(t: TrialLog) -> Truth | None:
    """The noise-free truth of a launched trial the tuner recorded as complete and
    SLO-feasible; None for any other trial."""
    return t.truth if t.counted and t.truth is not None and t.truth.launch_ok else None


def best_so_far(run: StudyRun, optimum: OptimumReport) -> list[float]:
    best, curve = 0.0, []
    for t in run.trials:
        if (truth := _recorded(t)) is not None:
            best = max(best, truth.throughput)
        curve.append(best / optimum.best_throughput)
    return curve


def figures(run: StudyRun, optimum: OptimumReport, budget: int) -> Figures:
    trials = run.trials[:budget]
    curve = best_so_far(run, optimum)[:budget]
    reach = next((i for i, f in enumerate(curve) if f >= REACH), None)
    recorded = [truth for t in trials if (truth := _recorded(t)) is not None]
    points = [(truth.throughput, truth.latency) for truth in recorded]
    hv = area(points, optimum.reference_latency) / optimum.hypervolume
    truly = [truth.throughput for truth in recorded if truth.feasible]
    gpu = [t.gpu_s for t in trials]
    return Figures(
        best_fraction=curve[-1] if curve else 0.0,
        hv_fraction=hv,
        feasible_fraction=max(truly, default=0.0) / optimum.best_throughput,
        trials_to_reach=None if reach is None else reach + 1,
        gpu_hours_to_reach=None if reach is None else sum(gpu[: reach + 1]) / 3600,
        gpu_hours=sum(gpu) / 3600,
        crashed=sum(t.crashed for t in trials),
        pruned=sum(t.outcome == record.OUTCOME_PRUNED for t in trials),
        skipped=sum(t.outcome == record.OUTCOME_SKIPPED for t in trials),
    )


def median(values: Sequence[float | None]) -> float:
    """Median with None as 'never' (infinity)."""
    return float(statistics.median([math.inf if v is None else v for v in values]))


def spread(values: Sequence[float | None], fmt: str) -> str:
    """'median [min-max]' of per-seed figures; None reads as not reached."""
    if len(values) == 1:
        return _num(values[0], fmt)
    finite = [v for v in values if v is not None]
    if not finite:
        return "not reached"
    low = _num(min(finite), fmt)
    high = _num(max(finite), fmt) if len(finite) == len(values) else "not reached"
    return f"{_num(median(values), fmt)} [{low}–{high}]"


def _num(value: float | None, fmt: str) -> str:
    if value is None or math.isinf(value):
        return "not reached"
    return format(value, fmt)


def collect(
    runs: list[StudyRun], optimum: OptimumReport, budgets: Sequence[int]
) -> dict[str, dict[int, list[Figures]]]:
    table: dict[str, dict[int, list[Figures]]] = {}
    for run in runs:
        for budget in budgets:
            table.setdefault(run.method, {}).setdefault(budget, []).append(
                figures(run, optimum, budget)
            )
    return table


@dataclass(frozen=True)
class Saving:
    """GPU time and crashes an ablation spends beyond the default, per seed (same seed, so the
    same sampler draws: the pair differs only by the ablated part)."""

    hours: list[float]
    percent: list[float]
    crashes: list[int]


def savings(
    table: dict[str, dict[int, list[Figures]]], ablation: str, budget: int
) -> Saving | None:
    if "default" not in table or ablation not in table:
        return None
    pairs = list(zip(table["default"][budget], table[ablation][budget], strict=True))
    return Saving(
        hours=[b.gpu_hours - a.gpu_hours for a, b in pairs],
        percent=[100 * (b.gpu_hours - a.gpu_hours) / b.gpu_hours for a, b in pairs],
        crashes=[b.crashed - a.crashed for a, b in pairs],
    )


ABLATIONS = (("tpe-no-pruning", "stage pruning"), ("tpe-no-feasibility", "the feasibility model"))


def curves(
    runs: list[StudyRun], optimum: OptimumReport, budget: int
) -> dict[str, dict[str, list[float]]]:
    """Per method: median, min and max over seeds of best-so-far / oracle best, per trial."""
    out: dict[str, dict[str, list[float]]] = {}
    for name in dict.fromkeys(r.method for r in runs):
        # A study that stopped early (mostly infeasible) keeps its best for the trials it lacks.
        padded = [
            _padded(best_so_far(r, optimum)[:budget], budget) for r in runs if r.method == name
        ]
        rows = np.array(padded)
        out[name] = {
            "median": np.median(rows, axis=0).tolist(),
            "min": rows.min(axis=0).tolist(),
            "max": rows.max(axis=0).tolist(),
        }
    return out


def gpu_curves(
    runs: list[StudyRun], optimum: OptimumReport, budget: int, points: int = 120
) -> tuple[list[float], dict[str, list[float | None]]]:
    """Median over seeds of best-so-far / oracle best against modelled GPU hours spent, up to
    the least any seed of the method spent (beyond it the median would be over fewer seeds)."""
    spent = [np.cumsum([t.gpu_s for t in r.trials[:budget]]) / 3600 for r in runs]
    top = max((float(s[-1]) for s in spent if len(s)), default=1.0)
    grid = np.linspace(0.0, top, points)
    out: dict[str, list[float | None]] = {}
    for name in dict.fromkeys(r.method for r in runs):
        rows, ends = [], []
        for r, s in zip(runs, spent, strict=True):
            if r.method != name or not len(s):
                continue
            best = np.array(best_so_far(r, optimum)[:budget])
            idx = np.searchsorted(s, grid, side="right") - 1
            rows.append(np.where(idx >= 0, best[np.clip(idx, 0, None)], 0.0))
            ends.append(float(s[-1]))
        med = np.median(np.array(rows), axis=0)
        end = min(ends, default=0.0)
        out[name] = [float(v) if x <= end else None for x, v in zip(grid, med, strict=True)]
    return grid.tolist(), out
