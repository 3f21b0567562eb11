"""benchmarks/stop_bound.py: what a stop at trial N can keep of the same seeds' 40-trial best."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.stop_bound import held, main


def _cell(early: list[float], late: list[float]) -> dict:
    return {"world": "w", "space": "s", "fractions": {"default": {"20": early, "40": late}}}


def test_a_seed_that_found_more_after_trial_20_shows_what_a_stop_there_loses():
    cell = _cell([0.9, 1.0, 0.0, 0.0], [1.0, 1.0, 0.5, 0.0])
    # 0.9 of 1.0; all of it; nothing of 0.5; and a seed that never found anything is kept.
    assert held(cell, "default", 20, 40) == pytest.approx([0.9, 1.0, 0.0, 1.0])


def test_the_table_counts_the_seeds_below_the_share_to_keep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = {"options": {"budgets": [20, 40]}, "cells": [_cell([0.95, 0.99, 1.0], [1.0] * 3)]}
    path = tmp_path / "q.json"
    path.write_text(json.dumps(results))
    assert main(["--results", str(path)]) == 0
    assert "| w | s | 0.990 | 0.950 | 1 of 3 |" in capsys.readouterr().out
    assert main(["--results", str(path), "--at", "10"]) == 2  # no such budget in the run
