"""Which server a trial launches (sglang or the simulator) and what memory the host offers it."""

from __future__ import annotations

import os
from typing import Any

from tuner.engines import sglang as engine
from tuner.errors import UserError
from tuner.search.feasibility import ModelMemory
from tuner.search.options import StudyOptions
from tuner.search.serve import LaunchTarget
from tuner.search.space import SearchSpace

ENGINES = ("sim", "sglang")


def launch_target(space: SearchSpace, options: StudyOptions) -> LaunchTarget:
    api_key = os.environ.get("SGLANG_API_KEY") or None
    if options.engine == "sglang":
        return LaunchTarget(
            module=engine.LAUNCH_MODULE,
            gpus=options.gpus,
            api_key=api_key,
            ready_timeout_s=options.ready_timeout_s or 1800.0,
        )
    if options.engine != "sim":
        raise UserError(f"--engine {options.engine!r} is not one of {', '.join(ENGINES)}")
    sim = dict(space.sim or {})
    if options.time_scale is not None:
        sim["time_scale"] = options.time_scale
    # Behave exactly like the sglang release whose flag names the study uses.
    sim.setdefault("sglang_version", space.engine_version)
    extra = sim_args(sim)
    return LaunchTarget(
        module="tuner.sim",
        extra_args=tuple(extra),
        gpus=options.gpus,
        api_key=api_key,
        ready_timeout_s=options.ready_timeout_s or 60.0,
    )


def sim_args(sim: dict[str, Any]) -> list[str]:
    """The space's `sim:` mapping as simulator options: {time_scale: 50} -> --sim-time-scale 50.

    Every key becomes `--sim-<key>` (true = a bare switch, false / null = omitted), so fault
    injection and any later simulator option need no change here.
    """
    args: list[str] = []
    for key, value in sim.items():
        if value is None or value is False:
            continue
        flag = "--sim-" + str(key).replace("_", "-")
        args += [flag] if value is True else [flag, str(value)]
    return args


def memory_inputs(
    space: SearchSpace, options: StudyOptions
) -> tuple[ModelMemory | None, float | None]:
    """The model's memory needs and the GPU's size, from whatever this host can tell."""
    model = ModelMemory.from_model_path(space.model_path)
    gpu_gb = options.gpu_memory_gb
    if options.engine == "sim":
        sim_model, sim_gpu = _sim_memory_inputs(space.sim or {})
        model = model or sim_model
        gpu_gb = gpu_gb or sim_gpu
    elif gpu_gb is None:
        gpu_gb = _nvml_gpu_memory_gb(options.gpus)
    return model, gpu_gb


def _sim_memory_inputs(sim: dict[str, Any]) -> tuple[ModelMemory, float]:
    """What the simulated GPU and model are, read from the simulator's public profiles."""
    from tuner.sim.profiles import load_hardware, load_model

    hardware = load_hardware(sim.get("hardware"))
    model = load_model(sim.get("model"))
    ssm_dtype_bytes = 4  # sglang keeps the SSM state in float32 unless told otherwise
    state = model.linear_attention_layers * (
        model.mamba_conv_elements_per_layer * model.mamba_conv_dtype_bytes
        + model.mamba_ssm_elements_per_layer * ssm_dtype_bytes
    )
    kv = model.full_attention_layers * 2 * model.num_kv_heads * model.head_dim * model.dtype_bytes
    memory = ModelMemory(
        weight_bytes=model.weight_bytes,
        kv_bytes_per_token=float(kv),
        state_bytes_per_request=float(state) if model.hybrid else 0.0,
        draft_bytes=model.mtp.head_bytes if model.mtp else 0.0,
    )
    return memory, hardware.gpu_memory_gib * 2**30 / 1e9


def _nvml_gpu_memory_gb(gpus: str | None) -> float | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        index = int((gpus or "0").split(",")[0])
        total = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).total
        pynvml.nvmlShutdown()
        return float(total) / 1e9
    except Exception:
        return None
