"""Where a study's numbers came from: the software, the GPU, the model and the server's setting.

    facts = collect_provenance(engine="sglang", python=py, server_env={...}, gpus=None,
                               model_path="Qwen/Qwen3-8B", seed=0, host_facts=run.host,
                               spoken_version="0.5.23")
    record_provenance(study, lambda: facts)      # once per study; later runs leave it
    read_provenance(study.user_attrs).lines()   # what `tuner studies` and the report show

Two studies are comparable, and a result reproducible, only with these facts: the sglang release
(and its git commit when built from source), torch and CUDA as the engine's Python has them (one
subprocess, tuner/host.py), the GPU, driver and memory (NVML, or the simulator's description),
the model's config.json (sha256, and the Hugging Face snapshot it came from), the server's
environment (SGLANG_*, CUDA_VISIBLE_DEVICES, `--engine-env`; secrets masked), host and seed.
A study resumed on another release or GPU is told so in one line (`resume_warning`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import platform
import re
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import optuna
from pydantic import BaseModel, ConfigDict, ValidationError

from tuner import __version__, host
from tuner.engines.model_config import find_config_dir
from tuner.host import HostFacts
from tuner.results import record

# Environment variables of the tuner's own that a server inherits and that change what it does.
_SERVER_ENV_PREFIXES = ("SGLANG_", "SGL_")
_SERVER_ENV_NAMES = ("CUDA_VISIBLE_DEVICES",)
# Names that hold secrets: their values are never written to a study.
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
MASK = "***"


class Provenance(BaseModel):
    """The facts a study records once, when it is created (the study user attr `provenance`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    tuner_version: str
    engine: str  # "sim" (the simulated server) or "sglang"
    sglang_version: str | None = None  # the simulator: the release whose behaviour it models
    sglang_commit: str | None = None
    torch_version: str | None = None
    cuda_version: str | None = None  # torch's CUDA; None for a CPU build or the simulator
    python_version: str | None = None  # the engine's Python
    gpu_name: str | None = None
    gpu_count: int | None = None
    gpu_memory_gb: float | None = None
    gpu_driver: str | None = None  # "simulated" for the simulator's GPU
    cpu: str | None = None
    model_path: str | None = None
    model_config_sha256: str | None = None
    model_config_path: str | None = None  # the config.json read (the simulator's own, maybe)
    model_revision: str | None = None  # the Hugging Face cache snapshot the config came from
    server_env: dict[str, str] = {}
    hostname: str | None = None
    seed: int | None = None
    recorded_at: str | None = None  # UTC, ISO 8601

    def lines(self) -> list[str]:
        """The facts as a few short lines, for a terminal and the report."""
        kind = "simulated sglang" if self.engine == "sim" else "sglang"
        software = f"{kind} {self.sglang_version or '(release unknown)'}"
        if self.sglang_commit:
            software += f" (commit {self.sglang_commit[:12]})"
        if self.engine != "sim":
            software += f", torch {self.torch_version or 'not installed'}"
            software += f", CUDA {self.cuda_version or 'none'}"
        if self.python_version:
            software += f", Python {self.python_version}"
        out = [f"engine: {software}; tuner {self.tuner_version}"]
        out.append(f"hardware: {self.hardware()}")
        if self.model_path:
            model = self.model_path
            if self.model_revision:
                model += f" (revision {self.model_revision[:12]})"
            sha = self.model_config_sha256
            model += f", config.json sha256 {sha[:16]}" if sha else ", config.json not found"
            out.append(f"model: {model}")
        env = " ".join(f"{k}={v}" for k, v in sorted(self.server_env.items())) or "nothing set"
        out.append(f"server environment: {env}")
        seed = "none" if self.seed is None else str(self.seed)
        out.append(f"host {self.hostname or '?'}, seed {seed}, recorded {self.recorded_at or '?'}")
        return out

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) for every recorded fact, in full, for the report's table."""
        env = ", ".join(f"{k}={v}" for k, v in sorted(self.server_env.items()))
        facts = [
            ("engine", "simulated server" if self.engine == "sim" else "sglang"),
            ("sglang", self.sglang_version),
            ("sglang commit", self.sglang_commit),
            ("torch", self.torch_version),
            ("CUDA", self.cuda_version),
            ("engine Python", self.python_version),
            ("hardware", self.hardware()),
            ("model", self.model_path),
            ("model revision", self.model_revision),
            ("config.json", self.model_config_path),
            ("config.json sha256", self.model_config_sha256),
            ("server environment", env or "nothing set"),
            ("host", self.hostname),
            ("seed", None if self.seed is None else str(self.seed)),
            ("tuner", self.tuner_version),
            ("recorded", self.recorded_at),
        ]
        return [(label, value) for label, value in facts if value]

    def hardware(self) -> str:
        if self.gpu_name:
            count = f"{self.gpu_count} x " if self.gpu_count and self.gpu_count > 1 else ""
            memory = f", {self.gpu_memory_gb:.0f} GB" if self.gpu_memory_gb else ""
            driver = self.gpu_driver or "unknown"
            text = f"{count}{self.gpu_name}{memory}, driver {driver}"
        else:
            text = "no GPU seen (NVML)"
        return f"{text}; CPU {self.cpu}" if self.cpu else text


def collect_provenance(
    *,
    engine: str,
    python: str,
    server_env: Mapping[str, str],
    gpus: str | None,
    model_path: str | None,
    seed: int | None,
    host_facts: HostFacts,
    spoken_version: str,
) -> Provenance:
    """Read the facts now. `server_env`: what the server gets on top of the tuner's environment
    (the space's engine env and `--engine-env`); `spoken_version`: the release whose flags the
    space uses (the simulator behaves as that release)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(_SERVER_ENV_PREFIXES) or k in _SERVER_ENV_NAMES
    }
    env.update(server_env)
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    facts: dict[str, Any] = {
        "tuner_version": __version__,
        "engine": engine,
        "server_env": mask_secrets(env),
        "hostname": socket.gethostname(),
        "seed": seed,
        "cpu": cpu_model(),
        "recorded_at": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "model_path": model_path,
        # The simulator may serve its own model when the path is not on this host: that one.
        **(model_facts(model_path) or model_facts(host_facts.model_config_dir)),
    }
    if engine == "sim":
        facts.update(
            sglang_version=spoken_version,
            gpu_name=host_facts.gpu_name,
            gpu_memory_gb=host_facts.gpu_memory_gb,
            gpu_driver="simulated" if host_facts.gpu_name else None,
            gpu_count=1 if host_facts.gpu_name else None,
        )
        return Provenance(**facts)
    probe = host.probe_engine(python, server_env)
    facts.update(
        sglang_version=probe.sglang_version,
        sglang_commit=probe.sglang_commit,
        torch_version=probe.torch_version,
        cuda_version=probe.cuda_version,
        python_version=probe.python_version,
        **gpu_facts(gpus, host_facts),
    )
    return Provenance(**facts)


def gpu_facts(gpus: str | None, facts: HostFacts) -> dict[str, Any]:
    """Name, count, memory and driver of the GPUs a server gets (`--gpus`, else all)."""
    try:
        found = host.NVML.gpus()
        driver: str | None = host.NVML.driver()
    except host.NvmlUnavailable:
        found, driver = [], None
    if gpus:
        wanted = {part.strip() for part in gpus.split(",")}
        found = [g for g in found if str(g.index) in wanted] or found
    if not found:
        return {"gpu_name": facts.gpu_name, "gpu_memory_gb": facts.gpu_memory_gb}
    names = sorted({g.name for g in found})
    return {
        "gpu_name": " + ".join(names),
        "gpu_count": len(found),
        "gpu_memory_gb": round(found[0].memory_total_gb, 1),
        "gpu_driver": driver,
    }


def model_facts(model_path: str | Path | None) -> dict[str, str | None]:
    """The config.json's sha256, and the revision when it sits in a Hugging Face cache snapshot
    (…/models--org--name/snapshots/<revision>/config.json)."""
    directory = find_config_dir(model_path)
    if directory is None:
        return {}
    config = directory / "config.json"
    try:
        digest = hashlib.sha256(config.read_bytes()).hexdigest()
    except OSError:
        return {}
    parts = directory.parts
    revision = None
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        revision = parts[-1]
    return {
        "model_config_sha256": digest,
        "model_revision": revision,
        "model_config_path": str(config),
    }


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    try:
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return f"{value.strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return platform.processor() or None


def mask_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with every secret's value replaced: keys and tokens never reach disk."""
    return {k: (MASK if _SECRET.search(k) and v else v) for k, v in sorted(env.items())}


def read_provenance(user_attrs: Mapping[str, Any]) -> Provenance | None:
    """The study's recorded provenance; None for a study made before it was recorded."""
    raw = user_attrs.get(record.STUDY_PROVENANCE)
    if not isinstance(raw, Mapping):
        return None
    try:
        return Provenance.model_validate(dict(raw))
    except ValidationError:
        return None


def record_provenance(study: optuna.Study, collect: Callable[[], Provenance]) -> None:
    """Record the provenance once: a study that has it keeps what it was made with."""
    if read_provenance(study.user_attrs) is None:
        study.set_user_attr(record.STUDY_PROVENANCE, collect().model_dump(mode="json"))


def resume_warning(
    recorded: Provenance | None, engine: str, sglang_version: str | None, gpu: str | None
) -> str | None:
    """One line when a study made with one engine, sglang release or GPU is resumed on
    another: its earlier trials were measured elsewhere."""
    if recorded is None:
        return None
    pairs = [
        ("engine", recorded.engine, engine),
        ("sglang", recorded.sglang_version, sglang_version),
        ("GPU", recorded.gpu_name, gpu),
    ]
    changed = [(what, old, new) for what, old, new in pairs if old and new and old != new]
    if not changed:
        return None
    before = ", ".join(f"{what} {old}" for what, old, _ in changed)
    now = ", ".join(f"{what} {new}" for what, _, new in changed)
    return (
        f"warning: this study was made with {before} and resumes with {now}: its earlier "
        "trials are not comparable with new ones (--study NAME starts a new study)"
    )
