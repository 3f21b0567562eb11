"""What any stop rule can keep: the full study's best after N trials against its best after 40.

    python benchmarks/stop_bound.py                      # the seed cells' 10-seed matrix
    python benchmarks/stop_bound.py --at 14 --results benchmarks/results/tuner_quality_tpot8b.json

A stop rule only chooses where a study ends; until it stops, the study runs as it would have
without it (the stop rule's own checks aside: tuner/study/stopping.py queues the estimate's best
untried configuration before stopping). So the best a study stopped after N trials can keep is
roughly what the same seed's full study had found by trial N. This reads a quality run's
per-seed fractions (`benchmarks/tuner_quality.py` writes them: the best SLO-feasible
throughput after 20 and after 40 launched trials, as a share of the cell's optimum) and prints,
per cell, the share of the 40-trial best that trial N held (median, worst seed) and how many
seeds held less than `--keep` of it. Issue 21 asks >= 0.99 with no case losing more than 2%,
in <= 50% of the 40-trial GPU hours: about 20 trials where trials cost alike.

Output: a table on stdout. It measures nothing new; it reads the JSON of a run already made.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RESULTS = ROOT / "benchmarks" / "results" / "tuner_quality_worlds.json"


def held(cell: dict[str, Any], method: str, at: int, full: int) -> list[float]:
    """Per seed: the best after `at` trials over the best after `full` (0 when `full` found
    nothing feasible: the cell cannot judge that seed, and it counts as kept)."""
    fractions = cell["fractions"][method]
    early, late = fractions[str(at)], fractions[str(full)]
    return [a / b if b > 0 else 1.0 for a, b in zip(early, late, strict=True)]


def table(results: dict[str, Any], method: str, at: int, full: int, keep: float) -> list[str]:
    lines = [
        f"| world | space | trial {at} / trial {full}: median | worst | seeds below {keep} |",
        "|---|---|---:|---:|---:|",
    ]
    for cell in results["cells"]:
        if method not in cell["fractions"] or str(at) not in cell["fractions"][method]:
            continue
        shares = held(cell, method, at, full)
        below = sum(1 for s in shares if s < keep)
        lines.append(
            f"| {cell['world']} | {cell['space']} | {statistics.median(shares):.3f} | "
            f"{min(shares):.3f} | {below} of {len(shares)} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--method", default="default")
    parser.add_argument("--at", type=int, default=20, help="trials where a stop would come")
    parser.add_argument("--full", type=int, default=40, help="the full study's trials")
    parser.add_argument("--keep", type=float, default=0.99)
    args = parser.parse_args(argv)
    if not args.results.is_file():
        print(f"error: no quality results at {args.results}", file=sys.stderr)
        return 2
    results = json.loads(args.results.read_text())
    budgets = {str(b) for b in results.get("options", {}).get("budgets", [args.at, args.full])}
    if not {str(args.at), str(args.full)} <= budgets:
        print(f"error: {args.results.name} has budgets {sorted(budgets)}", file=sys.stderr)
        return 2
    print("\n".join(table(results, args.method, args.at, args.full, args.keep)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
