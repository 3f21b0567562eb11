"""How far a closed loop's early-stage p99 TTFT sits below its full run's, and how much of the
gap counting the queued requests would close.

A stage of a benchmark (tuner/bench/runner.py) summarizes the requests that have finished. In a
closed loop with fewer running slots than clients, the requests still waiting for a slot have
the longest TTFTs, and none of them is counted yet. At the stage's end each such request has
waited at least `now - start`: counted as that lower bound (or its TTFT, once its first token
came), the stage's p99 can only rise towards the truth. This script measures both against the
full run's p99 TTFT, for every stage of every launch of one study on the simulator's oracle
(noise-free figures):

    python benchmarks/stage_queue_bias.py benchmarks/heldout/llama70b-h100x2-fp8kv.yaml \\
        model-free 0 15

Arguments: the cell (a space file, or a quality benchmark space name), the method
(benchmarks/quality/methods.py), the seed and the trial budget.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

import benchmarks.oracle_measurer as oracle_measurer
from benchmarks.oracle_measurer import NoiseModel
from benchmarks.quality.methods import method_named
from benchmarks.quality.study import run_study
from benchmarks.quality.truth import world_oracle
from tuner.bench.records import RequestRecord

Row = tuple[int, int, float, float, float, int]


def _p99(values: Sequence[float]) -> float:
    return float(np.percentile(values, 99)) if values else 0.0


def queue_row(records: list[RequestRecord], completed: int) -> Row:
    """(completed, total, the stage's p99 TTFT over finished requests, the same with the
    requests in flight counted, the full run's p99 TTFT, how many were in flight), in ms."""
    done = records[:completed]
    now = max((r.end_s for r in done), default=0.0)
    finished = [r.ttft_s * 1000 for r in done if r.ttft_s is not None and r.success]
    counted = list(finished)
    for r in records[completed:]:
        if r.start_s >= now:
            continue
        first_token = r.ttft_s is not None and r.start_s + r.ttft_s <= now
        counted.append(
            (r.ttft_s if first_token and r.ttft_s is not None else now - r.start_s) * 1000
        )
    full = [r.ttft_s * 1000 for r in records if r.ttft_s is not None and r.success]
    return (
        completed,
        len(records),
        _p99(finished),
        _p99(counted),
        _p99(full),
        len(counted) - len(finished),
    )


def main(argv: list[str]) -> None:
    if len(argv) != 4:
        raise SystemExit(__doc__)
    cell, method, seed, budget = argv[0], argv[1], int(argv[2]), int(argv[3])
    rows: list[Row] = []
    summary = oracle_measurer.stage_summary

    def recorded(records: list[RequestRecord], completed: int, slos: object) -> object:
        rows.append(queue_row(records, completed))
        return summary(records, completed, slos)  # type: ignore[arg-type]

    oracle_measurer.stage_summary = recorded  # type: ignore[assignment]
    space, oracle = world_oracle(cell, None)
    run_study(method_named(method), seed, budget, space, oracle, NoiseModel(0.02, 0.02, 0.05))
    print("| requests finished | finished only / full | with the queued / full | queued |", end="")
    print(" full p99 TTFT (ms) |")
    print("|---|---:|---:|---:|---:|")
    for completed, total, finished, counted, full, queued in rows:
        if completed == total or full <= 0:
            continue
        print(
            f"| {completed}/{total} | {finished / full:.2f} | {counted / full:.2f} | {queued} "
            f"| {full:,.0f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
