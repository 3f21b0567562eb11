"""The simulator against published figures of real sglang: the table of docs/reality.md.

Each row runs the simulator's headless oracle (`tuner.sim.oracle.predict`, the scheduler a served
benchmark runs) on the profiles named (`tuner/sim/profiles/`), with the workload as the source
describes it, and prints the simulated figure beside the published one. Rows marked
calibrated are the figures a profile default was fitted to (acceptance shapes, the seed);
the others were not used to set any value. Accept lengths are those of the acceptance model
itself (`tuner.sim.effects.chain_accept_length`, what a long run converges to).

    python benchmarks/reality_table.py            # the markdown table
    python benchmarks/reality_table.py --json     # the rows as JSON

ShareGPT is not shipped: its rows use random lengths with ShareGPT's means in sglang's benchmark
(about 300 prompt / 200 output tokens: uniform in [1, 600] and [1, 400]); MT-bench the same
with 1 client (its answers are long; about 100 prompt / 300 output tokens).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from tuner.bench import WorkloadSpec
from tuner.sim.effects import anchored_first, chain_accept_length
from tuner.sim.oracle import OracleResult, predict
from tuner.sim.profiles import load_model

H100, H200, RTX = "h100-sxm", "h200", "rtx-pro-6000-blackwell"
LLAMA, QWEN8, QWEN27 = "llama-3.1-8b-instruct", "qwen3-8b", "qwen3.6-27b"
SEED_OLD = ["--sim-sglang-version", "0.5.10"]
SEED_MTP = [
    *SEED_OLD,
    "--speculative-algorithm", "NEXTN",
    "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1",
    "--speculative-num-draft-tokens", "4",
    "--mamba-scheduler-strategy", "extra_buffer",
    "--mem-fraction-static", "0.93",
]  # fmt: skip
# within this ratio of the published figure a row holds (a CI floor: at or above it)
TOLERANCE = 0.20


@dataclass(frozen=True)
class Row:
    figure: str
    model: str
    gpu: str
    workload: str
    source: str
    published: float
    simulated: float
    kind: str = "measurement"  # measurement | floor (a lower bound) | ceiling (an upper one)
    calibrated: bool = False  # a profile default was fitted to it

    @property
    def ratio(self) -> float:
        return self.simulated / self.published if self.published else float("nan")

    @property
    def holds(self) -> bool:
        if self.kind == "floor":
            return self.simulated >= self.published * (1 - TOLERANCE)
        if self.kind == "ceiling":
            return self.simulated <= self.published * (1 + TOLERANCE)
        return abs(self.ratio - 1) <= TOLERANCE


def _random(n: int, input_len: int, output_len: int, ratio: float = 1.0) -> WorkloadSpec:
    return WorkloadSpec(
        kind="random", requests=n, input_len=input_len, output_len=output_len, range_ratio=ratio
    )


def _run(args: list[str], workload: WorkloadSpec, hw: str, model: str, **kw: Any) -> OracleResult:
    result = predict(args, workload, hw, model, **kw)
    if not result.launch_ok:
        raise SystemExit(f"{model} on {hw} {args}: {result.failure}")
    return result


def throughput_rows() -> list[Row]:
    rows = []
    ci = "sglang `test/srt/test_bench_serving.py` (CI floor)"
    r = _run([], _random(500, 4096, 2048, 0.0), H100, LLAMA)
    wl = "random 4096/2048, range 0, 500 prompts, all at once"
    rows.append(Row("output tok/s", LLAMA, "H100 SXM", wl, ci, 3800, r.output_throughput,
                    "floor", calibrated=True))  # fmt: skip
    r = _run([], _random(120, 4096, 2048, 0.0), H100, LLAMA, request_rate=1.0)
    wl = "random 4096/2048, range 0, 1 request/s"
    rows.append(Row("median TTFT ms", LLAMA, "H100 SXM", wl, ci, 86, r._get("median_ttft_ms"),
                    "ceiling"))  # fmt: skip
    rows.append(Row("median ITL ms", LLAMA, "H100 SXM", wl, ci, 10, r._get("median_itl_ms"),
                    "ceiling"))  # fmt: skip
    rows.append(Row("median E2E s", LLAMA, "H100 SXM", wl, ci, 11,
                    r._get("median_e2e_latency_ms") / 1000, "ceiling"))  # fmt: skip
    r = _run(["--max-running-requests", "10"], _random(300, 600, 400, 0.0), H100, LLAMA)
    rows.append(Row("output tok/s", LLAMA, "H100 SXM", "ShareGPT-like, --max-running-requests 10",
                    ci, 1100, r.output_throughput, "floor"))  # fmt: skip
    gpustack = "GPUStack performance lab, qwen3-8b/h100-latency.md (sglang 0.5.3)"
    r = _run([], _random(200, 600, 400, 0.0), H100, QWEN8, concurrency=4)
    wl = "ShareGPT-like, 4 clients"
    rows.append(Row("output tok/s", QWEN8, "H100 SXM", wl, gpustack, 525.6, r.output_throughput))
    rows.append(Row("mean TTFT ms", QWEN8, "H100 SXM", wl, gpustack, 27.7,
                    r._get("mean_ttft_ms")))  # fmt: skip
    rows.append(Row("mean TPOT ms", QWEN8, "H100 SXM", wl, gpustack, 7.19,
                    r._get("mean_tpot_ms")))  # fmt: skip
    r = _run([], _random(8, 100, 300), H100, LLAMA, concurrency=1)
    rows.append(Row("output tok/s", LLAMA, "H100 SXM", "MT-bench-like, 1 client",
                    "sglang speculative decoding docs", 158.3, r.output_throughput))  # fmt: skip
    r = _run([], _random(8, 100, 300), H200, QWEN8, concurrency=1)
    rows.append(Row("output tok/s", QWEN8, "H200", "1 client", "EAGLE issue #228", 186,
                    r.output_throughput))  # fmt: skip
    r = _run([], _random(6, 1024, 1024), H200, QWEN27, concurrency=1)
    rows.append(Row("TTFT ms", QWEN27, "H200", "1K in / 1K out, 1 client (sglang 0.5.12)",
                    "sglang issue #39042", 100.1, r._get("mean_ttft_ms")))  # fmt: skip
    return rows


def acceptance_rows() -> list[Row]:
    rows = []
    model = load_model(LLAMA)
    shape = model.effects.acceptance
    first = anchored_first(model.draft_acceptance["EAGLE"], shape)
    for steps, published in ((1, 2.00), (3, 3.88), (7, 6.25)):
        simulated = chain_accept_length(first, shape.effective_decay, shape.effective_spread, steps)
        rows.append(Row(f"accept length, {steps} steps", LLAMA, "any", "EAGLE topk 1",
                        "sglang PR #21599", published, simulated, calibrated=True))  # fmt: skip
    # GLM-4.7's shape is the one the seed model's MTP profile carries (no GLM profile: it needs
    # 8 GPUs); its own level a_1 = 0.826 is the fit's
    seed_shape = load_model(QWEN27).effects.acceptance
    for steps, published in ((1, 1.85), (3, 3.04), (7, 4.52)):
        simulated = chain_accept_length(
            0.826, seed_shape.effective_decay, seed_shape.effective_spread, steps
        )
        rows.append(Row(f"accept length, {steps} steps", "GLM-4.7-FP8 (shape)", "any",
                        "MTP topk 1", "sglang PR #23336", published, simulated,
                        calibrated=True))  # fmt: skip
    return rows


def seed_rows() -> list[Row]:
    src = "the seed host (docs/sglang-memory.md)"
    wl1, wl4 = "random 128/256, 1 client", "random 128/256, 4 clients"
    plain = _run(SEED_OLD, _random(4, 128, 256), RTX, QWEN27, concurrency=1)
    mtp1 = _run(SEED_MTP, _random(4, 128, 256), RTX, QWEN27, concurrency=1)
    mtp4 = _run(SEED_MTP, _random(12, 128, 256), RTX, QWEN27, concurrency=4)
    gpu = "RTX PRO 6000"
    return [
        Row("max_running_requests", QWEN27, gpu, "no speculation", src, 19,
            plain.max_running_requests, calibrated=True),
        Row("tok/s per request", QWEN27, gpu, wl1, src, 26.7,
            1000 / plain._get("median_tpot_ms"), calibrated=True),
        Row("max_running_requests", QWEN27, gpu, "MTP 3/1/4 extra_buffer", src, 4,
            mtp1.max_running_requests, calibrated=True),
        Row("tok/s per request (62-77)", QWEN27, gpu, "MTP, " + wl1, src, 69.5,
            1000 / mtp1._get("median_tpot_ms"), calibrated=True),
        Row("output tok/s", QWEN27, gpu, "MTP, " + wl4, src, 234, mtp4.output_throughput,
            calibrated=True),
    ]  # fmt: skip


def markdown(rows: list[Row]) -> str:
    head = (
        "| figure | model | GPU | workload | source | published | simulator | ratio | kind |"
        " calibrated |\n| --- | --- | --- | --- | --- | ---: | ---: | ---: | --- | --- |"
    )
    lines = [head]
    for r in rows:
        mark = "" if r.holds else " (outside 20%)"
        lines.append(
            f"| {r.figure} | {r.model} | {r.gpu} | {r.workload} | {r.source} | "
            f"{r.published:g} | {r.simulated:.4g} | {r.ratio:.2f}{mark} | {r.kind} | "
            f"{'yes' if r.calibrated else 'no'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rows = throughput_rows() + acceptance_rows() + seed_rows()
    if args.json:
        print(json.dumps([{**asdict(r), "ratio": r.ratio, "holds": r.holds} for r in rows]))
    else:
        print(markdown(rows))
        others = [r for r in rows if not r.calibrated]
        held = sum(r.holds for r in others)
        print(f"\n{held} of {len(others)} figures not used for calibration hold within 20%")
    print(f"({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
