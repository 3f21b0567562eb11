"""Shared test set-up: the helpers live in `tests/support/` (imported as `support.<module>`).

    support/sim_spaces.py         small seed-scenario spaces for studies on the simulator
    support/harness.py            a simulator process on a free port, stopped with its group
    support/probe.py              a second, independent load generator for simulator checks
    support/bench_fake_server.py  a tiny fake sglang server for the benchmark client
    support/fixture_studies.py    studies built in SQLite without a server, for the readers
    support/ctrl_c.py             Ctrl-C as a terminal delivers it (the whole process group)
    support/chromium_helper.py    a headless Chromium for the report and dashboard pages

The `benchmarks` fixture imports a module of `benchmarks/` as the package it is
(`benchmarks("oracle_measurer")` is `benchmarks.oracle_measurer`; pytest puts the repository root
on the path, pyproject.toml's `pythonpath`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

import pytest


@pytest.fixture
def benchmarks() -> Callable[[str], ModuleType]:
    """`benchmarks("oracle_measurer")`: the module `benchmarks.oracle_measurer`."""
    return lambda name: importlib.import_module(f"benchmarks.{name}")
