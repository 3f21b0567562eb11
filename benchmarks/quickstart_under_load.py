"""The README's quick start while every core is busy: does it still find something to export?

    python benchmarks/quickstart_under_load.py            # 40 trials, one busy loop per core
    python benchmarks/quickstart_under_load.py --busy 0   # the same on an otherwise idle host

Runs `tuner optimize --trials 40` on the default search space in a fresh directory while
`--busy` processes (default: one per CPU core) spin, then `tuner export --pick knee`. It passes
when the study has at least one SLO-feasible trial and the export succeeds, and writes what it
saw (wall time, trial outcomes, the best feasible trial, the simulator's lag counters) to
benchmarks/results/quickstart_under_load.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def busy_loops(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def tuner(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from tuner.cli import main; main()", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
    )


def study_facts(workdir: Path) -> dict[str, object]:
    """Trial outcomes and the best feasible trial, read from the study's storage."""
    import optuna

    from tuner.results import record

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    (db,) = list((workdir / "studies").glob("*.db"))
    study = optuna.load_study(study_name=None, storage=f"sqlite:///{db}")
    outcomes: dict[str, int] = {}
    feasible = []
    for t in study.trials:
        outcome = str(t.user_attrs.get(record.OUTCOME, t.state.name.lower()))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        constraints = t.user_attrs.get(record.CONSTRAINTS)
        if t.state.name == "COMPLETE" and t.values and constraints and record.feasible(constraints):
            feasible.append((t.values[0], t.values[1], t.number))
    best = max(feasible, default=None)
    return {
        "trials": len(study.trials),
        "outcomes": outcomes,
        "feasible": len(feasible),
        "best_feasible": None
        if best is None
        else {"trial": best[2], "output_throughput": best[0], "median_tpot_ms": best[1]},
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=40)
    p.add_argument("--busy", type=int, default=os.cpu_count() or 2, help="busy-loop processes")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="quickstart-") as tmp:
        workdir = Path(tmp)
        procs = busy_loops(a.busy)
        try:
            started = time.perf_counter()
            optimize = tuner("optimize", "--trials", str(a.trials), cwd=workdir)
            optimize_s = time.perf_counter() - started
            export = tuner("export", "--pick", "knee", cwd=workdir)
        finally:
            for proc in procs:
                proc.kill()
            for proc in procs:
                proc.wait()
        facts = study_facts(workdir) if optimize.returncode == 0 else {}
        exported = sorted(f.name for f in workdir.glob("launch_*"))
    result = {
        "command": f"tuner optimize --trials {a.trials}; tuner export --pick knee",
        "busy_processes": a.busy,
        "cpu_count": os.cpu_count(),
        "optimize_wall_s": round(optimize_s, 1),
        "optimize_rc": optimize.returncode,
        "export_rc": export.returncode,
        "exported": exported,
        **facts,
        "ok": optimize.returncode == 0
        and export.returncode == 0
        and int(facts.get("feasible", 0) or 0) >= 1,  # type: ignore[call-overload]
    }
    if not result["ok"]:
        result["optimize_tail"] = optimize.stdout[-2000:] + optimize.stderr[-2000:]
        result["export_tail"] = export.stdout[-1000:] + export.stderr[-1000:]
    print(json.dumps(result, indent=1))
    a.out.mkdir(parents=True, exist_ok=True)
    name = "quickstart_under_load.json" if a.busy else "quickstart_idle.json"
    (a.out / name).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
