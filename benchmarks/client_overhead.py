"""CPU cost of the benchmark client per streamed chunk, against a plain aiohttp client.

The tuner's client shares the host with the server it measures, so it must stay cheap. This
script serves one workload from one simulator process and streams it alternately with

  - `tuner.bench` (httpx, the full runner: records, stages, summary), and
  - a plain aiohttp streaming loop of the kind sglang's benchmark uses (POST, iterate lines,
    parse each `data:` JSON, note the time and the token count),

and reports the client process's CPU seconds per 1,000 streamed chunks for each, side by side
(median over the repeats; the rounds alternate so that both see the same server state).

    python benchmarks/client_overhead.py                  # starts `python -m tuner.sim`
    python benchmarks/client_overhead.py --url http://127.0.0.1:30000   # a running server

Exit status 1 when ours costs more than --max-ratio times the plain client.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator

import aiohttp
import httpx

from tuner.bench import BenchConfig, WorkloadSpec, run_bench_async
from tuner.bench.payload import Prompt, build_body


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--url", help="benchmark this running server instead of starting the simulator")
    p.add_argument("--time-scale", type=float, default=4.0, help="simulator --sim-time-scale")
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=256)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-ratio", type=float, default=1.2)
    p.add_argument("--sim-arg", action="append", default=[], help="extra simulator flag")
    return p.parse_args()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def simulator(time_scale: float, extra: list[str]) -> Iterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "tuner.sim", "--port", str(port)]
    argv += ["--sim-time-scale", str(time_scale), *extra]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"simulator exited with code {proc.returncode}: {argv}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        else:
            raise SystemExit("simulator did not become ready in 120 s")
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def workload(args: argparse.Namespace, seed: int) -> WorkloadSpec:
    return WorkloadSpec.from_dict(
        {
            "kind": "random",
            "requests": args.requests,
            "input_len": args.input_len,
            "output_len": args.output_len,
            "seed": seed,
        }
    )


async def ours(url: str, args: argparse.Namespace, seed: int) -> int:
    cfg = BenchConfig(url=url, workload=workload(args, seed), concurrency=args.concurrency,
                      warmup_requests=0, stages=4)  # fmt: skip
    result = await run_bench_async(cfg)
    return sum(len(r.chunk_tokens) for r in result.records)


async def plain_aiohttp(url: str, args: argparse.Namespace, seed: int) -> int:
    """The baseline: what a minimal sglang-style aiohttp client does per request."""
    conversations = workload(args, seed).make_conversations()
    limit = asyncio.Semaphore(args.concurrency)
    timeout = aiohttp.ClientTimeout(total=6 * 3600)
    chunks = 0

    async def one(session: aiohttp.ClientSession, ids: Prompt, output_len: int) -> None:
        nonlocal chunks
        body = build_body("generate", [("user", ids)], output_len, ignore_eos=True, model=None)
        async with limit:
            start = time.perf_counter()
            last = start
            ttft = 0.0
            gaps: list[float] = []
            seen_tokens = 0
            async with session.post(f"{url}/generate", json=body) as response:
                async for raw in response.content:
                    line = raw.strip()
                    if not line or not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        continue
                    event = json.loads(data)
                    now = time.perf_counter()
                    tokens = event["meta_info"]["completion_tokens"]
                    new = tokens - seen_tokens
                    if new <= 0:
                        continue
                    seen_tokens = tokens
                    if not ttft:
                        ttft = now - start
                    else:
                        gaps.extend([(now - last) / new] * new)
                    last = now
                    chunks += 1

    async with aiohttp.ClientSession(timeout=timeout) as session:
        await asyncio.gather(*(one(session, c.turns[0].user, c.turns[0].output_len)
                               for c in conversations))  # fmt: skip
    return chunks


def measure(client, url: str, args: argparse.Namespace, seed: int) -> tuple[float, int]:
    """CPU seconds of this process while `client` streams the workload, and its chunk count."""
    cpu = time.process_time()
    chunks = asyncio.run(client(url, args, seed))
    return time.process_time() - cpu, chunks


def main() -> int:
    args = parse_args()
    context = (
        contextlib.nullcontext(args.url) if args.url else simulator(args.time_scale, args.sim_arg)
    )
    results: dict[str, list[float]] = {"tuner.bench (httpx)": [], "plain aiohttp": []}
    chunk_counts: list[int] = []
    with context as url:
        # One untimed round first: imports, connection set-up and the server's first requests.
        measure(ours, url, args, seed=999)
        measure(plain_aiohttp, url, args, seed=999)
        for round_ in range(args.repeats):
            # Alternate who goes first; a new seed each round keeps the prefix cache cold.
            pair = [("tuner.bench (httpx)", ours), ("plain aiohttp", plain_aiohttp)]
            for name, client in pair if round_ % 2 == 0 else pair[::-1]:
                cpu_s, chunks = measure(client, url, args, seed=round_)
                if chunks == 0:
                    raise SystemExit(f"{name}: no chunks streamed; is the server serving?")
                results[name].append(cpu_s / chunks * 1000)
                chunk_counts.append(chunks)
    per_1k = {name: statistics.median(values) for name, values in results.items()}
    ratio = per_1k["tuner.bench (httpx)"] / per_1k["plain aiohttp"]
    chunks_per_run = statistics.mean(chunk_counts)
    tokens_per_chunk = args.requests * args.output_len / chunks_per_run
    print(f"workload: {args.requests} requests x {args.output_len} output tokens, "
          f"concurrency {args.concurrency}, {args.repeats} rounds; {chunks_per_run:.0f} chunks "
          f"a run ({tokens_per_chunk:.1f} tokens a chunk)")  # fmt: skip
    print(f"{'client':<22}{'CPU s / 1,000 chunks':>22}   runs")
    for name, value in per_1k.items():
        runs = ", ".join(f"{v:.4f}" for v in results[name])
        print(f"{name:<22}{value:>22.4f}   {runs}")
    print(f"ratio (ours / plain): {ratio:.2f}x  (limit {args.max_ratio:.2f}x)")
    return 0 if ratio <= args.max_ratio else 1


if __name__ == "__main__":
    sys.exit(main())
