"""A small streaming load generator for the simulator's own tests and benchmarks.

Not the project's benchmark client (tuner/bench/ is): just enough to measure a running simulator
over HTTP the way sglang's benchmark defines its metrics (TTFT = first chunk with text, TPOT =
(latency - TTFT) / (tokens - 1), ITL = chunk gap / tokens in the chunk), and to convert wall
seconds into modelled seconds with the server's ``sim_time_scale``.

Workloads follow ``OracleWorkload``: random prompts, shared-prefix groups, multi-turn chats
(each turn re-sends the whole history as text, so the prefix cache sees it as sglang would).
It uses aiohttp's client: httpx's connection pool costs O(connections^2) CPU per request, which
made a 256-stream client the bottleneck on a 2-core machine.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from dataclasses import dataclass, field

import aiohttp

from tuner.sim.oracle import OracleWorkload
from tuner.sim.tokens import _WORDS


@dataclass
class ProbeRecord:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    start: float = 0.0  # wall seconds
    ttft: float = 0.0
    latency: float = 0.0
    itls: list[float] = field(default_factory=list)
    spec_accept_length: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class ProbeSummary:
    """Modelled units (wall x time scale), sglang benchmark definitions."""

    completed: int
    duration_s: float
    output_throughput: float
    total_throughput: float
    median_ttft_ms: float
    median_tpot_ms: float
    median_itl_ms: float
    median_e2e_latency_ms: float
    mean_tpot_ms: float
    cache_hit_rate: float
    accept_length: float | None


def _words(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(_WORDS) + str(rng.randrange(10**6)) for _ in range(n)]


def conversations(workload: OracleWorkload, count: int, seed: int = 0) -> list[list[str]]:
    """Per conversation, the text of each user turn (the first includes the system prompt)."""
    rng = random.Random(seed)
    prefixes = [
        " ".join(_words(rng, workload.shared_prefix_len))
        for _ in range(max(workload.num_groups, 1))
    ]
    convs = []
    for i in range(count):
        turns = []
        for t in range(workload.turns if workload.kind == "multi-turn" else 1):
            question = " ".join(_words(rng, workload.input_len))
            if t == 0 and workload.kind != "random" and workload.shared_prefix_len > 0:
                question = prefixes[i % len(prefixes)] + " " + question
            turns.append(question)
        convs.append(turns)
    return convs


async def _one(
    session: aiohttp.ClientSession, url: str, text: str, output_len: int, headers: dict[str, str]
) -> tuple[ProbeRecord, str]:
    body = {
        "text": text,
        "stream": True,
        "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True, "temperature": 0},
    }
    rec = ProbeRecord(start=time.perf_counter())
    last_t = rec.start
    last_n = 0
    out_text = ""
    async with session.post(url + "/generate", json=body, headers=headers) as resp:
        if resp.status != 200:
            rec.error = f"HTTP {resp.status}"
            await resp.read()
            return rec, ""
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            now = time.perf_counter()
            chunk = json.loads(line[6:])
            meta = chunk["meta_info"]
            n = meta["completion_tokens"]
            if n > last_n:
                if last_n == 0:
                    rec.ttft = now - rec.start
                else:
                    gap = (now - last_t) / (n - last_n)
                    rec.itls.extend([gap] * (n - last_n))
                last_t, last_n = now, n
            out_text = chunk["text"]
            rec.prompt_tokens = meta["prompt_tokens"]
            rec.cached_tokens = meta["cached_tokens"]
            rec.spec_accept_length = meta.get("spec_accept_length")
    rec.completion_tokens = last_n
    rec.latency = time.perf_counter() - rec.start
    return rec, out_text


async def run_workload(
    url: str,
    workload: OracleWorkload,
    num_conversations: int,
    seed: int = 0,
    api_key: str | None = None,
    warmup: int = 0,
) -> list[ProbeRecord]:
    """Closed loop with ``workload.concurrency`` clients (or Poisson arrivals at
    ``workload.request_rate``); the first ``warmup`` records are dropped."""
    convs = conversations(workload, num_conversations, seed)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    records: list[ProbeRecord] = []
    queue: asyncio.Queue[list[str]] = asyncio.Queue()
    for c in convs:
        queue.put_nowait(c)

    async def chat(session: aiohttp.ClientSession, turns: list[str]) -> None:
        history = ""
        for turn in turns:
            history = (history + " " + turn).strip()
            rec, answer = await _one(session, url, history, workload.output_len, headers)
            records.append(rec)
            history += answer

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if workload.request_rate:
            rng = random.Random(seed + 1)
            wall_rate = workload.request_rate * await _scale(session, url, headers)
            tasks = []
            for turns in convs:
                tasks.append(asyncio.create_task(chat(session, turns)))
                await asyncio.sleep(rng.expovariate(wall_rate))
            await asyncio.gather(*tasks)
        else:

            async def worker() -> None:
                while not queue.empty():
                    await chat(session, queue.get_nowait())

            await asyncio.gather(*(worker() for _ in range(workload.concurrency or 1)))
    records.sort(key=lambda r: r.start)
    return records[warmup:]


async def _scale(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> float:
    async with session.get(url + "/server_info", headers=headers) as resp:
        info = await resp.json()
    return float(info.get("sim_time_scale", 1.0))


def summarize(records: list[ProbeRecord], scale: float) -> ProbeSummary:
    ok = [r for r in records if r.error is None and r.completion_tokens > 0]
    if not ok:
        raise ValueError("no successful requests to summarize")
    start = min(r.start for r in ok)
    end = max(r.start + r.latency for r in ok)
    duration = (end - start) * scale
    out = sum(r.completion_tokens for r in ok)
    inp = sum(r.prompt_tokens for r in ok)
    tpots = [
        (r.latency - r.ttft) / (r.completion_tokens - 1) * scale * 1000
        for r in ok
        if r.completion_tokens > 1
    ]
    itls = [x * scale * 1000 for r in ok for x in r.itls]
    accepts = [r.spec_accept_length for r in ok if r.spec_accept_length]
    return ProbeSummary(
        completed=len(ok),
        duration_s=duration,
        output_throughput=out / duration,
        total_throughput=(out + inp) / duration,
        median_ttft_ms=statistics.median(r.ttft for r in ok) * scale * 1000,
        median_tpot_ms=statistics.median(tpots) if tpots else 0.0,
        median_itl_ms=statistics.median(itls) if itls else 0.0,
        median_e2e_latency_ms=statistics.median(r.latency for r in ok) * scale * 1000,
        mean_tpot_ms=statistics.fmean(tpots) if tpots else 0.0,
        cache_hit_rate=sum(r.cached_tokens for r in ok) / max(inp, 1),
        accept_length=statistics.fmean(accepts) if accepts else None,
    )


def measure(
    url: str,
    workload: OracleWorkload,
    num_conversations: int,
    seed: int = 0,
    warmup: int = 0,
    api_key: str | None = None,
) -> ProbeSummary:
    async def go() -> tuple[float, list[ProbeRecord]]:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        async with aiohttp.ClientSession() as session:
            scale = await _scale(session, url, headers)
        return scale, await run_workload(url, workload, num_conversations, seed, api_key, warmup)

    scale, records = asyncio.run(go())
    return summarize(records, scale)
