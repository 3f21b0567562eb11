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
import os
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
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
    model_config_dir: Path | None = None  # where that config.json is (the simulator's own model)


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
    return HostFacts(
        gpu_name=gpu[0],
        gpu_memory_gb=gpu[1],
        model=model,
        model_config_dir=Path(str(config_dir)) if config_dir else None,
    )


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


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML reports it."""

    index: int
    name: str
    memory_total_gb: float
    memory_free_gb: float


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU (NVML's compute and graphics process lists)."""

    pid: int
    gpu_index: int
    used_gb: float | None  # None when NVML does not say (no permission, some drivers)


class NvmlUnavailable(Exception):
    """NVML cannot be asked on this host; the message says why, in a few words."""


class Nvml:
    """The one door to NVML: GPUs, the processes holding their memory, the driver.

    The real one asks nvidia-ml-py; tests replace the module's `NVML` with an object that has
    the same three methods. Each raises NvmlUnavailable when there is nothing to ask.
    """

    def gpus(self) -> list[Gpu]:
        with _nvml() as pynvml:
            found = []
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
                name = _text(pynvml.nvmlDeviceGetName(handle))
                found.append(Gpu(index, name, memory.total / GB, memory.free / GB))
            return found

    def processes(self) -> list[GpuProcess]:
        with _nvml() as pynvml:
            found: dict[tuple[int, int], GpuProcess] = {}
            for index in range(pynvml.nvmlDeviceGetCount()):
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                listed = [
                    *pynvml.nvmlDeviceGetComputeRunningProcesses(handle),
                    *pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle),
                ]
                for proc in listed:
                    used = getattr(proc, "usedGpuMemory", None)
                    known = found.get((proc.pid, index))
                    if isinstance(used, int):
                        found[(proc.pid, index)] = GpuProcess(int(proc.pid), index, used / GB)
                    elif known is None:  # listed twice (compute and graphics): keep the figure
                        found[(proc.pid, index)] = GpuProcess(int(proc.pid), index, None)
            return list(found.values())

    def driver(self) -> str:
        with _nvml() as pynvml:
            return _text(pynvml.nvmlSystemGetDriverVersion())


NVML: Nvml = Nvml()


def nvml_gpu(index: int = 0) -> tuple[str, float] | None:
    """(device name, memory in GB) of one GPU through NVML; None without nvidia-ml-py or a GPU."""
    try:
        gpus = NVML.gpus()
    except NvmlUnavailable:
        return None
    found = next((g for g in gpus if g.index == index), None)
    return None if found is None else (found.name, found.memory_total_gb)


def nvml_compute_processes(indices: Sequence[int]) -> int | None:
    """Processes holding memory on these GPUs; None without nvidia-ml-py or a GPU."""
    try:
        return sum(1 for p in NVML.processes() if p.gpu_index in indices)
    except NvmlUnavailable:
        return None


def process_command(pid: int) -> str | None:
    """The command line of a process on this host (/proc), or None when it is not visible:
    gone, or in another PID namespace (NVML inside a container may name the host's pids)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return " ".join(part.decode(errors="replace") for part in raw.split(b"\0") if part) or None


def process_group(pid: int) -> int | None:
    """The process group of `pid` (the tuner starts each server in a group of its own)."""
    try:
        return os.getpgid(pid)
    except OSError:
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


@dataclass(frozen=True)
class EngineProbe:
    """What the engine's Python says of itself: its sglang, torch and CUDA (one subprocess)."""

    python: str
    python_version: str | None = None
    sglang_version: str | None = None  # from the package metadata, imported or not
    sglang_commit: str | None = None  # a build from git: its commit, when the install says
    imported: bool = False  # `import sglang` was tried and worked
    import_error: str | None = None  # the exception's first line when it did not
    import_s: float | None = None
    torch_version: str | None = None
    cuda_version: str | None = None  # torch's CUDA; None for a CPU build
    error: str | None = None  # the interpreter did not run or said nothing readable


PROBE_TIMEOUT_S = 240.0  # `import sglang` took 62 s on a 2-core host under load; 7 s idle
_PROBE_MARK = "sglang-tuner-probe: "
# Run by the engine's Python: it must import nothing of the tuner (it may not be installed
# there), and its last line is the answer, because importing sglang may print to stdout.
_PROBE = f"""
import importlib.metadata as md, json, sys, time
out = {{"python_version": sys.version.split()[0]}}
try:
    dist = md.distribution("sglang")
    out["sglang_version"] = dist.version
    out["direct_url"] = json.loads(dist.read_text("direct_url.json") or "null")
except Exception:
    pass
if "--import" in sys.argv:
    start = time.monotonic()
    try:
        import sglang
        out["imported"] = True
    except BaseException as exc:
        out["import_error"] = (type(exc).__name__ + ": " + str(exc)).splitlines()[0][:300]
    out["import_s"] = time.monotonic() - start
try:
    import torch
    out["torch_version"] = torch.__version__
    out["cuda_version"] = torch.version.cuda
except BaseException:
    pass
print()
print({_PROBE_MARK!r} + json.dumps(out))
"""
_probes: dict[tuple[str, tuple[tuple[str, str], ...]], EngineProbe] = {}


def probe_engine(
    python: str, env: Mapping[str, str] | None = None, *, import_sglang: bool = False
) -> EngineProbe:
    """Ask `python` (with the server's extra `env`) for its sglang, torch and CUDA, once per
    process: `tuner doctor`'s checks and a study's provenance share the answer.

    `import_sglang` also imports sglang (seconds: it loads torch), as a launch would."""
    key = (python, tuple(sorted((env or {}).items())))
    known = _probes.get(key)
    if known is not None and (known.imported or known.import_error or not import_sglang):
        return known
    argv = [python, "-c", _PROBE, *(["--import"] if import_sglang else [])]
    try:
        out = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return EngineProbe(python, error=f"no answer within {PROBE_TIMEOUT_S:.0f} s")
    except OSError as exc:
        return EngineProbe(python, error=f"cannot run it ({exc.strerror or exc})")
    answer = next(
        (line for line in reversed(out.stdout.splitlines()) if line.startswith(_PROBE_MARK)), None
    )
    if answer is None:
        last = (out.stderr.strip().splitlines() or [f"exit code {out.returncode}"])[-1]
        return EngineProbe(python, error=f"it did not run the probe: {last[:300]}")
    data = json.loads(answer[len(_PROBE_MARK) :])
    probe = EngineProbe(
        python=python,
        python_version=data.get("python_version"),
        sglang_version=data.get("sglang_version"),
        sglang_commit=install_commit(data.get("direct_url")),
        imported=bool(data.get("imported")),
        import_error=data.get("import_error"),
        import_s=data.get("import_s"),
        torch_version=data.get("torch_version"),
        cuda_version=data.get("cuda_version"),
    )
    _probes[key] = probe
    return probe


def install_commit(direct_url: object) -> str | None:
    """The git commit a package was installed from, as PEP 610's direct_url.json records it:
    `pip install git+https://...@ref` writes it; a local checkout (`pip install -e .`) has its
    commit read from that checkout's .git."""
    if not isinstance(direct_url, Mapping):
        return None
    vcs = direct_url.get("vcs_info")
    if isinstance(vcs, Mapping) and vcs.get("commit_id"):
        return str(vcs["commit_id"])
    url = str(direct_url.get("url") or "")
    if not url.startswith("file://"):
        return None
    return git_head(Path(urllib.parse.unquote(url.removeprefix("file://"))))


def git_head(checkout: Path) -> str | None:
    """The commit a git checkout (or one of its parents) has checked out, from .git alone."""
    for directory in (checkout, *checkout.parents):
        git = directory / ".git"
        if git.is_file():  # a worktree: "gitdir: <path>"
            text = git.read_text(errors="replace").strip()
            git = (directory / text.removeprefix("gitdir:").strip()).resolve()
        if not (git / "HEAD").is_file():
            continue
        head = (git / "HEAD").read_text(errors="replace").strip()
        if not head.startswith("ref:"):
            return head or None
        ref = head.removeprefix("ref:").strip()
        common = git
        if (git / "commondir").is_file():
            common = (git / (git / "commondir").read_text().strip()).resolve()
        for base in (git, common):
            if (base / ref).is_file():
                return (base / ref).read_text(errors="replace").strip() or None
            packed = base / "packed-refs"
            if packed.is_file():
                for line in packed.read_text(errors="replace").splitlines():
                    commit, _, name = line.partition(" ")
                    if name == ref:
                        return commit
        return None
    return None


@contextlib.contextmanager
def _nvml() -> Iterator[Any]:
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable("nvidia-ml-py is not installed") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError: no driver, no device
        raise NvmlUnavailable(f"NVML cannot start: {exc}") from None
    try:
        yield pynvml
    except NvmlUnavailable:
        raise
    except Exception as exc:
        raise NvmlUnavailable(f"NVML: {exc}") from None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _first_index(gpus: str | None) -> int:
    return int((gpus or "0").split(",")[0])
