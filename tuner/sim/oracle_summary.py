"""The oracle's request records and sglang's benchmark summary of them.

The simulator imports nothing of the tuner, so the oracle keeps its own copy of the summary
``tuner bench`` prints (``tuner.bench.metrics.summarize``: sglang's ``bench_serving``
definitions, the same keys, the same percentiles). ``tests/test_sim_oracle.py`` holds the two
equal on the oracle's records, which have the fields of ``tuner.bench.RequestRecord``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

STATISTICS = ("mean", "median", "std", "p90", "p95", "p99")


@dataclass(slots=True)
class OracleRecord:
    """One request as the benchmark client records it; times in modelled seconds (see
    ``tuner.bench.RequestRecord``)."""

    index: int
    start_s: float
    end_s: float = 0.0
    ttft_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    output_tokens: int = 0
    expected_output_tokens: int = 0
    cached_tokens: int = 0
    spec_accept_length: float | None = None
    error: str | None = None
    http_status: int | None = None
    conversation: int | None = None
    turn: int | None = None
    rid: str | None = None
    late_s: float = 0.0

    @property
    def success(self) -> bool:
        return self.error is None

    @property
    def latency_s(self) -> float:
        return self.end_s - self.start_s


def _tpot_ms(r: OracleRecord) -> float | None:
    if r.ttft_s is None or r.output_tokens < 2:
        return None
    return (r.latency_s - r.ttft_s) * 1000.0 / (r.output_tokens - 1)


def _itls_ms(r: OracleRecord) -> list[float]:
    out: list[float] = []
    times, tokens = r.chunk_times_s, r.chunk_tokens
    for i in range(1, len(times)):
        n = tokens[i]
        if n > 0:
            out.extend([(times[i] - times[i - 1]) * 1000.0 / n] * n)
    return out


def _distribution(name: str, values: Sequence[float]) -> dict[str, float]:
    if len(values) == 0:
        return {f"{stat}_{name}_ms": 0.0 for stat in STATISTICS}
    arr = np.asarray(values, dtype=float)
    p90, p95, p99 = np.percentile(arr, (90, 95, 99))
    return {
        f"mean_{name}_ms": float(arr.mean()),
        f"median_{name}_ms": float(np.median(arr)),
        f"std_{name}_ms": float(arr.std()),
        f"p90_{name}_ms": float(p90),
        f"p95_{name}_ms": float(p95),
        f"p99_{name}_ms": float(p99),
    }


def _meets(r: OracleRecord, slos: Mapping[str, float]) -> bool:
    ttft = None if r.ttft_s is None else r.ttft_s * 1000.0
    measured = {"ttft_ms": ttft, "tpot_ms": _tpot_ms(r), "e2e_latency_ms": r.latency_s * 1000.0}
    for key, limit in slos.items():
        value = measured[key]
        if value is None:
            if key == "ttft_ms":
                return False
            continue
        if value > limit:
            return False
    return True


def bench_summary(
    records: Sequence[OracleRecord], duration_s: float, slos: Mapping[str, float] | None = None
) -> dict[str, float | int]:
    """The benchmark summary of ``records`` over ``duration_s`` modelled seconds."""
    limits = {k: float(v) for k, v in (slos or {}).items()}
    done = [r for r in records if r.success]
    input_tokens = sum(r.prompt_tokens for r in done)
    output_tokens = sum(r.output_tokens for r in done)
    cached_tokens = sum(r.cached_tokens for r in done)
    good = sum(1 for r in done if _meets(r, limits))

    def per_second(value: float) -> float:
        return value / duration_s if duration_s > 0 else 0.0

    ttfts = [r.ttft_s * 1000.0 for r in done if r.ttft_s is not None]
    tpots = [v for r in done if (v := _tpot_ms(r)) is not None]
    itls = [v for r in done for v in _itls_ms(r)]
    e2es = [r.latency_s * 1000.0 for r in done]
    tokens = steps = 0.0
    for r in done:
        if r.spec_accept_length and r.spec_accept_length > 0 and r.output_tokens > 0:
            tokens += r.output_tokens
            steps += r.output_tokens / r.spec_accept_length
    summary: dict[str, float | int] = {
        "completed": len(done),
        "failed": len(records) - len(done),
        "duration": float(duration_s),
        "total_input_tokens": input_tokens,
        "total_output_tokens": output_tokens,
        "total_cached_tokens": cached_tokens,
        "request_throughput": per_second(len(done)),
        "input_throughput": per_second(input_tokens),
        "output_throughput": per_second(output_tokens),
        "total_throughput": per_second(input_tokens + output_tokens),
        "request_goodput": per_second(good),
        "concurrency": per_second(sum(e2es) / 1000.0),
        "cache_hit_rate": cached_tokens / input_tokens if input_tokens else 0.0,
        "accept_length": tokens / steps if steps else 0.0,
    }
    summary.update(_distribution("ttft", ttfts))
    summary.update(_distribution("tpot", tpots))
    summary.update(_distribution("itl", itls))
    summary["max_itl_ms"] = max(itls) if itls else 0.0
    summary.update(_distribution("e2e_latency", e2es))
    return summary
