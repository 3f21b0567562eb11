"""Host RAM against the space's largest HiCache host pool.

sglang sizes the host pool as `hicache_ratio` x the GPU's KV pool (or `hicache_size` GB per
GPU) and refuses one larger than the free RAM less 10 GB, so a trial with a ratio above what
this host holds never starts.
"""

from __future__ import annotations

from typing import Any

from tuner.doctor.check import OK, WARN, Check
from tuner.doctor.setting import DoctorSetting
from tuner.engines.model_config import ModelMemory
from tuner.init.facts import HOST_RAM_RESERVE_GB, meminfo_available_gb
from tuner.predict.memory import estimate_memory
from tuner.space.model import SearchSpace

GB = 1e9
SGLANG_DEFAULT_HICACHE_RATIO = 2.0


def host_ram_check(
    setting: DoctorSetting, model: ModelMemory | None, gpu_memory_gb: float | None
) -> Check:
    available = meminfo_available_gb()
    if available is None:
        return Check("host ram", WARN, "MemAvailable not readable from /proc/meminfo")
    have = f"{available:.1f} GB available"
    space = setting.space
    if space is None:
        return Check("host ram", OK, f"{have} (give --space to check its HiCache host pool)")
    ratio, size_gb = largest_hicache(space)
    if ratio is None and size_gb is None:
        return Check("host ram", OK, f"{have}; the space does not use HiCache")
    usable = available - HOST_RAM_RESERVE_GB
    tp = int(space.fixed_flags.get("tp_size") or 1)
    if size_gb is not None:
        need, what, pool = size_gb * tp, f"hicache_size {size_gb:g} GB x {tp} GPU", None
    else:
        missing = "the model's config.json" if model is None else "the GPU's memory (NVML)"
        if model is None or gpu_memory_gb is None:
            return Check(
                "host ram",
                WARN,
                f"{have}; the host pool (hicache_ratio up to {ratio:g} x the GPU KV pool) "
                f"is not estimated without {missing}",
            )
        pool = device_pool_gb(space, model, gpu_memory_gb)
        need = (ratio or SGLANG_DEFAULT_HICACHE_RATIO) * pool
        what = f"hicache_ratio {ratio:g} x a {pool:.1f} GB KV pool"
    if need > usable:
        holds = f": ratios above {usable / pool:.1f} will not start" if pool else ""
        return Check(
            "host ram",
            WARN,
            f"the largest host pool ({what}) needs ~{need:.0f} GB; {have}, less sglang's "
            f"{HOST_RAM_RESERVE_GB:.0f} GB leaves {max(usable, 0):.0f}{holds}",
        )
    return Check("host ram", OK, f"the largest host pool ({what}) needs ~{need:.0f} GB; {have}")


def largest_hicache(space: SearchSpace) -> tuple[float | None, float | None]:
    """(largest hicache_ratio, largest hicache_size in GB) the space can launch with; both None
    when HiCache is never on. A ratio left to sglang is its default, 2."""
    on = space.fixed_flags.get("enable_hierarchical_cache") is True or (
        "enable_hierarchical_cache" in space.params
        and True in (space.params["enable_hierarchical_cache"].choices or ())
    )
    if not on:
        return None, None
    size = _largest(space, "hicache_size")
    if size:
        return None, size
    return _largest(space, "hicache_ratio") or SGLANG_DEFAULT_HICACHE_RATIO, None


def device_pool_gb(space: SearchSpace, model: ModelMemory, gpu_memory_gb: float) -> float:
    """The KV pool on all the server's GPUs at the space's largest mem_fraction_static."""
    flags: dict[str, Any] = {k: v for k, v in space.fixed_flags.items() if v is not None}
    largest = _largest(space, "mem_fraction_static")
    if largest:
        flags["mem_fraction_static"] = largest
    plan = estimate_memory(flags, model, gpu_memory_gb)
    return plan.kv_tokens * model.kv_bytes_per_token / GB


def _largest(space: SearchSpace, name: str) -> float | None:
    fixed = space.fixed_flags.get(name)
    if isinstance(fixed, int | float) and not isinstance(fixed, bool):
        return float(fixed)
    spec = space.params.get(name)
    if spec is None:
        return None
    values = [v for v in (spec.choices or ()) if isinstance(v, int | float)]
    if spec.high is not None:
        values.append(spec.high)
    return float(max(values)) if values else None
