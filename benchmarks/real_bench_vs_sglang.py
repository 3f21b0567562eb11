"""`tuner bench` against sglang's own `python -m sglang.bench_serving`, on one real CPU server.

    python benchmarks/real_bench_vs_sglang.py [--repeats 3] [--requests 32] [--concurrency 4]

Needs the real-sglang environment (tools/install_real_sglang.sh). Starts real sglang 0.5.23 once
on the tiny Llama (tests/support/tiny_llama.py) and runs the two clients back to back on the
same workload shape, alternating, `--repeats` times each: random token ids, fixed input and
output lengths (range ratio 1), ignore EOS, a concurrency cap, no request-rate limit, one
warm-up request. sglang's client sends token ids too (`--dataset-name random-ids
--tokenize-prompt`), so neither side tokenizes text.

Prints per run and per client: output tok/s, median TTFT, median TPOT; then the spread of each
client across its runs ((max - min) / mean) and the ratio of the two clients' means. Writes
benchmarks/results/real_bench_vs_sglang.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.real_sglang import (
    INSTALL_HINT,
    RealServer,
    build_tiny_model,
    venv_python,
)

METRICS = ("output_throughput", "median_ttft_ms", "median_tpot_ms")
LABELS = {
    "output_throughput": "output tok/s",
    "median_ttft_ms": "median TTFT ms",
    "median_tpot_ms": "median TPOT ms",
}
RESULTS = Path(__file__).resolve().parent / "results" / "real_bench_vs_sglang.json"


def run_tuner(url: str, args: argparse.Namespace, seed: int, out: Path) -> dict[str, float]:
    command = [sys.executable, "-m", "tuner.cli", "bench", "--url", url, "--workload", "random"]
    command += ["--requests", str(args.requests), "--input-len", str(args.input_len)]
    command += ["--output-len", str(args.output_len), "--concurrency", str(args.concurrency)]
    command += ["--warmup-requests", "1", "--seed", str(seed), "--output-json", str(out)]
    subprocess.run(command, check=True, capture_output=True, timeout=900)
    data = json.loads(out.read_text())
    if data["completed"] != args.requests:
        raise SystemExit(f"tuner bench completed {data['completed']} of {args.requests}")
    return {m: float(data[m]) for m in METRICS}


def run_sglang(
    python: Path, url: str, model: Path, args: argparse.Namespace, seed: int, out: Path
) -> dict[str, float]:
    command = [str(python), "-m", "sglang.bench_serving", "--backend", "sglang"]
    command += ["--base-url", url, "--tokenizer", str(model), "--model", str(model)]
    command += ["--dataset-name", "random-ids", "--tokenize-prompt"]
    command += ["--random-input-len", str(args.input_len)]
    command += ["--random-output-len", str(args.output_len), "--random-range-ratio", "1.0"]
    command += ["--num-prompts", str(args.requests), "--max-concurrency", str(args.concurrency)]
    command += ["--warmup-requests", "1", "--seed", str(seed), "--disable-tqdm"]
    command += ["--output-file", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0 or not out.is_file():
        tail = done.stdout[-3000:] + done.stderr[-3000:]
        raise SystemExit(f"sglang.bench_serving failed:\n{tail}")
    data = json.loads(out.read_text().splitlines()[-1])
    if int(data["completed"]) != args.requests:
        raise SystemExit(f"sglang.bench_serving completed {data['completed']} of {args.requests}")
    return {m: float(data[m]) for m in METRICS}


def spread(values: list[float]) -> float:
    mean = statistics.fmean(values)
    return (max(values) - min(values)) / mean if mean else 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-running-requests", type=int, default=8)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    python = venv_python()
    if python is None:
        print(f"error: {INSTALL_HINT}", file=sys.stderr)
        return 2

    runs: dict[str, list[dict[str, float]]] = {"tuner": [], "sglang": []}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="real-bench-") as tmp:
        work = Path(tmp)
        model = build_tiny_model(python, work / "tiny-llama")
        flags = ["--max-running-requests", str(args.max_running_requests)]
        with RealServer.start(python, model, flags, work / "server.log") as server:
            for repeat in range(args.repeats):
                # Alternate which client goes first, so a drift of the host favours neither.
                order = ("tuner", "sglang") if repeat % 2 == 0 else ("sglang", "tuner")
                for client in order:
                    out = work / f"{client}-{repeat}.json"
                    if client == "tuner":
                        figures = run_tuner(server.url, args, repeat, out)
                    else:
                        figures = run_sglang(python, server.url, model, args, repeat, out)
                    runs[client].append(figures)
                    shown = ", ".join(f"{LABELS[m]} {figures[m]:.1f}" for m in METRICS)
                    print(f"run {repeat + 1} {client:6s}: {shown}", flush=True)

    comparison = {}
    print()
    print(f"{'metric':16s} {'tuner':>18s} {'sglang':>18s} {'ratio':>7s}  spread t / s")
    for metric in METRICS:
        ours = [r[metric] for r in runs["tuner"]]
        theirs = [r[metric] for r in runs["sglang"]]
        ratio = statistics.fmean(ours) / statistics.fmean(theirs)
        row = {
            "tuner_mean": round(statistics.fmean(ours), 2),
            "sglang_mean": round(statistics.fmean(theirs), 2),
            "ratio": round(ratio, 3),
            "tuner_spread": round(spread(ours), 3),
            "sglang_spread": round(spread(theirs), 3),
        }
        comparison[metric] = row
        print(
            f"{LABELS[metric]:16s} {row['tuner_mean']:>18.1f} {row['sglang_mean']:>18.1f} "
            f"{ratio:>7.3f}  {row['tuner_spread']:.1%} / {row['sglang_spread']:.1%}"
        )
    result = {
        "workload": {
            "kind": "random",
            "requests": args.requests,
            "input_len": args.input_len,
            "output_len": args.output_len,
            "concurrency": args.concurrency,
        },
        "server_flags": ["--max-running-requests", str(args.max_running_requests)],
        "repeats": args.repeats,
        "runs": runs,
        "comparison": comparison,
        "wall_s": round(time.monotonic() - started, 1),
    }
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\n{result['wall_s']} s; written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
