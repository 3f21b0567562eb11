"""The GPUs the server gets: their free memory, who holds it, and sglang servers left running.

A GPU still holding another process's memory makes every launch fail, and the crash model then
learns the wrong lesson; a stale `sglang.launch_server` is the usual holder. NVML is asked
through tuner.host.NVML only (tests replace it); command lines and process groups come from
/proc of this host.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from tuner import host
from tuner.doctor.check import FAIL, OK, WARN, Check
from tuner.doctor.setting import DoctorSetting
from tuner.engines.model_config import ModelMemory

GB = 1e9
# An idle GPU shows a few hundred MB in use (driver context, ECC); more than this is a tenant.
_IDLE_USE_GB = 2.0
_SHOWN = 3  # processes named in one line; the rest are counted
_COMMAND_CHARS = 90
_SGLANG_MARKS = ("sglang.launch_server", "sglang::")


def gpus_check(setting: DoctorSetting, model: ModelMemory | None) -> Check:
    """Every GPU the server gets, with its free memory; fail when the weights cannot fit."""
    try:
        gpus = host.NVML.gpus()
    except host.NvmlUnavailable as exc:
        return _without_nvml(setting, "gpus", str(exc))
    indices = setting.gpu_indices()
    chosen = [g for g in gpus if indices is None or g.index in indices]
    if not chosen:
        if setting.on_cpu:
            return Check("gpus", OK, "none needed: the space runs sglang on the CPU")
        named = f" among CUDA_VISIBLE_DEVICES={setting.gpus}" if indices else ""
        return Check("gpus", FAIL, f"NVML sees no GPU{named} ({len(gpus)} in all)")
    listing = "; ".join(
        f"{g.index} {g.name} {g.memory_free_gb:.1f} of {g.memory_total_gb:.1f} GB free"
        for g in chosen
    )
    if model is not None and not setting.on_cpu:
        tp = int((setting.space.fixed_flags.get("tp_size") if setting.space else None) or 1)
        weights = model.sharded(tp).weight_bytes / GB
        short = [g for g in chosen if g.memory_free_gb < weights]
        if short:
            return Check(
                "gpus",
                FAIL,
                f"{listing}: the model's weights need {weights:.1f} GB per GPU (tp {tp}); "
                f"free GPU {', '.join(str(g.index) for g in short)} first",
            )
    busy = [g for g in chosen if g.memory_total_gb - g.memory_free_gb > _IDLE_USE_GB]
    if busy:
        return Check(
            "gpus", WARN, f"{listing}: memory in use before any launch (see gpu processes)"
        )
    return Check("gpus", OK, listing)


def gpu_processes_check(setting: DoctorSetting) -> Check:
    """Processes holding memory on the server's GPUs, with pid, command and how to stop them."""
    try:
        processes = host.NVML.processes()
    except host.NvmlUnavailable as exc:
        return _without_nvml(setting, "gpu processes", str(exc))
    indices = setting.gpu_indices()
    holding = [p for p in processes if indices is None or p.gpu_index in indices]
    if not holding:
        return Check("gpu processes", OK, "no process holds GPU memory")
    holding.sort(key=lambda p: -(p.used_gb or 0.0))
    parts = [_holder(p) for p in holding[:_SHOWN]]
    if len(holding) > _SHOWN:
        parts.append(f"and {len(holding) - _SHOWN} more (nvidia-smi lists them)")
    return Check("gpu processes", WARN, "; ".join(parts))


def sglang_servers_check() -> Check:
    """sglang servers running on this host, whatever GPU they hold: one left from an earlier
    run holds its port and memory until stopped."""
    own = os.getpgrp()
    groups: dict[int, tuple[int, str]] = {}
    for pid, command in _commands():
        if not any(mark in command for mark in _SGLANG_MARKS):
            continue
        group = host.process_group(pid)
        if group is None or group == own:
            continue
        leader = groups.get(group)
        # The launcher's command line says more (model, port) than a scheduler's title.
        if leader is None or ("launch_server" in command and "launch_server" not in leader[1]):
            groups[group] = (pid, command)
    if not groups:
        return Check("sglang servers", OK, "none running on this host")
    parts = [
        f"pid {pid} ({_port(command)}): {_short(command)}; if stale, stop it: kill -- -{group}"
        for group, (pid, command) in sorted(groups.items())[:_SHOWN]
    ]
    if len(groups) > _SHOWN:
        parts.append(f"and {len(groups) - _SHOWN} more")
    return Check("sglang servers", WARN, "; ".join(parts))


def _without_nvml(setting: DoctorSetting, name: str, why: str) -> Check:
    if setting.on_cpu:
        return Check(name, OK, f"none needed: the space runs sglang on the CPU ({why})")
    return Check(name, WARN, f"not checked: {why} (on a GPU host: pip install nvidia-ml-py)")


def _holder(process: host.GpuProcess) -> str:
    used = f"{process.used_gb:.1f} GB" if process.used_gb is not None else "memory"
    command = host.process_command(process.pid)
    text = f"pid {process.pid} holds {used} on GPU {process.gpu_index}"
    if command is None:
        return f"{text} (not visible here: another container? nvidia-smi shows it)"
    group = host.process_group(process.pid)
    stop = f"kill -- -{group}" if group and group != os.getpgrp() else f"kill {process.pid}"
    if any(mark in command for mark in _SGLANG_MARKS):
        return f"{text}: {_short(command)} (a stale sglang server? stop it: {stop})"
    return f"{text}: {_short(command)} (stop it if it is not yours to keep: {stop})"


def _commands() -> list[tuple[int, str]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            command = host.process_command(int(entry.name))
            if command:
                found.append((int(entry.name), command))
    return found


def _port(command: str) -> str:
    if "launch_server" not in command:
        return "an sglang worker process"
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    for i, word in enumerate(words):
        if word == "--port" and i + 1 < len(words):
            return f"port {words[i + 1]}"
        if word.startswith("--port="):
            return f"port {word.split('=', 1)[1]}"
    return "port 30000 unless set"


def _short(command: str) -> str:
    return command if len(command) <= _COMMAND_CHARS else command[: _COMMAND_CHARS - 3] + "..."
