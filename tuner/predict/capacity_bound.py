"""The `capacity` bound: how many requests of the workload the server can run at once.

A running cap above it behaves the same (the server cannot run more), which is what the client
count is to a closed loop; an open loop (`request_rate`) has no client count, so its cap is
bounded by this instead (tuner/space/relative.py). Worked out from what the host tells (the
model's config.json, the GPU's memory: tuner/host.py) with sglang's memory rules
(tuner/predict/memory.py), at the space's largest `mem_fraction_static`, never from the
simulator's figures.
"""

from __future__ import annotations

from tuner.engines.model_config import ModelMemory
from tuner.errors import UserError
from tuner.predict.memory import estimate_memory
from tuner.predict.workload_shape import WorkloadShape
from tuner.space.model import SearchSpace


def running_capacity(space: SearchSpace, model: ModelMemory | None, gpu_gb: float | None) -> int:
    """Requests of the workload (prompt + output tokens) the KV pool holds at the space's
    largest memory fraction, within the running cap sglang's memory plan would set."""
    fix = "or write `capacity: N` (requests) at the top of the space file"
    if model is None or not gpu_gb:
        missing = "the model's config.json" if model is None else "the GPU's memory"
        raise UserError(f"a bound names capacity, which needs {missing}: {fix}")
    flags = {"model_path": space.model_path, **space.fixed_flags}
    for name, value in _largest_memory(space).items():
        flags[name] = value
    estimate = estimate_memory(flags, model, gpu_gb, version=space.engine_version)
    if not estimate.fits:
        raise UserError(
            f"a bound names capacity, but sglang's defaults would not start here "
            f"({estimate.reason}): {fix}"
        )
    shape = WorkloadShape.of(space.workload, clients=space.bench.concurrency or 1)
    by_kv = int(estimate.kv_tokens // max(shape.prompt + shape.output, 1.0))
    cap = estimate.max_running_requests or by_kv
    return max(1, min(by_kv, cap))


def _largest_memory(space: SearchSpace) -> dict[str, float]:
    spec = space.params.get("mem_fraction_static")
    if spec is not None and spec.high is not None and spec.kind != "categorical":
        return {"mem_fraction_static": float(spec.high)}
    if spec is not None and spec.choices:
        numbers = [float(c) for c in spec.choices if isinstance(c, int | float)]
        return {"mem_fraction_static": max(numbers)} if numbers else {}
    return {}
