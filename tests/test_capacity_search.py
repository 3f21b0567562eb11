"""The capacity search (tuner/trial/capacity.py): which rate comes next, when a step is lost
for sure, and the whole search against a real simulator process over HTTP."""

from __future__ import annotations

import math

import numpy as np
import pytest
from support.harness import SimProcess

from tuner.bench import BenchConfig, RequestRecord, WorkloadSpec, summarize
from tuner.results.goals import SUSTAINED_RATE, Slo
from tuner.trial.capacity import (
    RatePlan,
    RateSearch,
    clearly_broken,
    search_capacity,
    step_met,
)

TTFT = Slo("p99_ttft_ms", "<=", 3000.0)


def _search_against(capacity: float, plan: RatePlan) -> tuple[RateSearch, list[float]]:
    search, tried = RateSearch(plan), []
    while (rate := search.next_rate()) is not None:
        tried.append(rate)
        search.record(rate, rate <= capacity)
    return search, tried


@pytest.mark.parametrize("capacity", [0.07, 0.6, 1.0, 3.3, 40.0])
def test_the_search_brackets_a_threshold_to_its_tolerance(capacity):
    plan = RatePlan(start=1.0)
    search, tried = _search_against(capacity, plan)
    assert search.met is not None and search.broken is not None
    assert search.met <= capacity < search.broken
    assert search.broken <= search.met * (1 + plan.tolerance)
    assert search.bracketed
    assert len(tried) <= plan.max_steps
    # Up or down by `growth` until both sides are known, then only rates between them.
    assert tried[0] == 1.0 and len(set(tried)) == len(tried)


def test_the_search_gives_up_below_its_lowest_rate_and_stops_at_max_steps():
    search, tried = _search_against(0.001, RatePlan(start=1.0, lowest=0.1))
    assert search.met is None and min(tried) >= 0.1 and tried == [1.0, 0.5, 0.25, 0.125]
    search, tried = _search_against(1e9, RatePlan(start=1.0, max_steps=5))
    assert tried == [1.0, 2.0, 4.0, 8.0, 16.0] and search.met == 16.0 and not search.bracketed


def _summary_of(ttfts_ms: list[float]) -> dict[str, float | int]:
    records = [
        RequestRecord(index=i, start_s=0.0, end_s=1.0 + t / 1000, ttft_s=t / 1000, output_tokens=8)
        for i, t in enumerate(ttfts_ms)
    ]
    return summarize(records, duration_s=10.0)


def test_a_step_is_lost_only_when_its_completed_requests_prove_it():
    total = 200  # p99 over 200 requests allows 2 above the limit: 3 of them lose the step
    # 4 of 30 over: the partial p90 (rank 26.1) is over, so ranks 27..29 are: 3 proven.
    assert clearly_broken([TTFT], _summary_of([100.0] * 26 + [5000.0] * 4), total) == TTFT
    assert clearly_broken([TTFT], _summary_of([100.0] * 28 + [5000.0] * 2), total) is None
    # 3 of 20 over are enough, but the summary's percentiles prove only 2: the step goes on
    # (it is judged at a later check, or at its end).
    assert clearly_broken([TTFT], _summary_of([100.0] * 17 + [5000.0] * 3), total) is None
    # The median of a partial run over the limit: half of it is over, far more than 1%.
    assert clearly_broken([TTFT], _summary_of([4000.0] * 20), total) == TTFT
    # A mean whose completed sum alone, over the whole step, is past the limit.
    mean = Slo("mean_ttft_ms", "<=", 100.0)
    assert clearly_broken([mean], _summary_of([2100.0] * 10), total) == mean
    assert clearly_broken([mean], _summary_of([1900.0] * 10), total) is None
    # A throughput floor is judged when the step ends.
    floor = Slo("request_throughput", ">=", 1e9)
    assert clearly_broken([floor], _summary_of([4000.0] * 20), total) is None


@pytest.mark.parametrize("seed", range(40))
def test_a_step_judged_lost_early_is_lost_at_its_end(seed):
    """Whatever the rest of the step measures: the rule must never stop a step that would
    have met its SLO (it would understate the configuration's capacity)."""
    rng = np.random.default_rng(seed)
    total = int(rng.integers(20, 300))
    values = rng.lognormal(7.0, 1.2, size=total).tolist()
    for stat, percent in (("p99", 99), ("p90", 90), ("median", 50)):
        slo = Slo(f"{stat}_ttft_ms", "<=", float(np.percentile(values, percent)) * 0.999)
        order = rng.permutation(total)
        for done in range(1, total + 1):
            if clearly_broken([slo], _summary_of([values[i] for i in order[:done]]), total):
                final = _summary_of(values)
                assert not slo.satisfied_by(final), (stat, done, total)
                break
    # A limit the whole step meets is never judged lost on the way.
    slo = Slo("p99_ttft_ms", "<=", float(np.percentile(values, 99)) * 1.001)
    for done in range(1, total + 1):
        assert clearly_broken([slo], _summary_of(values[:done]), total) is None


def test_a_step_is_met_only_when_every_request_was_served_within_every_slo():
    summary = _summary_of([100.0] * 10)
    assert step_met([TTFT], summary, 10)
    assert not step_met([TTFT], summary, 11)  # one request missing
    assert not step_met([TTFT], {**summary, "failed": 1}, 10)
    assert not step_met([Slo("p99_ttft_ms", "<=", 50.0)], summary, 10)


@pytest.fixture(scope="module")
def sim():
    with SimProcess.start(
        [
            "--model-path", "Qwen/Qwen3.6-27B",
            "--sim-hardware", "rtx-pro-6000-blackwell",
            "--sim-model", "qwen3.6-27b",
            "--sim-time-scale", "200",
            "--max-running-requests", "8",
        ]
    ) as process:  # fmt: skip
        yield process


def _config(url: str, requests: int = 48) -> BenchConfig:
    workload = WorkloadSpec.from_dict(
        {"kind": "random", "requests": requests, "input_len": 512, "output_len": 32}
    )
    return BenchConfig(url=url, workload=workload, warmup_requests=1, request_timeout_s=600)


def test_a_search_on_the_simulator_finds_the_rate_between_its_last_met_and_first_broken(sim):
    seen: list[int] = []
    result = search_capacity(
        _config(sim.url),
        [TTFT],
        RatePlan(start=1.0),
        on_step=lambda index, step: seen.append(index) is None,
    )
    steps = result.steps
    met = [s.rate for s in steps if s.met]
    broken = [s.rate for s in steps if not s.met]
    assert met and broken and seen == list(range(len(steps)))
    assert result.rate == max(met) and result.bracketed
    assert max(met) < min(broken) <= max(met) * 1.04 + 1e-9
    # The summary is the step at the sustained rate: every request served within the SLO.
    assert result.summary[SUSTAINED_RATE] == result.rate
    assert result.summary["completed"] == 48 and result.summary["p99_ttft_ms"] <= 3000
    # A step well above capacity stops at its first checks, not after queueing everything.
    far = [s for s in steps if not s.met and s.rate >= 1.5 * result.rate]
    assert far and all(s.stopped_early and s.completed < s.requests for s in far)
    assert all(s.broke == str(TTFT) for s in steps if not s.met)
    # Every step after the first ran on an emptied cache, the stopped steps' requests gone.
    assert steps[0].cache_flushed is None and all(s.cache_flushed for s in steps[1:])
    assert math.isclose(result.duration_s, sum(s.duration_s for s in steps))


def test_the_same_search_twice_on_one_server_finds_the_same_rate(sim):
    """Common requests and a flushed cache: a step does not depend on the steps before it."""
    first = search_capacity(_config(sim.url), [TTFT], RatePlan(start=1.0))
    again = search_capacity(_config(sim.url), [TTFT], RatePlan(start=first.rate))
    assert again.steps[0].met and again.rate == pytest.approx(first.rate, rel=0.05)
