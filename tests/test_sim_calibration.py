"""Every seed row (docs/sglang-memory.md), served over HTTP by the default profiles, within 10%.

Measured with a streaming httpx client as sglang's benchmark defines the figures: per-request
speed = 1 / TPOT, total throughput = output tokens / duration; wall time x sim_time_scale.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import time

import httpx
import pytest
from support.harness import SimProcess
from support.sim_spaces import SEED_NEXTN_OLD, SEED_VERSION

SCALE = 10
# The seed figures come from an sglang older than 0.5.23 (its older memory planner).
SPEC = [*SEED_NEXTN_OLD, "--mem-fraction-static", "0.93"]  # the seed run's fraction, as assumed


async def stream_one(client: httpx.AsyncClient, url: str, n_in: int, n_out: int, seed: int):
    body = {
        "input_ids": [seed * 100_000 + i for i in range(n_in)],
        "stream": True,
        "sampling_params": {"max_new_tokens": n_out, "ignore_eos": True},
    }
    start = time.perf_counter()
    ttft = None
    tokens = 0
    async with client.stream("POST", url + "/generate", json=body) as resp:
        assert resp.status_code == 200
        async for line in resp.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[6:])
                if ttft is None and chunk["text"]:
                    ttft = time.perf_counter() - start
                tokens = chunk["meta_info"]["completion_tokens"]
    return start, ttft, time.perf_counter() - start, tokens


async def closed_loop(url: str, concurrency: int, per_client: int, n_in: int, n_out: int):
    async with httpx.AsyncClient(timeout=None) as client:

        async def worker(w: int):
            return [
                await stream_one(client, url, n_in, n_out, w * 100 + k) for k in range(per_client)
            ]

        results = await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return [r for rs in results for r in rs]


def measure(url: str, concurrency: int, per_client: int, n_in: int = 128, n_out: int = 256):
    records = asyncio.run(closed_loop(url, concurrency, per_client, n_in, n_out))
    scale = httpx.get(url + "/server_info").json()["sim_time_scale"]
    start = min(r[0] for r in records)
    end = max(r[0] + r[2] for r in records)
    tokens = sum(r[3] for r in records)
    tpot = statistics.median((lat - ttft) / (n - 1) for _, ttft, lat, n in records) * scale
    return {"per_request_tok_s": 1.0 / tpot, "output_throughput": tokens / ((end - start) * scale)}


@pytest.fixture(scope="module")
def plain():
    with SimProcess.start(
        ["--sim-sglang-version", SEED_VERSION, "--sim-time-scale", str(SCALE)]
    ) as sim:
        yield sim


@pytest.fixture(scope="module")
def mtp():
    with SimProcess.start([*SPEC, "--sim-time-scale", str(SCALE)]) as sim:
        yield sim


def test_row1_no_speculation_19_running_96_mamba_slots(plain):
    info = httpx.get(plain.url + "/server_info").json()
    assert info["max_running_requests"] is None  # the flag, unset
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 19
    assert info["max_mamba_cache_size"] == 96
    log = plain.log()
    assert "max_running_requests=19," in log
    assert "Mamba Cache is allocated. max_mamba_cache_size: 96," in log


def test_row2_no_speculation_one_request_26_7_tok_s(plain):
    figures = measure(plain.url, concurrency=1, per_client=2)
    assert figures["per_request_tok_s"] == pytest.approx(26.7, rel=0.10)


def test_row3_mtp_extra_buffer_4_running(mtp):
    info = httpx.get(mtp.url + "/server_info").json()
    assert info["max_running_requests"] == 48  # the flag as sglang resolves it for speculation
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 4
    assert info["speculative_algorithm"] == "EAGLE"  # NEXTN resolves to EAGLE
    assert (
        info["speculative_num_steps"],
        info["speculative_eagle_topk"],
        info["speculative_num_draft_tokens"],
    ) == (3, 1, 4)
    assert "max_running_requests=4," in mtp.log()


def test_row4_mtp_one_request_62_to_77_tok_s(mtp):
    figures = measure(mtp.url, concurrency=1, per_client=2)
    assert 62 <= figures["per_request_tok_s"] <= 77


def test_row5_mtp_four_requests_234_tok_s_total(mtp):
    figures = measure(mtp.url, concurrency=4, per_client=3)
    assert figures["output_throughput"] == pytest.approx(234, rel=0.10)
    accept = httpx.get(mtp.url + "/server_info").json()["internal_states"][0][
        "avg_spec_accept_length"
    ]
    assert 2.5 < accept < 3.8


def test_row6_mtp_mamba_cache_sizes(mtp):
    line = next(x for x in mtp.log().splitlines() if "Mamba Cache is allocated" in x)
    ssm = float(re.search(r"ssm_state size: ([\d.]+)GB", line).group(1))
    inter = float(re.search(r"intermediate_ssm_state_cache size: ([\d.]+)GB", line).group(1))
    assert ssm == pytest.approx(3.52, rel=0.10)
    assert inter == pytest.approx(2.81, rel=0.10)
