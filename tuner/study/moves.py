"""The local search's moves: what one step from a configuration may change, and how soon.

What a move changes, at which level it is tried (lower first) and the params it makes, for the
local search (tuner/study/local_search.py).

A categorical param moves to another choice (choices that are all numbers are ordered: the
adjacent ones first); a number to one of its range's ends, then halfway there, a quarter of the
way, one step (levels 0-3; a log range moves geometrically).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tuner.space.model import ParamSpec, SearchSpace, active_values, same_value

Params = dict[str, Any]


@dataclass(frozen=True)
class Move:
    param: str
    value: Any
    level: float
    switched_on: tuple[tuple[str, Any], ...] = ()  # values for params the move switches on


def moves(space: SearchSpace, params: Mapping[str, Any]) -> list[Move]:
    """Every one-param move from `params`, each with its level (lower is tried first). A
    categorical move that switches a number on comes also with that number at its range's
    ends (level + 0.5): NEXTN at 1 and at 5 draft steps, not only at the middle."""
    out: list[Move] = []
    for name, value in params.items():
        spec = space.params.get(name)
        if spec is None or spec.kind == "derived":
            continue
        if spec.kind == "categorical":
            for move in _categorical_moves(spec, value):
                out.append(move)
                out += _with_ends(space, params, move)
                out += _with_children(space, params, move)
        else:
            seen = {repr(value)}
            for level, target in _numeric_targets(spec, float(value)):
                if repr(target) not in seen:
                    seen.add(repr(target))
                    move = Move(name, target, level)
                    out.append(move)
                    out += _with_children(space, params, move)
    return out


def _with_children(space: SearchSpace, params: Mapping[str, Any], move: Move) -> list[Move]:
    """The move made together with each other choice of a categorical param whose activity
    depends on the moved one and that is on before and after it (level + 0.5): such a pair
    interacts by the space's own structure (adaptive speculation's meaning depends on the
    draft steps it starts from), so one param moved alone can hide what the pair gives."""
    moved = {**params, move.param: move.value}
    out = []
    for spec in space.params.values():
        if (
            move.param in spec.when
            and spec.kind == "categorical"
            and spec.name in params
            and spec.is_active(moved)
        ):
            for choice in spec.choices or ():
                if not same_value(choice, params[spec.name]):
                    out.append(
                        Move(move.param, move.value, move.level + 0.5, ((spec.name, choice),))
                    )
    return out


def _with_ends(space: SearchSpace, params: Mapping[str, Any], move: Move) -> list[Move]:
    moved = {**params, move.param: move.value}
    out = []
    for spec in space.params.values():
        newly_on = (
            move.param in spec.when
            and spec.kind in ("int", "float")
            and spec.name not in params
            and spec.is_active(moved)
        )
        if newly_on:
            for end in (spec.low, spec.high):
                value = snap(spec, float(end or 0))
                out.append(Move(move.param, move.value, move.level + 0.5, ((spec.name, value),)))
    return out


def _categorical_moves(spec: ParamSpec, value: Any) -> list[Move]:
    choices = list(spec.choices or ())
    others = [c for c in choices if not same_value(c, value)]
    numeric = all(isinstance(c, int | float) and not isinstance(c, bool) for c in choices)
    if not numeric or not isinstance(value, int | float) or isinstance(value, bool):
        return [Move(spec.name, c, 0.0) for c in others]
    # Ordered choices (chunk sizes, page sizes): the adjacent ones are the one-step moves.
    ordered = sorted(choices)
    at = min(range(len(ordered)), key=lambda i: abs(ordered[i] - value))
    return [Move(spec.name, c, float(abs(ordered.index(c) - at) - 1)) for c in others]


def _numeric_targets(spec: ParamSpec, value: float) -> list[tuple[float, Any]]:
    low, high = float(spec.low or 0), float(spec.high or 0)
    geometric = spec.log and low > 0 and value > 0
    out: list[tuple[float, Any]] = []
    for end in (low, high):
        for level, fraction in ((0.0, 1.0), (1.0, 0.5), (2.0, 0.25)):
            if geometric:
                target = value * (end / value) ** fraction
            else:
                target = value + (end - value) * fraction
            out.append((level, snap(spec, target)))
        unit = float(spec.step or (1 if spec.kind == "int" else (high - low) / 20))
        out.append((3.0, snap(spec, value + math.copysign(unit, end - value))))
    return [(level, t) for level, t in out if not equal(t, value)]


def few_values(spec: ParamSpec, upto: int) -> range | None:
    """Every value of an int param that has at most `upto` of them (draft steps 1-5), in order;
    None for any other param."""
    if spec.kind != "int":
        return None
    low, high, step = int(spec.low or 0), int(spec.high or 0), int(spec.step or 1)
    return range(low, high + 1, step) if (high - low) // step + 1 <= upto else None


def equal(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def snap(spec: ParamSpec, value: float) -> Any:
    """A number of the param's range: clipped, on its step, an int for an int param."""
    low, high = float(spec.low or 0), float(spec.high or 0)
    value = min(max(value, low), high)
    if spec.step:
        step = float(spec.step)
        value = min(low + round((value - low) / step) * step, high)
        if spec.kind == "float":
            text = f"{step:.10f}".rstrip("0")
            return round(value, len(text.split(".")[1]) if "." in text else 0)
    if spec.kind == "int":
        return round(value)
    return float(value)


def neutral(spec: ParamSpec) -> Any:
    """The value a param takes when a move switches it on and no trial had it: the middle of
    its range (geometric for a log range), the first choice of a categorical."""
    if spec.kind == "categorical":
        return (spec.choices or (None,))[0]
    low, high = float(spec.low or 0), float(spec.high or 0)
    middle = math.sqrt(low * high) if spec.log and low > 0 else (low + high) / 2
    return snap(spec, middle)


def complete(space: SearchSpace, params: Mapping[str, Any], donor: Mapping[str, Any]) -> Params:
    """The active sampled params of `params` in the space's order: inactive ones dropped,
    newly active ones from `donor`, else `neutral`."""

    def fill(spec: ParamSpec) -> Any:
        return donor[spec.name] if spec.name in donor else neutral(spec)

    values = active_values(space, params, fill)
    return {k: v for k, v in values.items() if space.params[k].kind != "derived"}


def key(params: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


def unit(spec: ParamSpec, value: float) -> float:
    low, high = float(spec.low or 0), float(spec.high or 0)
    if spec.log and low > 0 and value > 0:
        low, high, value = math.log(low), math.log(high), math.log(value)
    return (value - low) / (high - low) if high > low else 0.0
