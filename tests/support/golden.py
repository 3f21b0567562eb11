"""Golden traces of the search: what seeded studies launch, and which rule chose each trial.

A change that means to leave the search as it is (a rename, a deletion of code no study reaches,
settings made private) must leave these traces identical; tests/test_golden_trace.py re-runs
them. A change that means to move the search re-records them on purpose:

    python -m tests.support.golden --write          # every case
    python -m tests.support.golden --write seed-3s-default

Each case is one study of the quality harness (benchmarks/quality/study.py: the real objective
and study loop, measured by the oracle, no server launched) on a space and a method, at a small
budget so the six together stay under a minute on one core.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_DIR = ROOT / "tests" / "data" / "golden"
# A held-out cell with two SLOs that pull the running cap both ways (TTFT from below, TPOT
# from above): windows, edges and probes all get their turn.
HELDOUT_CELL = ROOT / "benchmarks" / "heldout" / "llama8b-h200-chat-edge.yaml"


@dataclass(frozen=True)
class Case:
    name: str
    space: str  # "seed-3s" (the seed space as shipped, p99 TTFT <= 3 s) or "heldout"
    method: str  # a method of benchmarks/quality/methods.py
    seed: int
    budget: int  # launched trials


CASES = (
    Case("seed-3s-default", "seed-3s", "default", 0, 25),
    Case("seed-3s-model-free", "seed-3s", "model-free", 0, 30),
    # The stop rule's checks (blind moves, neighbours, edges, probes, re-measurements).
    Case("seed-3s-default-stop", "seed-3s", "default-stop", 2, 30),
    Case("heldout-default", "heldout", "default", 1, 25),
    Case("heldout-model-free", "heldout", "model-free", 1, 30),
    Case("heldout-default-stop", "heldout", "default-stop", 0, 30),
)


def _space(name: str) -> Any:
    from benchmarks.quality.worlds import load_cell, world_space

    if name == "heldout":
        return load_cell(HELDOUT_CELL)
    return world_space(name, None)


def trace(case: Case) -> list[dict[str, Any]]:
    """Each launched trial of the case's study: its number, params, outcome and `guided_by`."""
    from benchmarks.oracle_measurer import NoiseModel, OracleCache
    from benchmarks.quality.methods import method_named
    from benchmarks.quality.study import run_study
    from benchmarks.quality.truth import Oracle
    from tuner.study import quiet_optuna

    quiet_optuna()
    space = _space(case.space)
    oracle = Oracle(space, OracleCache(space))
    run = run_study(method_named(case.method), case.seed, case.budget, space, oracle, NoiseModel())
    return [
        {
            "number": t.number,
            "guided_by": t.guided_by,
            "guided_from": t.guided_from,
            "outcome": t.outcome,
            "params": t.params,
        }
        for t in run.trials
    ]


def path_of(case: Case) -> Path:
    return GOLDEN_DIR / f"{case.name}.json"


def stored(case: Case) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(path_of(case).read_text())
    return data


def as_stored(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` as they read back from JSON (tuples become lists, keys strings)."""
    converted: list[dict[str, Any]] = json.loads(json.dumps(rows))
    return converted


def write(case: Case, say: Callable[[str], None] = print) -> None:
    rows = trace(case)
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    path_of(case).write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")
    say(f"{case.name}: {len(rows)} trials written to {path_of(case).relative_to(ROOT)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="re-record (else compare)")
    parser.add_argument("cases", nargs="*", help="case names (default: all)")
    args = parser.parse_args(argv)
    chosen = [c for c in CASES if not args.cases or c.name in args.cases]
    unknown = set(args.cases) - {c.name for c in CASES}
    if unknown:
        print(f"unknown case(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    differ = 0
    for case in chosen:
        if args.write:
            write(case)
        elif as_stored(trace(case)) != stored(case):
            print(f"{case.name}: differs from {path_of(case).relative_to(ROOT)}")
            differ += 1
        else:
            print(f"{case.name}: identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
