"""Benchmark a running sglang server (or the simulator) the way sglang's own benchmark does.

Example:
    >>> from tuner.bench import BenchConfig, WorkloadSpec, run_bench
    >>> spec = WorkloadSpec.from_dict({"kind": "random", "requests": 100, "input_len": 1024})
    >>> cfg = BenchConfig(url="http://127.0.0.1:30000", workload=spec, concurrency=8, stages=4)
    >>> result = run_bench(cfg, on_stage=lambda stage, summary: True)  # doctest: +SKIP
    >>> result.summary["output_throughput"]  # doctest: +SKIP
"""

from tuner.bench.client import RequestRecord
from tuner.bench.runner import BenchConfig, BenchLagError, BenchResult, run_bench, run_bench_async
from tuner.bench.workload import WorkloadSpec

__all__ = [
    "BenchConfig",
    "BenchLagError",
    "BenchResult",
    "RequestRecord",
    "WorkloadSpec",
    "run_bench",
    "run_bench_async",
]
