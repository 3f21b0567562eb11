"""Range bounds written relative to the workload, resolved when the space is loaded.

    max_running_requests: {low: 1, high: concurrency, log: true}

A bound may be a number or an arithmetic expression (the `derive:` language: + - * / // %, min,
max) over these names:

    concurrency   bench.concurrency, the most requests the benchmark keeps in flight. In a closed
                  loop of C clients sglang never runs more than C requests at once, so a running cap
                  above C behaves as C (bounding the cap by the client count lifted the tuner from
                  0.72 to 0.96 of the optimum at 40 trials,
                  docs/decisions.md#the-running-cap-is-bounded-by-the-client-count). An open-loop
                  workload (`request_rate` set) with `concurrency: null` has no client count; the
                  bound is then an error that says to give bench.concurrency (the most requests the
                  benchmark may hold in flight), to use `capacity`, or a number.

    capacity      the most requests the server can run at once for this workload: what the
                  KV pool holds of the workload's requests (prompt + output) at the space's
                  largest `mem_fraction_static`, within the running cap sglang's memory plan
                  allows. An open loop (`request_rate`) has no client count; a cap above this
                  behaves the same, as the server cannot run more. `tuner optimize` works it out
                  from config.json and the GPU's memory before the study starts
                  (tuner/predict/capacity_bound.py) and stores it with the space; `capacity: N`
                  at the top of the file fixes it. Until then the range is provisional
                  (PROVISIONAL_CAPACITY), so that the file can be checked anywhere.

The resolved number is what the sampler sees; the expression is kept with the param so that the
stored space (and a resumed study's comparison) shows the relation, not just the number.
"""

from __future__ import annotations

import math
from typing import Any

from tuner.space.derive import DeriveError, evaluate, expression_names
from tuner.space.model import BenchSettings

BOUND_NAMES = ("concurrency", "capacity")
PROVISIONAL_CAPACITY = 4096  # sglang's largest default running cap; replaced before a study


class BoundError(ValueError):
    """A relative bound that cannot be resolved; the message says why and what is allowed."""


def bound_names(bench: BenchSettings, capacity: int | None = None) -> dict[str, Any]:
    return {"concurrency": bench.concurrency, "capacity": capacity or PROVISIONAL_CAPACITY}


def resolve_bound(
    expression: str, bench: BenchSettings, integer: bool, capacity: int | None = None
) -> int | float:
    """The number a relative bound stands for with this benchmark (and running capacity)."""
    try:
        names = expression_names(expression)
    except DeriveError as exc:
        raise BoundError(str(exc)) from None
    values = bound_names(bench, capacity)
    for name in names:
        if name not in values:
            raise BoundError(
                f"{expression!r} is not a number, and a bound written as an expression may "
                f"name only {', '.join(BOUND_NAMES)} (it names {name!r})"
            )
        if values[name] is None:
            raise BoundError(
                f"{expression!r} needs bench.{name}, which is null "
                + (
                    f"(an open loop at request_rate {bench.request_rate:g}): give bench.{name}, "
                    "the most requests the benchmark holds in flight, write `capacity` (what "
                    "the GPU can run at once) instead, or write a number"
                    if bench.request_rate is not None
                    else "(no cap on requests in flight): set it or write a number"
                )
            )
    try:
        value = evaluate(expression, values)
    except (ZeroDivisionError, TypeError) as exc:
        raise BoundError(f"{expression!r} cannot be computed: {exc}") from None
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise BoundError(f"{expression!r} gives {value!r}, not a finite number")
    if integer:
        return math.floor(value + 1e-9)
    return float(value)
