"""The simulated SGLang server (``python -m tuner.sim``) and its oracle.

A separate program: it imports only its own package. The oracle (``tuner.sim.oracle``, a
headless run of the server's scheduler) takes the benchmark's workload as an argument and gives
the summary ``tuner bench`` would print. Importing this package starts nothing (names load on
first use).

    >>> from tuner.sim import OracleWorkload, predict
    >>> predict(["--speculative-algorithm", "MTP"], OracleWorkload()).failure
    'ValueError: Unknown speculative algorithm name: MTP'
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "predict": "tuner.sim.oracle",
    "OracleWorkload": "tuner.sim.oracle",
    "OracleResult": "tuner.sim.oracle",
    "plan_memory": "tuner.sim.memory",
    "MemoryPlan": "tuner.sim.memory",
    "resolve": "tuner.sim.config",
    "SimConfig": "tuner.sim.config",
    "parse_args": "tuner.sim.args",
    "ServerArgs": "tuner.sim.args",
    "StartupFailure": "tuner.sim.failures",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'tuner.sim' has no attribute {name!r}")
