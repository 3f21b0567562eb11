"""HiCache: a host tier for evicted prefixes. It pays off only when the workload reuses prefixes
that the GPU pool cannot keep, and it never raises the running cap."""

from __future__ import annotations

import statistics

import httpx
import pytest
from support.harness import SimProcess
from support.probe import measure

from tuner.bench import WorkloadSpec
from tuner.sim.oracle import OracleWorkload, predict

# A GPU pool of 40k tokens cannot keep 16 system prompts of 4k tokens used round-robin.
SMALL_POOL = ["--max-total-tokens", "40000", "--sim-time-scale", "20"]
HICACHE = ["--enable-hierarchical-cache", "--hicache-ratio", "4"]
SHARED = OracleWorkload(
    kind="shared-prefix",
    shared_prefix_len=4096,
    num_groups=16,
    input_len=64,
    output_len=64,
    concurrency=4,
    num_requests=64,
)
# the same workload as tuner bench generates it, for the oracle
SHARED_SPEC = WorkloadSpec(
    kind="shared-prefix",
    groups=16,
    prompts_per_group=4,
    system_prompt_len=4096,
    question_len=64,
    output_len=64,
)
RANDOM = OracleWorkload(input_len=1024, output_len=64, concurrency=4)


def serve(argv: list[str], workload: OracleWorkload, requests: int):
    with SimProcess.start(argv) as sim:
        summary = measure(sim.url, workload, requests)
        info = httpx.get(sim.url + "/server_info").json()
        records = httpx.get(sim.url + "/sim/requests").json()["requests"]
    ttft = statistics.median(r["first_token_s"] - r["arrival_s"] for r in records)
    return summary, info, ttft


@pytest.fixture(scope="module")
def shared_runs():
    return serve(SMALL_POOL, SHARED, 64), serve([*SMALL_POOL, *HICACHE], SHARED, 64)


def test_hicache_serves_reused_prefixes_the_gpu_pool_lost(shared_runs):
    (plain, _, plain_ttft), (hi, _, hi_ttft) = shared_runs
    assert plain.cache_hit_rate < 0.2
    assert hi.cache_hit_rate > 0.6
    assert hi_ttft < 0.5 * plain_ttft
    assert hi.output_throughput > 1.2 * plain.output_throughput
    # what the oracle expects too, under tuner bench's order of the same groups (a seeded
    # shuffle, so a group sometimes comes back while its prompt is still on the GPU; the probe
    # above sends them round-robin, the worst case for the GPU pool)
    expected_plain = predict(SMALL_POOL, SHARED_SPEC, concurrency=4)
    expected_hi = predict([*SMALL_POOL, *HICACHE], SHARED_SPEC, concurrency=4)
    assert expected_hi.cache_hit_rate > 0.6 > 0.45 > expected_plain.cache_hit_rate
    assert expected_hi.output_throughput > 1.2 * expected_plain.output_throughput


def test_hicache_does_not_raise_the_running_cap(shared_runs):
    (_, plain_info, _), (_, hi_info, _) = shared_runs
    cap = "effective_max_running_requests_per_dp"
    assert hi_info["internal_states"][0][cap] == plain_info["internal_states"][0][cap]
    assert hi_info["max_total_num_tokens"] == plain_info["max_total_num_tokens"]
    assert hi_info["sim_memory_plan"]["hicache_host_tokens"] == 4 * 40000


def test_hicache_gains_nothing_without_prefix_reuse():
    plain, _, _ = serve(SMALL_POOL, RANDOM, 16)
    hi, _, _ = serve([*SMALL_POOL, *HICACHE], RANDOM, 16)
    assert plain.cache_hit_rate == hi.cache_hit_rate == 0.0
    # Served in real time (time scale 20), two runs differ by the host's load too (71.1 against
    # 68.5 tok/s once, beside a benchmark on both cores): only a wide bound holds there.
    assert hi.output_throughput <= plain.output_throughput * 1.10
    # In modelled time, noise-free: host writes cost a little PCIe time and buy nothing here.
    spec = WorkloadSpec(kind="random", requests=16, input_len=1024, output_len=64)
    expected_plain = predict(SMALL_POOL, spec, concurrency=4)
    expected_hi = predict([*SMALL_POOL, *HICACHE], spec, concurrency=4)
    assert expected_hi.cache_hit_rate == 0.0
    assert 0.97 * expected_plain.output_throughput <= expected_hi.output_throughput
    assert expected_hi.output_throughput <= expected_plain.output_throughput
