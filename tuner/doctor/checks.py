"""Every check of `tuner doctor`, in the order a launch needs them."""

from __future__ import annotations

from collections.abc import Iterator

from tuner import host
from tuner.doctor.check import Check
from tuner.doctor.disk import disk_check
from tuner.doctor.engine import engine_check, flags_check
from tuner.doctor.gpus import gpu_processes_check, gpus_check, sglang_servers_check
from tuner.doctor.host_ram import host_ram_check
from tuner.doctor.model import model_check
from tuner.doctor.ports import ports_check
from tuner.doctor.setting import DoctorSetting


def run_checks(setting: DoctorSetting) -> list[Check]:
    """Nine checks, each one line; none raises (a check that cannot look says so)."""
    return list(each_check(setting))


def each_check(setting: DoctorSetting) -> Iterator[Check]:
    """The checks one at a time, so that a terminal shows each as it ends (the engine's
    `import sglang`, first, takes seconds to a minute)."""
    engine, probe = engine_check(setting)
    yield engine
    yield flags_check(setting, probe)
    model, memory = model_check(setting)
    yield model
    yield gpus_check(setting, memory)
    yield gpu_processes_check(setting)
    yield sglang_servers_check()
    yield host_ram_check(setting, memory, _gpu_memory_gb(setting))
    yield ports_check(setting)
    yield disk_check(setting)


def _gpu_memory_gb(setting: DoctorSetting) -> float | None:
    try:
        gpus = host.NVML.gpus()
    except host.NvmlUnavailable:
        return None
    indices = setting.gpu_indices()
    chosen = [g for g in gpus if indices is None or g.index in indices]
    return chosen[0].memory_total_gb if chosen else None
