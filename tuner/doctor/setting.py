"""What `tuner doctor` checks against: the engine's Python, the space, the port, the studies dir.

    setting = DoctorSetting.resolve(engine_python="~/venvs/sglang/bin/python", space_path=None)

The engine's Python is `--engine-python`, else the space's `engine.python`, else the tuner's own,
as `tuner optimize --engine sglang` chooses it. A Python that is not there is not an error here:
the engine check reports it, so every other check still runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tuner.space.load import load_space
from tuner.space.model import SearchSpace

SGLANG_DEFAULT_PORT = 30000  # sglang's own default, and the exported launch script's


@dataclass(frozen=True)
class DoctorSetting:
    python: str  # as given, `~` and $VARS expanded
    python_source: str  # where it came from, for the reason line
    space: SearchSpace | None = None
    space_path: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)  # on top of the tuner's environment
    port: int = SGLANG_DEFAULT_PORT
    port_given: bool = False
    studies_dir: Path = Path("studies")
    gpus: str | None = None  # CUDA_VISIBLE_DEVICES for the server; None: every GPU

    @classmethod
    def resolve(
        cls,
        *,
        engine_python: str | None = None,
        space_path: Path | None = None,
        port: int | None = None,
        studies_dir: Path = Path("studies"),
        gpus: str | None = None,
        engine_env: Mapping[str, str] | None = None,
    ) -> DoctorSetting:
        """A bad space file is a UserError (one line): nothing can be checked against it."""
        space = load_space(space_path) if space_path is not None else None
        if engine_python:
            python, source = engine_python, "--engine-python"
        elif space is not None and space.engine.python:
            python, source = space.engine.python, "the space's engine.python"
        else:
            python, source = sys.executable, "the tuner's own Python"
        env = {**(space.engine.env if space else {}), **(engine_env or {})}
        return cls(
            python=os.path.expandvars(os.path.expanduser(python)),
            python_source=source,
            space=space,
            space_path=space_path,
            env=env,
            port=SGLANG_DEFAULT_PORT if port is None else port,
            port_given=port is not None,
            studies_dir=studies_dir,
            gpus=gpus if gpus is not None else os.environ.get("CUDA_VISIBLE_DEVICES"),
        )

    @property
    def on_cpu(self) -> bool:
        """The space runs sglang on the CPU (`fixed_flags: {device: cpu}`): no GPU is needed."""
        return self.space is not None and self.space.fixed_flags.get("device") == "cpu"

    def gpu_indices(self) -> set[int] | None:
        """The GPUs the server gets, by NVML index; None: all (or names NVML does not index)."""
        if not self.gpus:
            return None
        parts = [p.strip() for p in self.gpus.split(",") if p.strip()]
        if not parts or not all(p.isdigit() for p in parts):
            return None
        return {int(p) for p in parts}
