"""Wall-clock speed-up of `tuner optimize --workers 3` over `--workers 1` on the simulator.

Both runs tune the same search space for the same number of trials, side by side in one
invocation, each in a fresh studies directory:

    python benchmarks/parallel_speedup.py --trials 24 --workers 3 --time-scale 20

On a GPU node the servers do the work and the tuner mostly waits, which is what a moderate
`--time-scale` reproduces on a small CPU host: the simulated serving takes real (scaled) time,
so several workers overlap it. At very high time scales the run is CPU-bound instead, and the
speed-up is capped by the cores of this machine.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def write_space(directory: Path, time_scale: float) -> Path:
    """The seed space with a shorter workload, so that a trial takes seconds."""
    data = yaml.safe_load((ROOT / "search_spaces" / "qwen3.6-27b-mtp-hicache.yaml").read_text())
    data["name"] = "speedup"
    data["sim"] = {**data["sim"], "time_scale": time_scale}
    data["workload"] = {
        "kind": "random",
        "requests": 32,
        "input_len": 1024,
        "output_len": 128,
        "seed": 0,
    }
    data["bench"] = {**data["bench"], "concurrency": 8, "stages": 4, "warmup_requests": 0}
    path = directory / "speedup.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run(space: Path, trials: int, workers: int, directory: Path) -> float:
    cmd = [
        sys.executable, "-m", "tuner.cli", "optimize", "--space", str(space),
        "--trials", str(trials), "--workers", str(workers), "--seed", "0",
        "--studies-dir", str(directory / f"studies-{workers}"), "--no-report",
    ]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=24)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--time-scale", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tuner-speedup-") as tmp:
        directory = Path(tmp)
        space = write_space(directory, args.time_scale)
        serial = run(space, args.trials, 1, directory)
        parallel = run(space, args.trials, args.workers, directory)
    print(f"trials: {args.trials}, simulator time scale: {args.time_scale:g}")
    print(f"--workers 1: {serial:7.1f} s wall")
    print(f"--workers {args.workers}: {parallel:7.1f} s wall")
    print(f"speed-up: x{serial / parallel:.2f}")


if __name__ == "__main__":
    main()
