"""sglang's defaults as values of the space's params: the Optuna params of the default trial.

The default trial launches with no tuned flag, but it must not reach the sampler as a trial with no
params: Optuna's intersection search space (GPSampler, and TPE with `group=False`) is the set of
params every trial has, so one empty trial empties it and those samplers silently fall back to
independent random sampling
(docs/decisions.md#sglangs-defaults-are-trial-0-told-to-the-sampler-with-their-values). The default
trial is therefore queued with the values sglang would use, wherever the space can express them:

- a categorical param: sglang's parser default when it is one of the choices, else `null` when
  that is a choice (the flag not passed), else the value an automatic default resolves to
  (`mamba_radix_cache_strategy: auto` is `extra_buffer` with overlap scheduling on);
- `mem_fraction_static` (automatic in sglang): the fraction sglang derives from the GPU's memory
  (tuner/predict/memory.py), rounded to the param's step and clipped to its range;
- `max_running_requests` (automatic): the cap sglang would settle on from the memory estimate,
  clipped to the range (a cap at or above the client count behaves as the client count);
- `chunked_prefill_size` (automatic): 8192, the value the memory estimate assumes, when a choice;
- a numeric param with a numeric parser default inside its range: that default.

Anything else is left out and the default trial simply lacks it. The launched flags stay empty:
these values only tell the sampler where the default configuration sits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from tuner.engines.model_config import ModelMemory
from tuner.engines.sglang import load_snapshot
from tuner.predict.memory import MemoryEstimate, estimate_memory
from tuner.space.model import ParamSpec, SearchSpace, same_value

# What sglang's `auto` resolves to with its other defaults (overlap scheduling on, radix cache on).
_AUTO = {"mamba_radix_cache_strategy": "extra_buffer"}
_ASSUMED_CHUNKED_PREFILL = 8192


def baseline_params(space: SearchSpace, estimate: MemoryEstimate | None = None) -> dict[str, Any]:
    """{param: value} for the default trial; see the module docstring for the rules."""
    try:
        snapshot = load_snapshot(space.engine_version)
        defaults = {o.dest: o.default for o in snapshot.options}
    except Exception:  # an unknown version: only the automatic rules below
        defaults = {}
    values: dict[str, Any] = {}
    for spec in space.params.values():
        if not spec.is_active(values) or spec.kind == "derived":
            continue
        value = _value(spec, defaults.get(spec.name), estimate)
        if value is not _MISSING:
            values[spec.name] = value
    return values


_MISSING = object()
Baseline = Callable[[], dict[str, Any]]  # gives the default trial's params when it is queued


def _value(spec: ParamSpec, default: Any, estimate: MemoryEstimate | None) -> Any:
    if spec.kind == "categorical":
        choices = spec.choices or ()
        for candidate in (default, _AUTO.get(spec.name)):
            if candidate is not None and any(same_value(candidate, c) for c in choices):
                return next(c for c in choices if same_value(candidate, c))
        if any(c is None for c in choices):
            return None
        if spec.name == "chunked_prefill_size" and _ASSUMED_CHUNKED_PREFILL in choices:
            return _ASSUMED_CHUNKED_PREFILL
        return _MISSING
    number: float | None = None
    if isinstance(default, int | float) and not isinstance(default, bool):
        number = float(default)
    elif spec.name == "mem_fraction_static" and estimate is not None:
        number = estimate.mem_fraction_static
    elif spec.name == "max_running_requests" and estimate is not None and estimate.fits:
        number = float(estimate.max_running_requests)
    if number is None or not math.isfinite(number):
        return _MISSING
    return _on_grid(spec, number)


def _on_grid(spec: ParamSpec, number: float) -> int | float:
    low, high = float(spec.low or 0), float(spec.high or 0)
    number = min(max(number, low), high)
    if spec.step:
        steps = round((number - low) / float(spec.step))
        number = min(low + steps * float(spec.step), high)
    if spec.kind == "int":
        return round(number)
    decimals = len(f"{float(spec.step):.10f}".rstrip("0").split(".")[1]) if spec.step else 6
    return round(number, decimals)


def default_trial_params(
    space: SearchSpace,
    model_memory: ModelMemory | None,
    gpu_gb: float | None,
) -> dict[str, Any]:
    """sglang's defaults as the space's params, with the memory estimate's automatic values
    when the model's memory and the GPU's size are known (the space's fixed flags, a
    tensor-parallel size among them, included)."""
    estimate = None
    if model_memory is not None and gpu_gb:
        flags = dict(space.fixed_flags)
        estimate = estimate_memory(flags, model_memory, gpu_gb, version=space.engine_version)
    return baseline_params(space, estimate)
