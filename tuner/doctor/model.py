"""The space's model: a local checkpoint with its config.json, or a hub id in the local cache."""

from __future__ import annotations

import os
from pathlib import Path

from tuner.doctor.check import FAIL, OK, WARN, Check
from tuner.doctor.setting import DoctorSetting
from tuner.engines.model_config import ModelMemory, find_config_dir, hf_cache_dirs, read_config

GB = 1e9
_WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.gguf")


def model_check(setting: DoctorSetting) -> tuple[Check, ModelMemory | None]:
    """The model's config.json on this host, and its shape (what the memory checks need)."""
    if setting.space is None:
        return Check("model", WARN, "not checked: give --space FILE to check its model"), None
    given = setting.space.model_path
    directory = find_config_dir(os.path.expandvars(given))
    if directory is None:
        return _not_found(given), None
    try:
        memory = ModelMemory.from_hf_config(read_config(directory))
    except Exception as exc:  # a config this tuner cannot size: sglang may still serve it
        return Check("model", WARN, f"{directory}/config.json: shape not understood ({exc})"), None
    cached = directory.parent.name == "snapshots"
    where = f" (Hugging Face cache, revision {directory.name[:12]})" if cached else ""
    found = f"{given}{where}: config.json found; weights ~{_size(memory.weight_bytes)}"
    if not any(directory.glob(pattern) for pattern in _WEIGHTS):
        fetch = (
            "sglang downloads them at the first launch"
            if cached
            else "sglang cannot load this directory"
        )
        return Check("model", WARN if cached else FAIL, f"{found}, but no weight files: {fetch}"), (
            memory
        )
    return Check("model", OK, found), memory


def _not_found(given: str) -> Check:
    path = Path(os.path.expandvars(given)).expanduser()
    looks_local = given.startswith(("/", ".", "~", "$")) or given.count("/") > 1 or path.exists()
    if looks_local:
        what = "a directory without config.json" if path.is_dir() else "no such directory"
        return Check(
            "model",
            FAIL,
            f"model_path {given}: {what}; point it at a checkpoint directory holding "
            "config.json and the weights",
        )
    caches = ", ".join(str(d) for d in hf_cache_dirs())
    return Check(
        "model",
        WARN,
        f"{given} is not in the Hugging Face cache ({caches}): sglang downloads it at the first "
        f"launch; to fetch it now: huggingface-cli download {given} (HF_TOKEN for gated models)",
    )


def _size(size: float) -> str:
    return f"{size / GB:.1f} GB" if size >= 0.1 * GB else f"{size / 1e6:.1f} MB"
