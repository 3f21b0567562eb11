"""Bisections of one number against an SLO: where the local search tries a value halfway.

The local search (tuner/study/local_search.py) tries the value halfway between two measured
trials in three cases.

- A *window*: while no trial meets every SLO, the best trial and one a number away break
  different SLOs; the SLOs can hold only between the two. A trial that breaks only the other
  SLOs and differs in more numbers marks one too (`wide`): each such number is tried halfway.
  The trial nearest the best of those that break only the other SLOs is the window's
  *partner* (`window_partner`): where no number between the two meets every SLO, the local
  search tries the partner with another choice of a categorical param.
- An *edge*: the best trial meets the SLOs and a trial a number away with more throughput breaks
  one; the best value of such a number sits on the SLO's edge between them.
- A *carried edge*: a trial that serves about what the best does and sits further inside the
  SLO that bounds the best's number (lpm at the same running cap, with a lower p99 TPOT) has
  its edge further out: it is tried at the nearest value past the best's edge.
- A *valley*: trials a number apart all miss the same SLO by a little with more throughput than
  the best trial within the SLOs; an SLO metric that is not monotone in the number (p99 TPOT in
  the draft steps) may have its bottom between them.

A trial within an SLO by less than a margin of its limit counts as past it (`sure_view`): under
measurement noise it may be.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from optuna.trial import FrozenTrial

from tuner.space.model import SearchSpace
from tuner.study.moves import Params, complete, equal, key, snap, unit
from tuner.study.standing import (
    Standing,
    broken_slos,
    past_throughput,
    slo_constraints,
    sure_view,
)


def past_edge(
    space: SearchSpace, scored: list[tuple[FrozenTrial, Standing]], top: float
) -> list[tuple[FrozenTrial, float]]:
    """(trial, the throughput it measured) of the trials over an SLO that measured more than
    `top`, best standing first (`past_throughput`)."""
    return [
        (t, past)
        for t, s in scored
        if s[0] == 0 and (past := past_throughput(space, t)) is not None and past > top
    ]


def boundary_trial(
    space: SearchSpace, scored: list[tuple[FrozenTrial, Standing]]
) -> FrozenTrial | None:
    feasible = [t.values[0] for t, s in scored if s[0] == 1]
    if not feasible:
        return None
    beyond = past_edge(space, scored, max(feasible))
    return beyond[0][0] if beyond else None


def window_moves(space: SearchSpace, scored: list[tuple[FrozenTrial, Standing]]) -> list[Params]:
    """Window moves from the best trial, while it breaks an SLO: for each trial one number away
    that breaks only other SLOs, that number halfway. A trial that breaks only other SLOs and
    differs in more than one number marks a window too: each number is set halfway to the
    nearest value of it such a trial has on either side of the best's."""
    best, mine = scored[0]
    if mine[0] != 0:
        return []
    out: list[Params] = []
    partners = _far_side(scored)
    for t in partners:
        middle = halfway(space, best, t)
        if middle is not None:
            out.append(middle)
    seen = {key(p) for p in out}
    numbers = [n for n in best.params if space.params[n].kind in ("int", "float")]
    for name in numbers:
        for value in _nearest_sides(name, best.params, partners):
            middle = halfway_in(space, best.params, name, value)
            if middle is not None and key(middle) not in seen:
                seen.add(key(middle))
                out.append(middle)
    return out


def window_partner(
    space: SearchSpace, scored: list[tuple[FrozenTrial, Standing]]
) -> FrozenTrial | None:
    """While the best trial breaks an SLO: of the trials that break only other SLOs (the far
    side of a window), the one nearest the best in its params (numbers by their share of the
    range, a categorical choice apart counting as a whole range), else None. Between the two,
    the SLOs may hold nowhere on the line joining them (lpm at every running cap below 64
    clients queues the TTFT tail past its limit before the TPOT limit is met); from the
    partner's side, another param may open the way (fcfs at the partner's cap)."""
    best, mine = scored[0]
    partners = _far_side(scored) if mine[0] == 0 else []
    if not partners:
        return None

    def apart(t: FrozenTrial) -> float:
        gaps = _gaps(space, best.params, t.params)
        numbers = {name for _gap, name in gaps}
        others = [name for name in differs_in(best, t) if name not in numbers]
        return sum(gap for gap, _name in gaps) + len(others)

    return min(partners, key=apart)


def _far_side(scored: list[tuple[FrozenTrial, Standing]]) -> list[FrozenTrial]:
    """The trials past an SLO that break only SLOs the best trial (`scored[0]`) meets, best
    standing first: the far side of a window."""
    broken = broken_slos(scored[0][0])
    return [
        t for t, s in scored[1:] if s[0] == 0 and (other := broken_slos(t)) and not other & broken
    ]


def _nearest_sides(name: str, params: Mapping[str, Any], trials: list[FrozenTrial]) -> list[float]:
    """Of the values of the number `name` that `trials` set, the nearest to `params`'s below
    it and the nearest above it."""
    here = float(params[name])
    values = [float(v) for t in trials if isinstance(v := t.params.get(name), int | float)]
    below = [v for v in values if v < here and not equal(v, here)]
    above = [v for v in values if v > here and not equal(v, here)]
    return ([max(below)] if below else []) + ([min(above)] if above else [])


def edge_moves(
    space: SearchSpace,
    scored: list[tuple[FrozenTrial, Standing]],
    tie: float = 0.0,
    margin: float = 0.0,
    carry_tie: float = 0.0,
) -> list[tuple[Params, float]]:
    """The edge moves, each with the throughput the trial past the edge measured: what the move
    can gain at most. A number whose larger values buy throughput until an SLO breaks (a running
    cap against a TPOT limit) has its best value at the SLO's edge, between the best trial and
    the nearest trial past the edge: it is bisected, as the window between two broken SLOs is.
    The moves start from the best trial and from the trials within `tie` of its throughput
    (the local search's edge tie), and lead to a trial past the edge that measured more than the
    best. A trial within `margin` of a limit counts as past it (`sure_view`). With `carry_tie`,
    the carried edges follow (`carried_edges`)."""
    scored = sure_view(scored, margin)
    best, mine = scored[0]
    if mine[0] != 1 or not best.values:
        return []
    top = float(best.values[0])
    bases = [t for t, s in scored if s[0] == 1 and s[1] >= top * (1 - tie)]
    out: list[tuple[Params, float]] = []
    seen: set[tuple[Any, ...]] = set()
    beyond = past_edge(space, scored, top)
    for base in bases:
        for t, past in beyond:
            middle = halfway(space, base, t)
            if middle is not None and key(middle) not in seen:
                seen.add(key(middle))
                out.append((middle, past))
    if carry_tie > 0:
        near = [t for t, s in scored if s[0] == 1 and s[1] >= top * (1 - carry_tie)]
        for params, past in carried_edges(space, bases, near, beyond, margin):
            if key(params) not in seen:
                seen.add(key(params))
                out.append((params, past))
    return out


def carried_edges(
    space: SearchSpace,
    bases: list[FrozenTrial],
    near: list[FrozenTrial],
    beyond: list[tuple[FrozenTrial, float]],
    gain: float,
) -> list[tuple[Params, float]]:
    """Edges carried to another configuration, each with the throughput of the trial past the
    edge. Where a base (the best trial, or one tied with it) and a trial past an SLO differ in
    one number, and a trial of `near` (within the SLOs, with about the base's throughput)
    differs from the base otherwise and meets the SLOs that trial broke with more room, by
    `gain` of a limit or more, the number's edge lies further out for it: it is tried at the
    nearest value past the base's edge (`nearest_past`), and bisected against its own trials
    past the edge in that number, as the best trial is (`edge_moves`). A queue policy that
    lowers p99 TPOT at the same running cap may serve the next step of a staircase that the
    cap's edge under the other policy stops short of."""
    out: list[tuple[Params, float]] = []
    for base in bases:
        mine = slo_constraints(base)
        for t, past in beyond:
            diff = differs_in(base, t)
            if len(diff) != 1 or space.params[diff[0]].kind not in ("int", "float"):
                continue
            name = diff[0]
            broken = broken_slos(t, gain) & set(mine)
            if not broken:
                continue
            value = nearest_past(space, name, base.params, float(t.params[name]), beyond)
            for other in near:
                here = other.params.get(name)
                if other.number == base.number or not isinstance(here, int | float):
                    continue
                if math.copysign(1.0, value - float(here)) != math.copysign(
                    1.0, value - float(base.params[name])
                ) or equal(float(here), value):
                    continue  # not on the base's side of the edge
                theirs = slo_constraints(other)
                if any(theirs.get(k, math.inf) > mine[k] - gain for k in broken):
                    continue
                moved = complete(space, {**other.params, name: snap(space.params[name], value)},
                                 other.params)  # fmt: skip
                out.append((moved, past))
                # Once it has trials of its own past the edge, its own edge is bisected.
                for own, throughput in beyond:
                    # halfway: they differ in one number only; that it is `name`, checked here.
                    middle = halfway(space, other, own)
                    if middle is not None and repr(own.params.get(name)) != repr(here):
                        out.append((middle, throughput))
    return out


def valley_moves(
    space: SearchSpace,
    scored: list[tuple[FrozenTrial, Standing]],
    near: float,
    margin: float = 0.0,
    flat: float = 0.0,
) -> list[tuple[Params, float]]:
    """The valley moves, each with the lesser throughput of
    its two trials, the most first. Trials that differ in one number only (a param left out
    counts as one set to None) are a row; where no trial of a row meets every SLO by `margin`
    of its limit or more (closer, it may be past it), the one
    that misses by least and its neighbours in the row (the nearest values measured) are
    pairs. A pair counts when both miss the same SLOs (or come within `margin` of them), each
    by less than `near` of its limit; both measured more than `flat` above the best trial that
    meets every SLO by `margin` (any throughput, while none does: a pair 1% above it cannot
    gain what a launch costs); and the two are more than `flat` apart (two memory fractions
    that run alike, both just past a TTFT limit, are no valley). Its move is the number
    halfway."""
    top = max((s[1] for _t, s in sure_view(scored, margin) if s[0] == 1), default=0.0)
    rows: dict[tuple[str, tuple[Any, ...]], dict[float, tuple[float, FrozenTrial]]] = {}
    for t, _s in scored:
        misses = [v for k, v in slo_constraints(t).items() if k.startswith("slo:")]
        if not misses:
            continue
        miss = max(misses)
        for name, value in t.params.items():
            spec = space.params.get(name)
            if spec is None or spec.kind not in ("int", "float") or value is None:
                continue
            rest = {k: v for k, v in t.params.items() if k != name and v is not None}
            row = rows.setdefault((name, key(rest)), {})
            if float(value) not in row or miss < row[float(value)][0]:
                row[float(value)] = (miss, t)
    out: dict[tuple[Any, ...], tuple[Params, float]] = {}
    for row in rows.values():
        values = sorted(row)
        least = min(range(len(values)), key=lambda i: row[values[i]][0])
        low = row[values[least]]
        if low[0] <= -margin:
            continue  # a value of the row meets every SLO: an edge, not a valley
        for i in (least - 1, least + 1):
            if not 0 <= i < len(values):
                continue
            pair = (low, row[values[i]])
            if any(m > near for m, _t in pair):
                continue
            if broken_slos(pair[0][1], margin) != broken_slos(pair[1][1], margin):
                continue
            measured = [past_throughput(space, t) for _miss, t in pair]
            throughputs = [p for p in measured if p is not None and p > top * (1 + flat)]
            if len(throughputs) < 2 or abs(throughputs[0] / throughputs[1] - 1) <= flat:
                continue  # below the best, or the number changed nothing measurable
            middle = halfway(space, low[1], row[values[i]][1])
            if middle is not None:
                past = min(throughputs)
                if key(middle) not in out or out[key(middle)][1] < past:
                    out[key(middle)] = (middle, past)
    return sorted(out.values(), key=lambda pv: pv[1], reverse=True)


def halfway(space: SearchSpace, base: FrozenTrial, other: FrozenTrial) -> Params | None:
    """`base`'s params with the one number in which `other` differs set halfway between the two
    (geometric on a log range); None when they differ otherwise or no value lies between."""
    diff = differs_in(base, other)
    if len(diff) != 1 or space.params[diff[0]].kind not in ("int", "float"):
        return None
    return halfway_in(space, base.params, diff[0], float(other.params[diff[0]]))


def differs_in(base: FrozenTrial, other: FrozenTrial) -> list[str]:
    """The params the two trials set apart (one left out counts as set to None)."""
    return sorted(k for k in set(other.params) | set(base.params)
                  if repr(other.params.get(k)) != repr(base.params.get(k)))  # fmt: skip


def halfway_in(
    space: SearchSpace, params: Mapping[str, Any], name: str, other: float
) -> Params | None:
    """`params` with the number `name` set halfway to `other` (geometric on a log range); None
    when no value of its range lies between the two."""
    spec, a = space.params[name], float(params[name])
    middle = math.sqrt(a * other) if spec.log and a > 0 and other > 0 else (a + other) / 2
    value = snap(spec, middle)
    if equal(float(value), a) or equal(float(value), other):
        return None
    # Params the new value switches on (adaptive speculation at 3 draft steps, not at 2 or 4)
    # take a value here: left out, the sampler would draw one, and the proposal would never
    # match the trial it becomes, so it would be proposed again and again.
    return complete(space, {**params, name: value}, params)


def nearest_past(
    space: SearchSpace,
    name: str,
    best: Mapping[str, Any],
    value: float,
    past: list[tuple[FrozenTrial, float]],
) -> float:
    """Of the values of the number `name` that the trials `past` (past an SLO's edge) have on
    `value`'s side of `best`'s, the nearest to `best`'s (on the range's scale): the edge lies
    no farther. `value` itself when none is nearer."""
    spec, here = space.params[name], float(best[name])
    side = math.copysign(1.0, value - here)
    nearest = value
    for t, _throughput in past:
        other = t.params.get(name)
        if not isinstance(other, int | float) or other == here:
            continue
        if math.copysign(1.0, float(other) - here) != side:
            continue
        gap = abs(unit(spec, float(other)) - unit(spec, here))
        if gap < abs(unit(spec, nearest) - unit(spec, here)):
            nearest = float(other)
    return nearest


def by_gap(space: SearchSpace, a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """The numbers both configurations set and set apart, the widest gap on the range's scale
    (log on a log range) first."""
    gaps = _gaps(space, a, b)
    return [name for gap, name in sorted(gaps, reverse=True) if gap > 0]


def _gaps(
    space: SearchSpace, a: Mapping[str, Any], b: Mapping[str, Any]
) -> list[tuple[float, str]]:
    """(gap on the range's scale, name) of each number both configurations set."""
    return [
        (abs(unit(spec, float(a[name])) - unit(spec, float(b[name]))), name)
        for name, spec in space.params.items()
        if spec.kind in ("int", "float") and name in a and name in b
    ]
