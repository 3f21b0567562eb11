"""Which server a trial launches (sglang or the simulator) and what memory the host offers it."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from typing import Any

from tuner.engines import sglang as engine
from tuner.engines.model_config import (
    ModelMemory,
    find_config_dir,
    missing_config_message,
    read_config,
)
from tuner.errors import UserError
from tuner.search.options import StudyOptions
from tuner.search.serve import LaunchTarget
from tuner.search.space import SearchSpace

ENGINES = ("sim", "sglang")

_log = logging.getLogger(__name__)


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
    """The model's memory needs (from its config.json) and the GPU's size, as this host tells.

    Both engines read config.json the same way; the simulator only says where its model's file
    is and how large its GPU is, as nvml would for a real one."""
    if options.engine == "sim":
        described = _describe_simulator(launch_target(space, options), space.model_path)
        config_dir = described.get("model_config_dir")
        gpu_gb = options.gpu_memory_gb or described.get("gpu_memory_gb")
    else:
        config_dir = find_config_dir(space.model_path)
        gpu_gb = options.gpu_memory_gb or _nvml_gpu_memory_gb(options.gpus)
    if not config_dir:
        _log.warning(missing_config_message(space.model_path))
        return None, gpu_gb
    return ModelMemory.from_hf_config(read_config(config_dir)), gpu_gb


def gpu_name(space: SearchSpace, options: StudyOptions) -> str | None:
    """The GPU's device name as NVML reports it (the simulator reports its modelled GPU's)."""
    if options.engine == "sim":
        name = _describe_simulator(launch_target(space, options), space.model_path).get("gpu_name")
        return str(name) if name else None
    try:
        import pynvml

        pynvml.nvmlInit()
        index = int((options.gpus or "0").split(",")[0])
        raw = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
        pynvml.nvmlShutdown()
        return raw.decode() if isinstance(raw, bytes) else str(raw)
    except Exception:
        return None


def _describe_simulator(target: LaunchTarget, model_path: str | None) -> dict[str, Any]:
    argv = [sys.executable, "-m", target.module, *target.extra_args, "--sim-describe"]
    argv += ["--model-path", model_path] if model_path else []
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise UserError(f"the simulator cannot describe its GPU and model: {out.stderr.strip()}")
    result: dict[str, Any] = json.loads(out.stdout)
    return result


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
