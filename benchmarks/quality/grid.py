"""Configurations of a space: each parameter's values, nested loops over them, and the flags a
configuration stands for (the objective's own call)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import numpy as np
from optuna.trial import FixedTrial

from tuner.space import ParamSpec, SearchSpace, suggest_flags


def numeric_values(param: ParamSpec, limit: int | None) -> list[Any]:
    """Every value of a numeric param (limit None), or `limit` of them spread over its range."""
    low, high = float(param.low), float(param.high)  # type: ignore[arg-type]
    every: list[Any]
    if param.kind == "int":
        every = list(range(int(low), int(high) + 1, int(param.step or 1)))
    elif param.step:
        step = float(param.step)
        count = round((high - low) / step) + 1
        every = [round(low + i * step, 6) for i in range(count)]
    else:
        every = list(np.linspace(low, high, 65))
    if limit is None or len(every) <= limit:
        return every
    if limit == 1:  # the fast run's grid (cli.py --fast): the high end, most memory and slots
        return [every[-1]]
    spread = np.geomspace(low, high, limit) if param.log else np.linspace(low, high, limit)
    return sorted({_nearest(every, float(s)) for s in spread})


def _nearest(values: list[Any], target: float) -> Any:
    return min(values, key=lambda v: abs(v - target))


def param_values(param: ParamSpec, limit: int | None) -> list[Any]:
    if param.kind == "categorical":
        return list(param.choices or ())
    return numeric_values(param, limit)


def nested_loops(
    space: SearchSpace, values_of: Callable[[ParamSpec], Sequence[Any]]
) -> Iterator[dict[str, Any]]:
    """Sampled-param dicts in nested-loop order: params in the space's order, the first one
    outermost; a param whose condition is false is not looped over; derived ones are computed."""
    specs = list(space.params.values())

    def walk(i: int, values: dict[str, Any], sampled: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if i == len(specs):
            yield dict(sampled)
            return
        spec = specs[i]
        if not spec.is_active(values):
            yield from walk(i + 1, values, sampled)
        elif spec.kind == "derived":
            # A derived param ignores the trial; FixedTrial answers as a trial would.
            derived = spec.suggest(cast(Any, FixedTrial({})), values)
            yield from walk(i + 1, {**values, spec.name: derived}, sampled)
        else:
            for v in values_of(spec):
                yield from walk(i + 1, {**values, spec.name: v}, {**sampled, spec.name: v})

    yield from walk(0, {}, {})


def full_flags(space: SearchSpace, params: dict[str, Any]) -> dict[str, Any]:
    """The flags the objective would build for these sampled params (the same call)."""
    tuned = suggest_flags(cast(Any, FixedTrial(params)), space)
    flags = {"model_path": space.model_path, **space.fixed_flags, **tuned}
    return {k: v for k, v in flags.items() if v is not None}


def default_flags(space: SearchSpace) -> dict[str, Any]:
    """Trial 0's flags: sglang's defaults, no tuned flag."""
    return {k: v for k, v in {"model_path": space.model_path, **space.fixed_flags}.items() if v}
