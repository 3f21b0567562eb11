"""benchmarks/client_overhead.py runs and reports both clients (its speed is not asserted here)."""

import subprocess
import sys
from pathlib import Path

from support.bench_fake_server import fake_server

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "client_overhead.py"


def test_overhead_script_reports_both_clients():
    with fake_server("--time-scale", "20", "--ttft", "0.05", "--itl", "0.02") as s:
        run = subprocess.run(
            [sys.executable, str(SCRIPT), "--url", s.url, "--requests", "4", "--output-len", "8",
             "--concurrency", "2", "--repeats", "1", "--max-ratio", "1000"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "tuner.bench (httpx)" in run.stdout and "plain aiohttp" in run.stdout
    assert "ratio (ours / plain):" in run.stdout
