"""A run is resolved once: one read of the space file and one simulator description per process.

Counted over a whole `tuner optimize` (cost, dry-run-free study, trials, summary) in this
process: every read of the space file goes through `Path.read_text` or `open`, and every
description of the simulator is a `python -m tuner.sim --sim-describe` subprocess.
"""

from __future__ import annotations

import builtins
import subprocess
from pathlib import Path

from support.sim_spaces import small_space

from tuner.study.options import StudyOptions


def _count_reads_and_descriptions(monkeypatch, space: Path) -> dict[str, int]:
    counts = {"space_reads": 0, "describes": 0}
    target = space.resolve()
    real_read_text, real_open, real_run = Path.read_text, builtins.open, subprocess.run

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if self.resolve() == target:
            counts["space_reads"] += 1
        return real_read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    def open_(file: object, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if isinstance(file, str | Path) and Path(file).resolve() == target:
            counts["space_reads"] += 1
        return real_open(file, *args, **kwargs)  # type: ignore[call-overload]

    def run(argv: object, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if isinstance(argv, list) and "--sim-describe" in argv:
            counts["describes"] += 1
        return real_run(argv, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(Path, "read_text", read_text)
    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(subprocess, "run", run)
    return counts


def test_a_whole_study_reads_its_space_once_and_asks_the_simulator_once(tmp_path, monkeypatch):
    from tuner.optimize import run_optimize

    space = small_space(tmp_path)
    counts = _count_reads_and_descriptions(monkeypatch, space)
    options = StudyOptions(trials=3, space_path=space, studies_dir=tmp_path / "studies", seed=0)
    assert run_optimize(options, workers=1, report=False) == 0
    assert counts == {"space_reads": 1, "describes": 1}


def test_a_capacity_bound_is_resolved_without_reading_the_file_again(tmp_path, monkeypatch):
    from tuner.study.run import resolve_run

    space = small_space(
        tmp_path,
        name="openloop",
        bench={"concurrency": None, "request_rate": 8.0},
        params={"max_running_requests": {"low": 1, "high": "capacity", "log": True}},
    )
    counts = _count_reads_and_descriptions(monkeypatch, space)
    run = resolve_run(StudyOptions(space_path=space, studies_dir=tmp_path / "studies"))
    assert run.space.capacity is not None
    assert run.space.params["max_running_requests"].high == run.space.capacity
    assert counts == {"space_reads": 1, "describes": 1}
