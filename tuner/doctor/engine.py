"""The engine's Python: does it import sglang, and where do that release's flags come from."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tuner import host
from tuner.doctor.check import FAIL, OK, WARN, Check
from tuner.doctor.setting import DoctorSetting
from tuner.engines.sglang import release_flags
from tuner.errors import UserError

_INSTALL_HINT = (
    "on a GPU host pip install 'sglang-tuner[sglang]' there, on a CPU "
    "tools/install_real_sglang.sh; or give --engine-python"
)


def engine_check(setting: DoctorSetting) -> tuple[Check, host.EngineProbe | None]:
    """`python -c 'import sglang'` as the server's environment has it, and torch's CUDA."""
    python = setting.python
    where = f"{python} ({setting.python_source})"
    if not Path(python).is_file() or not os.access(python, os.X_OK):
        return Check("engine", FAIL, f"{where}: no executable file there; {_INSTALL_HINT}"), None
    probe = host.probe_engine(python, setting.env, import_sglang=True)
    if probe.error:
        return Check("engine", FAIL, f"{where} did not answer: {probe.error}"), probe
    if probe.sglang_version is None:
        return Check("engine", FAIL, f"{where} has no sglang; {_INSTALL_HINT}"), probe
    if not probe.imported:
        return (
            Check(
                "engine",
                FAIL,
                f"{where} cannot import sglang {probe.sglang_version}: {probe.import_error}",
            ),
            probe,
        )
    took = f" in {probe.import_s:.1f} s" if probe.import_s is not None else ""
    torch = f"torch {probe.torch_version or '?'}, CUDA {probe.cuda_version or 'none'}"
    found = (
        f"{python} (Python {probe.python_version}) imports sglang {probe.sglang_version}{took}; "
        + torch
    )
    if probe.cuda_version is None and not setting.on_cpu:
        return (
            Check("engine", WARN, f"{found}: a torch without CUDA cannot serve on a GPU"),
            probe,
        )
    return Check("engine", OK, found), probe


def flags_check(setting: DoctorSetting, probe: host.EngineProbe | None) -> Check:
    """Which parser snapshot turns the space's flags into this release's argv."""
    version = probe.sglang_version if probe else None
    if version is None:
        return Check("flags", WARN, "not checked: no sglang release to read the flags of")
    try:
        flags = release_flags(setting.python, version, setting.env)
    except UserError as exc:  # no snapshot, and the live read failed
        return Check("flags", FAIL, str(exc))
    source = flags.source
    if not flags.committed:
        source += f"; start-up rules and memory plan of {flags.rules_from}, the nearest known"
    base = re.sub(r"\.post\d+$", "", version)
    reason = f"sglang {version}: flags from {source}"
    spoken = setting.space.engine_version if setting.space else None
    if spoken and re.sub(r"\.post\d+$", "", spoken) != base:
        return Check(
            "flags",
            WARN,
            f"{reason}; the space is written for {spoken}: its flags are translated for "
            f"{version} (tuner optimize --dry-run shows the argv)",
        )
    return Check("flags", OK, reason)
