"""One performance model, two front ends: the served simulator and the headless oracle agree.

Served: `tuner bench` (tuner.bench.run_bench) against `python -m tuner.sim` at the seed space's
time scale (50), measured with the simulator's modelled timestamps. Oracle: tuner.sim.oracle.predict
with the same workload and bench settings. Both run the same scheduler rounds and queue the
requests of one modelled moment in the same order, whatever order they reach the server in. No
figure here depends on the wall clock.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from support.harness import SimProcess

from tuner.bench import BenchConfig, WorkloadSpec, run_bench, summarize
from tuner.sim.clock import VirtualClock
from tuner.sim.oracle import OracleResult, OracleWorkload, plan, predict
from tuner.sim.perf import build_perf_model
from tuner.sim.request import SimRequest, answer_len
from tuner.sim.scheduler import Scheduler

SEED_HW = ["--sim-hardware", "rtx-pro-6000-blackwell", "--sim-model", "qwen3.6-27b"]
# The seed workload's shape (a long shared system prompt, turns resending the history), smaller.
CHAT = WorkloadSpec.from_dict(
    {
        "kind": "multi-turn",
        "conversations": 16,
        "turns": 3,
        "system_prompt_len": 2048,
        "user_len": 256,
        "answer_len": 256,
    }
)
CLIENTS = 8
SLO_TTFT_MS = 3000.0  # the seed space's SLO: p99_ttft_ms <= 3000


def nextn(steps: int, fraction: float = 0.93) -> list[str]:
    return [
        "--speculative-algorithm",
        "NEXTN",
        "--speculative-num-steps",
        str(steps),
        "--speculative-eagle-topk",
        "1",
        "--speculative-num-draft-tokens",
        str(steps + 1),
        "--mem-fraction-static",
        str(fraction),
    ]


CONFIGS = {
    "defaults": [],
    "nextn-1": nextn(1),
    "nextn-3": nextn(3),
    # five draft steps fit the 96 GB card only with fewer running requests
    "nextn-5": [*nextn(5, 0.9), "--max-running-requests", "8"],
    "extra-buffer": ["--mamba-radix-cache-strategy", "extra_buffer"],
    "no-buffer": ["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule"],
    "hicache-2": ["--enable-hierarchical-cache", "--hicache-ratio", "2"],
    "hicache-6-nextn": [
        *nextn(3, 0.9),
        "--enable-hierarchical-cache",
        "--hicache-ratio",
        "6",
        "--hicache-write-policy",
        "write_back",
    ],
    # a KV pool too small for the clients' histories: queueing and retractions
    "capacity-bound": ["--max-total-tokens", "12000"],
    "running-cap-2": ["--max-running-requests", "2"],
}


def serve(argv: list[str], workload: WorkloadSpec, **bench: object) -> tuple[dict, dict]:
    with SimProcess.start([*argv, "--sim-time-scale", "50"]) as sim:
        result = run_bench(BenchConfig(url=sim.url, workload=workload, **bench))  # type: ignore[arg-type]
        info = httpx.get(sim.url + "/server_info").json()
    return result.summary, info


@pytest.mark.parametrize("args", list(CONFIGS.values()), ids=list(CONFIGS))
def test_served_agrees_with_oracle(args):
    expected = predict([*SEED_HW, *args], CHAT, concurrency=CLIENTS, warmup_requests=2)
    assert expected.launch_ok, expected.failure
    served, info = serve([*SEED_HW, *args], CHAT, concurrency=CLIENTS, warmup_requests=2)
    effective = info["internal_states"][0]["effective_max_running_requests_per_dp"]
    assert effective == expected.max_running_requests
    assert info["max_total_num_tokens"] == expected.max_total_num_tokens
    # the client kept up with modelled time: nothing late, no hold ran out
    assert info["sim_late_requests"] == 0 and info["sim_hold_timeouts"] == 0
    assert served["completed"] == expected.summary["completed"] == 48
    e = expected.summary
    assert served["output_throughput"] == pytest.approx(e["output_throughput"], rel=0.03)
    assert served["median_tpot_ms"] == pytest.approx(e["median_tpot_ms"], rel=0.03)
    assert served["p99_ttft_ms"] == pytest.approx(e["p99_ttft_ms"], rel=0.10)
    assert (served["p99_ttft_ms"] <= SLO_TTFT_MS) == (e["p99_ttft_ms"] <= SLO_TTFT_MS)
    assert served["cache_hit_rate"] == pytest.approx(e["cache_hit_rate"], abs=0.02)


def test_the_configurations_cover_both_sides_of_the_slo():
    verdicts = {
        name: predict([*SEED_HW, *args], CHAT, concurrency=CLIENTS, warmup_requests=2).p99_ttft_ms
        <= SLO_TTFT_MS
        for name, args in CONFIGS.items()
    }
    assert any(verdicts.values()) and not all(verdicts.values()), verdicts


def test_open_loop_served_agrees_with_oracle():
    workload = WorkloadSpec.from_dict(
        {"kind": "random", "requests": 40, "input_len": 1024, "output_len": 128}
    )
    bench = {"concurrency": None, "request_rate": 1.5, "warmup_requests": 1}
    expected = predict(SEED_HW, workload, **bench)  # type: ignore[arg-type]
    served, info = serve(SEED_HW, workload, **bench)
    assert info["sim_late_requests"] == 0
    e = expected.summary
    assert served["output_throughput"] == pytest.approx(e["output_throughput"], rel=0.03)
    assert served["median_tpot_ms"] == pytest.approx(e["median_tpot_ms"], rel=0.03)
    assert served["p99_ttft_ms"] == pytest.approx(e["p99_ttft_ms"], rel=0.10)


def test_oracle_reports_launch_failures_like_the_server():
    w = OracleWorkload()
    mtp = predict(["--speculative-algorithm", "MTP"], w)
    assert not mtp.launch_ok
    assert mtp.failure == "ValueError: Unknown speculative algorithm name: MTP"
    oom = predict(["--mem-fraction-static", "0.5"], w)
    assert oom.failure_kind == "not_enough_memory"
    assert predict(["--no-such-flag"], w).failure_kind == "bad_argument"


def test_oracle_is_deterministic_and_gives_the_bench_summary():
    slos = {"ttft_ms": 1000.0, "tpot_ms": 20.0}
    first = predict(nextn(3), CHAT, concurrency=4, slos=slos, keep_records=True)
    again = predict(nextn(3), CHAT, concurrency=4, slos=slos)
    assert first.summary == again.summary
    assert first.accept_length and first.accept_length > 1
    # the simulator's copy of the summary is tuner bench's, key for key
    duration = max(r.end_s for r in first.records)
    assert first.summary == summarize(first.records, duration, slos)  # type: ignore[arg-type]
    assert 0 < first.summary["request_goodput"] < first.summary["request_throughput"]


# ------------------------------------------------------------ same-moment arrivals
def _scheduler() -> Scheduler:
    planned = plan([*SEED_HW, "--max-total-tokens", "12000"])
    assert not isinstance(planned, OracleResult), planned
    config, memory = planned
    return Scheduler(config, memory, build_perf_model(config, memory), VirtualClock(), 0)


def _request(rid: str, seed: int) -> SimRequest:
    return SimRequest(
        rid=rid, prompt=[1, 2, 3], max_new_tokens=4, target_len=4, arrival=0.0, seed=seed
    )


def test_requests_of_one_moment_queue_in_finish_order_whatever_order_they_came_in():
    sched = _scheduler()
    for key in ("a", "b", "c"):  # three finishes at modelled second 5, in this order
        sched.holds.hold(key, 1, 5.0)
    # c's conversation goes on; a and b ended, so the client drew new requests 7 and 8 for
    # their slots, but its connections delivered them the other way round, after c's turn.
    came = [_request("next-of-c", 1), _request("new-8", 2), _request("new-7", 3)]
    sched.submit(came[0], after="c", at=5.0)
    sched.submit(came[1], after="a", at=5.0, order=8)
    sched.submit(came[2], after="b", at=5.0, order=7)
    sched.order_arrivals()
    assert [r.rid for r in sched.waiting] == ["new-7", "new-8", "next-of-c"]
    assert [r.seed for r in sched.waiting] == [1, 2, 3]  # seeds follow the order
    assert all(r.arrival == 5.0 and r.claim is None for r in sched.waiting)
    # once in order, a later call moves nothing
    sched.waiting.rotate(1)
    sched.order_arrivals()
    assert [r.rid for r in sched.waiting] == ["next-of-c", "new-7", "new-8"]


def test_natural_answer_lengths_follow_the_order_as_seeds_do():
    """Without ignore_eos each request's answer length is drawn as it is made, as the oracle
    draws it as it submits: reordered, a request takes the draw of its place, cut to its own
    max_new_tokens."""
    sched = _scheduler()
    for key in ("a", "b"):
        sched.holds.hold(key, 1, 5.0)
    first, second = _request("new-1", 1), _request("new-2", 2)
    first.natural_len, first.target_len = 300.0, answer_len(4, 300.0)
    second.max_new_tokens = 500
    second.natural_len, second.target_len = 120.0, answer_len(500, 120.0)
    # the client drew new-2 first (order 0) but its connection delivered it second
    sched.submit(first, after="a", at=5.0, order=1)
    sched.submit(second, after="b", at=5.0, order=0)
    sched.order_arrivals()
    assert [r.rid for r in sched.waiting] == ["new-2", "new-1"]
    assert [(r.seed, r.natural_len) for r in sched.waiting] == [(1, 300.0), (2, 120.0)]
    assert [r.target_len for r in sched.waiting] == [300, 4]  # each cut to its own limit
    assert answer_len(4, None) == 4 and answer_len(9, 0.2) == 1


def test_requests_of_different_moments_are_not_reordered():
    sched = _scheduler()
    sched.holds.hold("a", 1, 5.0)
    sched.holds.hold("b", 1, 6.0)
    sched.submit(_request("late", 1), after="b", at=6.0, order=2)
    sched.submit(_request("early", 2), after="a", at=5.0, order=1)
    sched.order_arrivals()
    assert [r.rid for r in sched.waiting] == ["late", "early"]


def test_served_start_claims_queue_by_draw_order_not_by_delivery():
    """Two first requests claim the start hold; the one drawn second reaches the server first.
    A KV pool that holds one of them at a time prefills the one drawn first first anyway."""
    argv = [*SEED_HW, "--max-total-tokens", "3000", "--sim-time-scale", "50"]
    prompt = list(range(100, 2600))

    async def run(url: str) -> dict[int, float]:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            key = "order-test-start"
            await client.post("/sim/hold", json={"key": key, "count": 2})

            async def send(order: int) -> float:
                body = {
                    "input_ids": prompt[order:],
                    "sampling_params": {"max_new_tokens": 8, "ignore_eos": True},
                    "rid": f"order-test-{order}",
                    "sim": {"after": key, "hold": False, "order": order},
                }
                r = await client.post("/generate", json=body)
                r.raise_for_status()
                meta = r.json()["meta_info"]
                return float(meta["sim_time"])

            second = asyncio.create_task(send(1))
            await asyncio.sleep(0.5)  # modelled time waits at the hold meanwhile
            first = asyncio.create_task(send(0))
            return {0: await first, 1: await second}

    with SimProcess.start(argv) as sim:
        finished = asyncio.run(run(sim.url))
        info = httpx.get(sim.url + "/server_info").json()
    assert info["sim_late_requests"] == 0
    assert finished[0] < finished[1], finished
