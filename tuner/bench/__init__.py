"""Benchmark a running sglang server (or the simulator) the way sglang's own benchmark does.

The public names of the benchmark, imported from here; the modules, bottom first:

- `records`: `RequestRecord` (one request) and `Summary` (sglang's key names -> figures);
- `metrics`: `summarize` and the other pure functions from records to a summary;
- `trace`: a trace file (Mooncake, Azure, BurstGPT, ShareGPT, OpenAI chat) -> its requests and
  their arrival times, for the `trace` workload kind (`read_trace`); `trace_profile`: its
  figures (`profile_trace`: rates, length percentiles, prefix reuse, sessions);
- `workload`: `WorkloadSpec`, the prompts of a run; `payload`: `build_body` for each endpoint;
- `transport` and `client`: the streaming HTTP client (`BenchClient`) and its two clocks;
- `dispatch`, with `wallclock` and `modelled`: when requests go out, on the wall clock against a
  real server or in modelled time against the simulator (`BenchLagError`, `failure_message`);
- `runner`: `BenchConfig`, `run_bench`, `BenchResult`: a staged run with an early-stop hook;
- `command`: the `tuner bench` command (the CLI imports it; it is not re-exported here).

Example:
    >>> from tuner.bench import BenchConfig, WorkloadSpec, run_bench
    >>> spec = WorkloadSpec.from_dict({"kind": "random", "requests": 100, "input_len": 1024})
    >>> cfg = BenchConfig(url="http://127.0.0.1:30000", workload=spec, concurrency=8, stages=4)
    >>> result = run_bench(cfg, on_stage=lambda stage, summary: True)  # doctest: +SKIP
    >>> result.summary["output_throughput"]  # doctest: +SKIP
"""

from tuner.bench.client import BenchClient
from tuner.bench.metrics import summarize
from tuner.bench.modelled import BenchLagError, failure_message
from tuner.bench.payload import build_body
from tuner.bench.records import RequestRecord, Summary
from tuner.bench.runner import BenchConfig, BenchResult, run_bench, run_bench_async
from tuner.bench.trace import read_trace
from tuner.bench.trace_profile import TraceProfile, profile_trace
from tuner.bench.workload import KINDS as WORKLOAD_KINDS
from tuner.bench.workload import WorkloadSpec

__all__ = [
    "WORKLOAD_KINDS",
    "BenchClient",
    "BenchConfig",
    "BenchLagError",
    "BenchResult",
    "RequestRecord",
    "Summary",
    "TraceProfile",
    "WorkloadSpec",
    "build_body",
    "failure_message",
    "profile_trace",
    "read_trace",
    "run_bench",
    "run_bench_async",
    "summarize",
]
