"""Pareto front, knee point and hypervolume of two objectives: pure functions, no Optuna.

Points carry their values in the study's objective order together with the directions, so the
same code serves (maximize throughput, minimize latency) and any other pair.

Example:
    >>> pts = [Point(0, (100.0, 20.0)), Point(1, (200.0, 30.0)), Point(2, (90.0, 40.0))]
    >>> [p.key for p in pareto_front(pts, ("maximize", "minimize"))]
    [0, 1]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.results.goals import MAXIMIZE, MINIMIZE


@dataclass(frozen=True)
class Point:
    key: int  # the trial number
    values: tuple[float, ...]


def _as_minimized(values: Sequence[float], directions: Sequence[str]) -> tuple[float, ...]:
    # One sign convention (smaller is better) keeps dominance and hypervolume to one code path.
    return tuple(v if d == MINIMIZE else -v for v, d in zip(values, directions, strict=True))


def dominates(a: Sequence[float], b: Sequence[float], directions: Sequence[str]) -> bool:
    """True when `a` is at least as good as `b` in every objective and better in one."""
    am, bm = _as_minimized(a, directions), _as_minimized(b, directions)
    return all(x <= y for x, y in zip(am, bm, strict=True)) and any(
        x < y for x, y in zip(am, bm, strict=True)
    )


def pareto_front(points: Sequence[Point], directions: Sequence[str]) -> list[Point]:
    """The non-dominated points with finite values, sorted by the first objective, best last.

    Duplicates of a front point (same values) are all kept: two trials that measured the same
    are equally optimal.
    """
    finite = [p for p in points if all(math.isfinite(v) for v in p.values)]
    front = [
        p for p in finite if not any(dominates(q.values, p.values, directions) for q in finite)
    ]
    first_sign = 1.0 if directions[0] == MAXIMIZE else -1.0
    return sorted(front, key=lambda p: (first_sign * p.values[0], p.key))


def knee_point(front: Sequence[Point], directions: Sequence[str]) -> Point | None:
    """The front point that trades the two objectives best (two objectives only).

    Both objectives are scaled to [0, 1] over the front with 1 the best; the knee is the point
    farthest above the chord between the two extremes, i.e. where giving up a little of one
    objective stops buying much of the other. With fewer than three distinct points there is no
    bulge to find; each objective is then taken relative to its best value (min-max scaling
    would put two points at equal distance from any corner) and the point closest to the ideal
    (1, 1) wins: 300 tok/s at 11 ms beats 100 tok/s at 10 ms.
    """
    if not front:
        return None
    if len(directions) != 2:
        raise ValueError("knee_point needs exactly two objectives")
    scaled = _scaled_goodness(front, directions)
    distinct = set(scaled)
    if len(distinct) >= 3:
        # Chord from (1, 0) to (0, 1) in goodness space: x + y = 1. Distance above it is
        # proportional to x + y - 1; ties go to the smaller trial number (stable order).
        best = max(range(len(front)), key=lambda i: (sum(scaled[i]), -front[i].key))
    else:
        relative = _relative_goodness(front, directions) or scaled
        best = min(
            range(len(front)),
            key=lambda i: (math.hypot(1 - relative[i][0], 1 - relative[i][1]), front[i].key),
        )
    return front[best]


def _relative_goodness(
    points: Sequence[Point], directions: Sequence[str]
) -> list[tuple[float, float]] | None:
    # Value / best for a maximised objective, best / value for a minimised one: 1 is the best.
    # Only meaningful for positive values (throughputs, latencies); None otherwise.
    if any(v <= 0 for p in points for v in p.values):
        return None
    best = [
        max(p.values[j] for p in points) if d == MAXIMIZE else min(p.values[j] for p in points)
        for j, d in enumerate(directions)
    ]
    return [
        tuple(  # type: ignore[misc]
            p.values[j] / best[j] if d == MAXIMIZE else best[j] / p.values[j]
            for j, d in enumerate(directions)
        )
        for p in points
    ]


def _scaled_goodness(
    points: Sequence[Point], directions: Sequence[str]
) -> list[tuple[float, float]]:
    out: list[list[float]] = [[0.0, 0.0] for _ in points]
    for j, direction in enumerate(directions):
        column = [p.values[j] for p in points]
        lo, hi = min(column), max(column)
        for i, v in enumerate(column):
            if hi == lo:
                out[i][j] = 1.0
            elif direction == MAXIMIZE:
                out[i][j] = (v - lo) / (hi - lo)
            else:
                out[i][j] = (hi - v) / (hi - lo)
    return [(a, b) for a, b in out]


def hypervolume(
    points: Sequence[Point], directions: Sequence[str], reference: Sequence[float]
) -> float:
    """Area dominated by `points` and bounded by `reference` (two objectives).

    Points that do not dominate the reference add nothing.
    """
    ref = _as_minimized(reference, directions)
    inside = sorted(
        {
            _as_minimized(p.values, directions)
            for p in points
            if all(math.isfinite(v) for v in p.values)
        }
    )
    inside = [q for q in inside if q[0] < ref[0] and q[1] < ref[1]]
    area = 0.0
    best_second = ref[1]
    # Sweep along the first objective; each point adds the strip it improves on the second.
    for first, second in inside:
        if second < best_second:
            area += (ref[0] - first) * (best_second - second)
            best_second = second
    return area


def hypervolume_history(
    points_in_order: Sequence[Point | None],
    directions: Sequence[str],
    reference: Sequence[float],
) -> list[float]:
    """Hypervolume after each trial; None stands for a trial that added no feasible point."""
    seen: list[Point] = []
    history: list[float] = []
    current = 0.0
    for point in points_in_order:
        if point is not None:
            seen.append(point)
            current = hypervolume(seen, directions, reference)
        history.append(current)
    return history
