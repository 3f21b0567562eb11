"""Whether a written space's SLOs look reachable at all, by the tuner's own estimate.

A template's default SLO suits a small model on one GPU; for a 70B model the same 5 s p99 TTFT
may be out of reach of every configuration, and a study would spend its GPU hours finding
nothing within it. `tuner init` asks the estimate (tuner/predict/estimate.py, spec sheet and
config.json only: nothing is launched) for the configuration closest to the SLOs and says so
when even that one misses them by more than the estimate's usual error.
"""

from __future__ import annotations

import random

from tuner.engines.model_config import ModelMemory
from tuner.init.facts import GpuFacts
from tuner.predict.estimate import Estimator, WorkloadShape
from tuner.predict.memory import estimate_memory
from tuner.space.model import SearchSpace
from tuner.study.guide import complete_flags, random_params

# A note only when the closest configuration misses a limit by more than this factor. On ten
# init-written spaces the estimate's closest came out 0.5-1.05x the simulator's (mostly
# optimistic: its TTFT tail is a bound), so 1.2 leaves room for its error the other way
# (`python benchmarks/init_reach.py`, benchmarks/results/init_reach.md).
MARGIN = 1.2
SAMPLES = 300


def unreachable_note(space: SearchSpace, model: ModelMemory, gpu: GpuFacts) -> str | None:
    """A one-line note when no sampled configuration of `space` comes within MARGIN of every
    SLO by the estimate; None when one does, or when the GPU's spec row is provisional."""
    if gpu.spec.provisional or not space.slos:
        return None
    estimator = Estimator(space, model, gpu.spec, gpu.memory_gb)
    rng = random.Random(0)
    closest: tuple[float, dict[str, float]] | None = None
    for _ in range(SAMPLES):
        params = random_params(space, rng, ends=0.3)
        flags = {"model_path": space.model_path, **space.fixed_flags}
        flags |= complete_flags(space, params)
        prediction = estimator.predict(flags)
        if not prediction.fits:
            continue
        values = estimator.slo_values(prediction)
        ratios = [values.get(s.metric, 0.0) / s.limit for s in space.slos if s.op == "<="]
        worst = max(ratios, default=0.0)
        if closest is None or worst < closest[0]:
            closest = (worst, values)
    if closest is None or closest[0] <= MARGIN:
        return None
    missed = ", ".join(
        f"{s.metric} ~{closest[1][s.metric]:,.0f} against {s.limit:,.0f}"
        for s in space.slos
        if s.metric in closest[1] and closest[1][s.metric] > s.limit
    )
    return (
        f"note: by the tuner's estimate no configuration of this space comes near its SLOs (the "
        f"closest: {missed}); a study may find nothing within them: set reachable limits with "
        "--slo, or give the server more GPUs"
    )


def kv_pool_note(space: SearchSpace, model: ModelMemory, gpu: GpuFacts) -> str | None:
    """A one-line note when even the space's largest KV pool cannot hold what its closed loop's
    clients hold at once, and the space leaves the pool's dtype at the model's: an 8-bit KV
    cache would hold twice the tokens (docs/sglang-memory.md). None otherwise."""
    clients = space.bench.concurrency
    fraction = space.params.get("mem_fraction_static")
    if "kv_cache_dtype" in space.params or "kv_cache_dtype" in space.fixed_flags:
        return None
    if space.bench.request_rate is not None or not clients or fraction is None:
        return None
    flags = {**space.fixed_flags, "mem_fraction_static": fraction.high}
    pool = estimate_memory(flags, model, gpu.memory_gb).kv_tokens
    shape = WorkloadShape.of(space.workload, clients)
    need = clients * (shape.prompt + shape.output)
    if not pool or need <= pool:
        return None
    return (
        f"note: the largest KV pool of this space holds {pool:,} tokens where its {clients} "
        f"clients hold about {need:,.0f} at once, so fewer of them run together; an 8-bit KV "
        "cache holds twice the tokens: --kv-cache-dtype auto,fp8_e4m3 makes it a choice of the "
        "space (what it does to accuracy is yours to check)"
    )
