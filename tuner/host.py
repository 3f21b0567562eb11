"""What this machine offers a launch: its GPU, the model's memory needs, the installed sglang.

    facts = read_host_facts("sim", "tuner.sim", ("--sim-time-scale", "50"), "Qwen/Qwen3.6-27B")
    facts.gpu_name, facts.gpu_memory_gb, facts.model   # NVIDIA RTX PRO 6000 ..., 96.0, ModelMemory

Every host fact the tuner uses is read here, once per run (tuner/study/run.py keeps them). On a
GPU host the GPU comes from NVML (nvidia-ml-py); the simulator is asked instead, through its
command line only (`--sim-describe`), as NVML would be asked for a real GPU. Both engines read
the model's config.json the same way (tuner/engines/model_config.py).
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import logging
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.engines.model_config import (
    ModelMemory,
    find_config_dir,
    missing_config_message,
    read_config,
)
from tuner.errors import UserError

GB = 1e9

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HostFacts:
    """The GPU a trial's server gets and the model's memory needs, as this host tells them."""

    gpu_name: str | None = None  # NVML's device name (the simulator reports its modelled GPU's)
    gpu_memory_gb: float | None = None
    model: ModelMemory | None = None  # None when the model's config.json is not found


def read_host_facts(
    engine: str,
    module: str,
    extra_args: Sequence[str],
    model_path: str | None,
    gpus: str | None = None,
    gpu_memory_gb: float | None = None,
) -> HostFacts:
    """The GPU's name and memory and the model's memory needs, read once.

    `gpu_memory_gb` (the `--gpu-memory-gb` option) overrides what the GPU reports."""
    if engine == "sim":
        described = describe_simulator(module, extra_args, model_path)
        config_dir = described.get("model_config_dir")
        if model_path and config_dir and "--sim-model" not in extra_args:
            local = Path(model_path).expanduser()
            if not (local / "config.json").is_file():
                _log.warning(
                    f"the simulator has no model {model_path!r} (no config.json there, and the "
                    f"space names no sim: model), so it serves its default, "
                    f"{Path(str(config_dir)).name}: give a directory holding the model's "
                    "config.json, or sim: {model: NAME}"
                )
        name = described.get("gpu_name")
        memory = gpu_memory_gb or described.get("gpu_memory_gb")
        gpu = (str(name) if name else None, float(memory) if memory else None)
    else:
        config_dir = find_config_dir(model_path)
        found = nvml_gpu(_first_index(gpus))
        gpu = (found[0] if found else None, gpu_memory_gb or (found[1] if found else None))
    model = None
    if config_dir:
        model = ModelMemory.from_hf_config(read_config(config_dir))
    else:
        _log.warning(missing_config_message(model_path))
    return HostFacts(gpu_name=gpu[0], gpu_memory_gb=gpu[1], model=model)


def describe_simulator(
    module: str, extra_args: Sequence[str], model_path: str | None
) -> dict[str, Any]:
    """What the simulator says of its GPU and model (`--sim-describe`), as NVML would say."""
    argv = [sys.executable, "-m", module, *extra_args, "--sim-describe"]
    argv += ["--model-path", model_path] if model_path else []
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise UserError(f"the simulator cannot describe its GPU and model: {out.stderr.strip()}")
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def nvml_gpu(index: int = 0) -> tuple[str, float] | None:
    """(device name, memory in GB) of one GPU through NVML; None without nvidia-ml-py or a GPU."""
    try:
        with _nvml() as pynvml:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            raw = pynvml.nvmlDeviceGetName(handle)
            total = pynvml.nvmlDeviceGetMemoryInfo(handle).total
    except Exception:
        return None
    return (raw.decode() if isinstance(raw, bytes) else str(raw)), float(total) / GB


def nvml_compute_processes(indices: Sequence[int]) -> int | None:
    """Processes holding memory on these GPUs; None without nvidia-ml-py or a GPU."""
    try:
        with _nvml() as pynvml:
            return sum(
                len(
                    pynvml.nvmlDeviceGetComputeRunningProcesses(
                        pynvml.nvmlDeviceGetHandleByIndex(index)
                    )
                )
                for index in indices
            )
    except Exception:
        return None


def installed_sglang(python: str | None = None) -> str | None:
    """The installed sglang's release, or None when it is not installed.

    With `python` (another environment's interpreter, the engine's), that environment is asked.
    """
    if python is not None and python != sys.executable:
        script = "import importlib.metadata as m; print(m.version('sglang'))"
        try:
            out = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() or None if out.returncode == 0 else None
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


@contextlib.contextmanager
def _nvml() -> Iterator[Any]:
    import pynvml

    pynvml.nvmlInit()
    try:
        yield pynvml
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _first_index(gpus: str | None) -> int:
    return int((gpus or "0").split(",")[0])
