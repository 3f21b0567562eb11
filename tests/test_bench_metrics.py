import math

import numpy as np
import pytest

from tuner.bench import RequestRecord
from tuner.bench.metrics import (
    accept_length,
    distribution,
    itls_ms,
    meets_slos,
    summarize,
    tpot_ms,
    ttft_ms,
)


def rec(start, chunks, *, prompt=100, cached=0, accept=None, error=None, end=None, index=0):
    """A record whose chunks are (offset from start in s, tokens)."""
    times = [t for t, _ in chunks]
    tokens = [n for _, n in chunks]
    return RequestRecord(
        index=index,
        start_s=start,
        end_s=end if end is not None else start + (times[-1] if times else 0.5),
        ttft_s=times[0] if times else None,
        chunk_times_s=times,
        chunk_tokens=tokens,
        prompt_tokens=prompt,
        output_tokens=sum(tokens),
        expected_output_tokens=sum(tokens),
        cached_tokens=cached,
        spec_accept_length=accept,
        error=error,
    )


def test_single_token_chunks():
    r = rec(1.0, [(0.2, 1), (0.3, 1), (0.5, 1)])
    assert ttft_ms(r) == pytest.approx(200)
    assert tpot_ms(r) == pytest.approx((500 - 200) / 2)
    assert itls_ms(r) == pytest.approx([100, 200])


def test_chunks_carrying_several_tokens_split_their_gap():
    # speculative decoding: 1 token first, then 3 and 2 tokens per chunk
    r = rec(0.0, [(0.1, 1), (0.4, 3), (0.6, 2)])
    assert r.output_tokens == 6
    assert itls_ms(r) == pytest.approx([100, 100, 100, 100, 100])
    assert tpot_ms(r) == pytest.approx((600 - 100) / 5)


def test_zero_and_one_token_requests():
    zero = rec(0.0, [], end=0.3)
    one = rec(0.0, [(0.2, 1)], end=0.25)
    assert ttft_ms(zero) is None and tpot_ms(zero) is None and itls_ms(zero) == []
    assert tpot_ms(one) is None and itls_ms(one) == []
    s = summarize([zero, one], duration_s=1.0)
    assert s["completed"] == 2
    assert s["total_output_tokens"] == 1
    assert s["median_ttft_ms"] == pytest.approx(200)  # only the request that had a token
    assert s["mean_tpot_ms"] == 0.0  # none has a TPOT: sglang reports 0
    assert s["mean_e2e_latency_ms"] == pytest.approx((300 + 250) / 2)


def test_summary_throughputs_and_concurrency():
    a = rec(0.0, [(0.5, 1), (1.0, 1), (1.5, 1), (2.0, 1)], prompt=100, cached=40)
    b = rec(1.0, [(0.5, 2), (1.0, 2)], prompt=300, cached=0)
    failed = rec(0.5, [(0.1, 1)], prompt=999, error="HTTP 500: boom")
    s = summarize([a, b, failed], duration_s=4.0)
    assert s["completed"] == 2 and s["failed"] == 1
    assert s["total_input_tokens"] == 400
    assert s["total_output_tokens"] == 8
    assert s["duration"] == 4.0
    assert s["request_throughput"] == pytest.approx(0.5)
    assert s["input_throughput"] == pytest.approx(100)
    assert s["output_throughput"] == pytest.approx(2)
    assert s["total_throughput"] == pytest.approx(102)
    assert s["concurrency"] == pytest.approx((2.0 + 1.0) / 4.0)
    assert s["cache_hit_rate"] == pytest.approx(40 / 400)
    tpots = [(2000 - 500) / 3, (1000 - 500) / 3]
    assert s["mean_tpot_ms"] == pytest.approx(np.mean(tpots))
    assert s["median_ttft_ms"] == pytest.approx(500)
    itls = [500, 500, 500, 250, 250]
    assert s["mean_itl_ms"] == pytest.approx(np.mean(itls))
    assert s["p99_itl_ms"] == pytest.approx(np.percentile(itls, 99))
    assert s["max_itl_ms"] == pytest.approx(500)
    assert s["std_e2e_latency_ms"] == pytest.approx(np.std([2000, 1000]))
    assert s["request_goodput"] == pytest.approx(0.5)  # no SLO: every completed request is good


def test_every_statistic_is_present_with_sglang_names():
    s = summarize([rec(0.0, [(0.1, 1), (0.2, 1)])], duration_s=1.0)
    for metric in ("ttft", "tpot", "itl", "e2e_latency"):
        for stat in ("mean", "median", "std", "p90", "p95", "p99"):
            assert f"{stat}_{metric}_ms" in s
    for key in (
        "output_throughput",
        "median_ttft_ms",
        "p99_tpot_ms",
        "request_throughput",
        "total_throughput",
        "input_throughput",
        "completed",
        "total_input_tokens",
        "total_output_tokens",
        "duration",
        "concurrency",
        "accept_length",
        "cache_hit_rate",
        "request_goodput",
    ):
        assert key in s
    assert all(isinstance(v, int | float) and math.isfinite(v) for v in s.values())


def test_empty_and_all_failed():
    s = summarize([], duration_s=0.0)
    assert s["completed"] == 0 and s["output_throughput"] == 0.0 and s["p99_ttft_ms"] == 0.0
    f = summarize([rec(0.0, [], error="timeout after 5 s", end=5.0)], duration_s=5.0)
    assert f["completed"] == 0 and f["failed"] == 1 and f["cache_hit_rate"] == 0.0


def test_distribution_percentiles():
    d = distribution("ttft", list(range(1, 101)))
    assert d["median_ttft_ms"] == pytest.approx(50.5)
    assert d["p90_ttft_ms"] == pytest.approx(np.percentile(range(1, 101), 90))


def test_goodput_counts_requests_within_every_slo():
    fast = rec(0.0, [(0.1, 1), (0.15, 1), (0.2, 1)])  # ttft 100, tpot 50
    slow_start = rec(0.0, [(3.0, 1), (3.05, 1)])  # ttft 3000
    slow_decode = rec(0.0, [(0.1, 1), (1.1, 1)])  # tpot 1000
    single = rec(0.0, [(0.1, 1)])  # no tpot: cannot miss it
    broken = rec(0.0, [(0.1, 1)], error="disconnected")
    slos = {"ttft_ms": 2000, "tpot_ms": 100}
    assert [meets_slos(r, slos) for r in (fast, slow_start, slow_decode, single, broken)] == [
        True,
        False,
        False,
        True,
        False,
    ]
    s = summarize([fast, slow_start, slow_decode, single, broken], duration_s=2.0, slos=slos)
    assert s["request_goodput"] == pytest.approx(2 / 2.0)
    assert s["request_throughput"] == pytest.approx(4 / 2.0)
    e2e = summarize([fast, slow_start], duration_s=1.0, slos={"e2e_latency_ms": 1000})
    assert e2e["request_goodput"] == pytest.approx(1.0)


def test_bad_slo_names():
    with pytest.raises(ValueError, match="allowed: ttft_ms, tpot_ms, e2e_latency_ms"):
        summarize([], 1.0, slos={"p99_ttft": 5})
    with pytest.raises(ValueError, match="must be a number > 0"):
        summarize([], 1.0, slos={"ttft_ms": 0})


def test_accept_length_is_weighted_by_steps():
    a = rec(0.0, [(0.1, 2), (0.2, 2)], accept=2.0)  # 4 tokens in 2 steps
    b = rec(0.0, [(0.1, 1), (0.2, 1), (0.3, 1), (0.4, 1), (0.5, 4)], accept=4.0)  # 8 in 2
    none = rec(0.0, [(0.1, 1)])
    assert accept_length([a, b, none]) == pytest.approx(12 / 4)
    assert accept_length([none]) == 0.0
