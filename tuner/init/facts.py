"""What `tuner init` learns from this host: model shape, GPU, host RAM and the sglang version.

Nothing is downloaded and nothing is launched. The model's config.json comes from a local
directory or the local Hugging Face cache (tuner/engines/model_config.py); the GPU from NVML when
nvidia-ml-py imports and finds one, else from `--gpu`, which also takes the simulator's hardware
names; the GPU's spec-sheet figures from the search's table (tuner/predict/gpu_specs.py); host RAM
from /proc/meminfo (or the simulated host's, for a simulator hardware profile); the sglang version
from the installed package's metadata, or `--sglang-version`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from tuner.engines.model_config import (
    ModelConfigError,
    ModelMemory,
    find_config_dir,
    hf_cache_dirs,
    read_config,
    text_config,
)
from tuner.engines.sglang import CANONICAL_VERSION, load_snapshot, release_flags
from tuner.errors import UserError
from tuner.host import installed_sglang, nvml_gpu
from tuner.predict.gpu_specs import GpuSpec, gpu_spec, known_gpus, provisional_spec
from tuner.space.model_path import model_path_problem

GB = 1e9
HOST_RAM_RESERVE_GB = 10.0  # sglang refuses a host pool above free RAM less 10 GB


@dataclass(frozen=True)
class ModelFacts:
    model_path: str  # as the user gave it: passed as --model-path
    config_dir: Path
    memory: ModelMemory
    architecture: str
    mtp_layers: int  # built-in MTP heads (num_nextn_predict_layers / mtp_num_hidden_layers)
    experts: int  # routed experts of a mixture-of-experts model (0: dense)
    experts_per_token: int
    context_length: int

    @property
    def hybrid(self) -> bool:
        return self.memory.hybrid

    @property
    def weight_gb(self) -> float:
        return self.memory.weight_bytes / GB


@dataclass(frozen=True)
class GpuFacts:
    spec: GpuSpec
    memory_gb: float  # one GPU's
    source: str  # "NVML", "--gpu", or the simulator's profile
    sim_hardware: str | None  # the simulator's hardware profile for this GPU, if it has one
    count: int = 1  # GPUs one server spans (--tp-size: tensor parallelism)

    @property
    def flags(self) -> dict[str, int]:
        """The launch flags the GPU count stands for ({} on one GPU)."""
        return {"tp_size": self.count} if self.count > 1 else {}

    @property
    def label(self) -> str:
        """ "one H100 SXM" or "4 x H100 SXM"."""
        return f"one {self.spec.name}" if self.count == 1 else f"{self.count} x {self.spec.name}"


@dataclass(frozen=True)
class HostFacts:
    ram_gb: float | None
    source: str


def _anchored(model_path: str) -> str:
    """A relative local directory as an absolute path, so that the space works from any
    directory (sglang and the simulator read --model-path from their working directory); a hub
    id, an absolute path and a ~ path as given."""
    local = Path(model_path)
    if model_path.startswith("~") or local.is_absolute() or not (local / "config.json").is_file():
        return model_path
    return str(local.resolve())


def read_model(model_path: str) -> ModelFacts:
    """The model's shape from its config.json; a one-line UserError when it is not here."""
    config_dir = find_config_dir(model_path)
    if config_dir is None and (problem := model_path_problem(model_path)) is not None:
        raise UserError(problem.replace("model_path", "--model-path", 1))  # a path: no download
    if config_dir is None:
        where = ", ".join(str(d) for d in hf_cache_dirs())
        raise UserError(
            f"no config.json for {model_path!r}: not a local directory and not in the Hugging "
            f"Face cache ({where}); nothing is downloaded: fetch it first "
            f"(huggingface-cli download {model_path} config.json) or give --model-path DIR"
        )
    try:
        config = read_config(config_dir)
        memory = ModelMemory.from_hf_config(config)
    except (ModelConfigError, KeyError, TypeError, ValueError) as exc:
        raise UserError(
            f"{config_dir}/config.json: not a model shape tuner can read ({exc})"
        ) from None
    cfg = text_config(config)
    mtp = int(cfg.get("num_nextn_predict_layers") or cfg.get("mtp_num_hidden_layers") or 0)
    experts = int(
        cfg.get("num_experts") or cfg.get("num_local_experts") or cfg.get("n_routed_experts") or 0
    )
    architectures = config.get("architectures") or cfg.get("architectures") or ["unknown"]
    return ModelFacts(
        model_path=_anchored(model_path),
        config_dir=config_dir,
        memory=memory,
        architecture=str(architectures[0]),
        mtp_layers=mtp,
        experts=experts,
        experts_per_token=int(cfg.get("num_experts_per_tok") or 0),
        context_length=int(cfg.get("max_position_embeddings") or 32768),
    )


def read_gpu(name: str | None, memory_gb: float | None = None, count: int = 1) -> GpuFacts:
    """The GPU by `--gpu` (a table name or a simulator hardware name), else NVML's first GPU.
    `memory_gb` (`--gpu-memory-gb`) replaces the spec sheet's or NVML's memory, and lets
    `--gpu` name a GPU the spec table lacks, as NVML's unknown GPUs are: a provisional row.
    `count`: GPUs of that kind one server spans (`--tp-size`)."""
    if memory_gb is not None and not memory_gb > 0:
        raise UserError(f"--gpu-memory-gb {memory_gb:g}: give the GPU's memory in GB, above 0")
    facts = replace(_read_gpu(name, memory_gb), count=count)
    if memory_gb is None or facts.memory_gb == memory_gb:
        return facts
    return replace(facts, memory_gb=memory_gb, source=f"{facts.source}, --gpu-memory-gb")


def _read_gpu(name: str | None, memory_gb: float | None) -> GpuFacts:
    if name is None:
        found = nvml_gpu()
        if found is None:
            raise UserError(
                "no GPU found through NVML (nvidia-ml-py absent or no device): give --gpu NAME, "
                f"one of: {_known_names()}, or a simulator hardware profile "
                f"({_simulator_refusal('?').rpartition('shipped: ')[2] or 'see tuner/sim'})"
            )
        device, memory_gb = found
        spec = gpu_spec(device)
        if spec is None:
            # Only the memory decides what init writes; the study learns the rest (the
            # estimate fits a provisional row's bandwidth and bf16 peak to its trials).
            return GpuFacts(
                provisional_spec(device, memory_gb),
                memory_gb,
                f"NVML: {device}; not in the spec table, bandwidth is the table's mean until "
                "the study measures it",
                None,
            )
        return GpuFacts(spec, memory_gb, f"NVML: {device}", None)
    described = _simulator_hardware(name)
    spec = gpu_spec(described["gpu_name"] if described else name.replace("-", " "))
    if spec is None and memory_gb is not None:
        return GpuFacts(
            provisional_spec(name, memory_gb),
            memory_gb,
            f"--gpu {name}; not in the spec table, bandwidth is the table's mean until the "
            "study measures it",
            None,
        )
    if spec is None:
        raise UserError(
            f"--gpu {name!r} is not a GPU tuner knows: the spec table has {_known_names()}; "
            f"the simulator says: {_simulator_refusal(name)}. For another GPU, give its "
            "memory too (--gpu-memory-gb 48): the study measures the rest"
        )
    if described is None:  # a table name: does the simulator model that GPU too?
        described = _simulator_hardware(_slug(spec.name))
    if described is not None:
        return GpuFacts(
            spec,
            float(described["gpu_memory_gb"]),
            f"--gpu {name} (the simulator's {described['hardware']} profile)",
            str(described["hardware"]),
        )
    return GpuFacts(spec, spec.memory_gb, f"--gpu {name} (spec sheet)", None)


def read_host(gpu: GpuFacts, ram_gb: float | None = None) -> HostFacts:
    """Host RAM for the HiCache bound: given, the simulated host's, or this host's MemAvailable."""
    if ram_gb is not None:
        return HostFacts(ram_gb, "--host-ram-gb")
    if gpu.sim_hardware is not None:
        described = _simulator_hardware(gpu.sim_hardware)
        if described is not None:
            return HostFacts(
                float(described["host_ram_gb"]), f"the simulator's {gpu.sim_hardware} host"
            )
    available = meminfo_available_gb()
    return HostFacts(available, "/proc/meminfo MemAvailable on this host")


def meminfo_available_gb(path: Path = Path("/proc/meminfo")) -> float | None:
    try:
        for line in path.read_text().splitlines():
            key, _, rest = line.partition(":")
            if key == "MemAvailable":
                return float(rest.split()[0]) * 1024 / GB  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def sglang_version(given: str | None, python: str | None = None) -> tuple[str, str]:
    """(version whose flag names the space uses, where it came from). `python`: the engine's
    interpreter, whose sglang is asked (None: the tuner's own)."""
    if given:
        load_snapshot(given)  # unknown: a UserError listing the known versions
        return given, "--sglang-version"
    installed = installed_sglang(python)
    where = f"for {python}" if python else "here"
    if installed is None:
        return CANONICAL_VERSION, f"sglang is not installed {where}: the newest flag snapshot"
    # A release with no committed snapshot (newer than the tuner, a git build) is read from its
    # own parser, as `tuner optimize` reads it; its snapshot then serves the rest of init.
    flags = release_flags(python or sys.executable, installed)
    source = "the installed sglang" if python is None else f"the sglang of {python}"
    if not flags.committed:
        source += f", its flags {flags.source}"
    return installed, source


def _known_names() -> str:
    return ", ".join(known_gpus())


def _slug(name: str) -> str:
    return name.lower().replace(" ", "-")


def _simulator_hardware(name: str) -> dict[str, Any] | None:
    """The simulator's description of its hardware profile `name`, or None when it has none."""
    code, text = _describe(name)
    if code != 0:
        return None
    described: dict[str, Any] = json.loads(text)
    return {**described, "hardware": name}


def _simulator_refusal(name: str) -> str:
    """What the simulator says about a hardware name it has no profile for (lists its own)."""
    code, text = _describe(name)
    return "" if code == 0 else text.strip().removeprefix("error: ")


@cache
def _describe(name: str | None) -> tuple[int, str]:
    # The simulator is reached through its command line only (tests/test_architecture.py).
    argv = [sys.executable, "-m", "tuner.sim", "--sim-describe"]
    argv += ["--sim-hardware", name] if name is not None else []
    out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    return out.returncode, out.stdout if out.returncode == 0 else out.stderr
