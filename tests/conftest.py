"""Shared test set-up: the helpers live in `tests/support/` (imported as `support.<module>`).

    support/sim_spaces.py         small seed-scenario spaces for studies on the simulator
    support/harness.py            a simulator process on a free port, stopped with its group
    support/probe.py              a second, independent load generator for simulator checks
    support/bench_fake_server.py  a tiny fake sglang server for the benchmark client
    support/fixture_studies.py    studies built in SQLite without a server, for the readers
    support/ctrl_c.py             Ctrl-C as a terminal delivers it (the whole process group)
    support/chromium_helper.py    a headless Chromium for the report and dashboard pages

The `benchmarks` fixture imports a script of `benchmarks/` (they are scripts, not a package).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def benchmarks() -> Iterator[Callable[[str], ModuleType]]:
    """`benchmarks("oracle_measurer")`: that script imported as a module, for this test."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module
    finally:
        sys.path.remove(str(BENCHMARKS))
