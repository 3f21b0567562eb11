"""Request records -> benchmark summary, with sglang's benchmark definitions. Pure functions.

Definitions (as sglang's `bench_serving` computes them; only successful requests count):
- request / input / output / total throughput: completed requests, prompt tokens, output
  tokens, prompt + output tokens, each divided by the benchmark duration;
- TTFT: time from sending a request to the first chunk that carries output;
- TPOT of a request: (E2E latency - TTFT) / (output tokens - 1), for requests with > 1 token;
- ITL: each later chunk's gap to the previous chunk, divided by the tokens it carries and
  counted once per token (a speculative chunk of 3 tokens gives 3 equal gaps);
- E2E latency: time from sending to the last byte;
- concurrency: sum of E2E latencies / duration (the average number of requests in flight);
- each of TTFT, TPOT, ITL and E2E as mean, median, std, p90, p95, p99, in milliseconds; an empty
  list gives 0.0 for all of them, as sglang does.
Added here: cache hit rate (cached prompt tokens / prompt tokens), the mean speculative accept
length (output tokens per decoding step, over all requests), and goodput (completed requests
per second that meet every given SLO).

Example:
    >>> summarize([], duration_s=1.0)["completed"]
    0
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from tuner.bench.records import RequestRecord, Summary

LATENCIES = ("ttft", "tpot", "itl", "e2e_latency")
STATISTICS = ("mean", "median", "std", "p90", "p95", "p99")
SLO_KEYS = ("ttft_ms", "tpot_ms", "e2e_latency_ms")


def ttft_ms(record: RequestRecord) -> float | None:
    return None if record.ttft_s is None else record.ttft_s * 1000.0


def e2e_latency_ms(record: RequestRecord) -> float:
    return record.latency_s * 1000.0


def tpot_ms(record: RequestRecord) -> float | None:
    """Mean time per output token after the first; None for requests with < 2 tokens."""
    if record.ttft_s is None or record.output_tokens < 2:
        return None
    return (record.latency_s - record.ttft_s) * 1000.0 / (record.output_tokens - 1)


def itls_ms(record: RequestRecord) -> list[float]:
    """Inter-token latencies: one entry per token after the first chunk."""
    out: list[float] = []
    times, tokens = record.chunk_times_s, record.chunk_tokens
    for i in range(1, len(times)):
        n = tokens[i]
        if n > 0:
            out.extend([(times[i] - times[i - 1]) * 1000.0 / n] * n)
    return out


def distribution(name: str, values: Sequence[float]) -> dict[str, float]:
    """mean/median/std/p90/p95/p99 of `values`, keyed as sglang names them (`p99_ttft_ms`)."""
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


def check_slos(slos: Mapping[str, float] | None) -> dict[str, float]:
    """Validate SLO limits (keys in SLO_KEYS, values > 0); raises ValueError naming the key."""
    checked: dict[str, float] = {}
    for key, limit in (slos or {}).items():
        if key not in SLO_KEYS:
            raise ValueError(f"SLO {key!r} is not known; allowed: {', '.join(SLO_KEYS)}")
        if isinstance(limit, bool) or not isinstance(limit, int | float) or limit <= 0:
            raise ValueError(f"SLO {key!r} must be a number > 0, got {limit!r}")
        checked[key] = float(limit)
    return checked


def meets_slos(record: RequestRecord, slos: Mapping[str, float]) -> bool:
    """A successful request whose TTFT, TPOT and E2E latency are all within their limits.

    A request with a single output token has no TPOT and cannot miss a TPOT limit.
    """
    if not record.success:
        return False
    measured = {
        "ttft_ms": ttft_ms(record),
        "tpot_ms": tpot_ms(record),
        "e2e_latency_ms": e2e_latency_ms(record),
    }
    for key, limit in slos.items():
        value = measured[key]
        if value is None:
            if key == "ttft_ms":  # no first token at all: it never arrived in time
                return False
            continue
        if value > limit:
            return False
    return True


def accept_length(records: Iterable[RequestRecord]) -> float:
    """Output tokens per decoding step over all requests that report an accept length.

    Weighting by steps (not averaging the per-request figures) is what the server's own
    average means. 0.0 when no request reports one (no speculative decoding).
    """
    tokens = steps = 0.0
    for r in records:
        if r.spec_accept_length and r.spec_accept_length > 0 and r.output_tokens > 0:
            tokens += r.output_tokens
            steps += r.output_tokens / r.spec_accept_length
    return tokens / steps if steps else 0.0


def summarize(
    records: Sequence[RequestRecord],
    duration_s: float,
    slos: Mapping[str, float] | None = None,
) -> Summary:
    """The full benchmark summary of `records` over `duration_s` modelled seconds."""
    limits = check_slos(slos)
    done = [r for r in records if r.success]
    input_tokens = sum(r.prompt_tokens for r in done)
    output_tokens = sum(r.output_tokens for r in done)
    cached_tokens = sum(r.cached_tokens for r in done)
    good = sum(1 for r in done if meets_slos(r, limits))

    def per_second(value: float) -> float:
        return value / duration_s if duration_s > 0 else 0.0

    ttfts = [v for r in done if (v := ttft_ms(r)) is not None]
    tpots = [v for r in done if (v := tpot_ms(r)) is not None]
    itls = [v for r in done for v in itls_ms(r)]
    e2es = [e2e_latency_ms(r) for r in done]

    summary: Summary = {
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
        "accept_length": accept_length(done),
    }
    summary.update(distribution("ttft", ttfts))
    summary.update(distribution("tpot", tpots))
    summary.update(distribution("itl", itls))
    summary["max_itl_ms"] = max(itls) if itls else 0.0
    summary.update(distribution("e2e_latency", e2es))
    return summary
