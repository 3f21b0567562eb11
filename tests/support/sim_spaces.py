"""Small search spaces and seed-scenario arguments for tests on the simulator."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]

# The seed's speculative run: NEXTN 3 steps / topk 1 / 4 draft tokens with extra_buffer.
SEED_NEXTN = [
    "--speculative-algorithm", "NEXTN",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
    "--mamba-radix-cache-strategy", "extra_buffer",
]  # fmt: skip

# The same run as the seed host launched it: the pre-rename flag, so an sglang older than 0.5.23
# and its memory planner (the one the seed figures come from).
SEED_VERSION = "0.5.10"
SEED_NEXTN_OLD = [
    "--sim-sglang-version", SEED_VERSION,
    *SEED_NEXTN[:-2],
    "--mamba-scheduler-strategy", "extra_buffer",
]  # fmt: skip


def small_space(tmp_path: Path, name: str = "small", **overrides: object) -> Path:
    """The seed space with a short workload and a fast simulator, written to tmp_path."""
    data = yaml.safe_load((ROOT / "search_spaces" / "qwen3.6-27b-mtp-hicache.yaml").read_text())
    data["name"] = name
    data["sim"] = {**data["sim"], "time_scale": 200}
    data["workload"] = {
        "kind": "random",
        "num_requests": 24,
        "input_len": 512,
        "output_len": 48,
        "seed": 0,
    }
    data["bench"] = {**data["bench"], "concurrency": 8, "stages": 3, "warmup_requests": 0}
    data["slos"] = ["p99_ttft_ms <= 20000"]
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def tuner_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`tuner ARGS...` as a user runs it, in `cwd`, its output on 400 columns (a printed
    command on one line)."""
    return subprocess.run(
        [sys.executable, "-m", "tuner.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "400"},
        timeout=600,
    )
