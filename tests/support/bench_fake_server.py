"""A tiny fake sglang server for the benchmark client's tests, and the fixture that runs it.

It streams like sglang (native /generate with cumulative text, output_ids and meta_info; the two
OpenAI endpoints as SSE with usage), on a fixed timing model: `ttft` modelled seconds before the
first chunk, `itl` between chunks of `tokens_per_chunk` tokens, all divided by `time_scale`. It
keeps its own record of each request (GET /fake/requests) so tests can compare.

Run as a program: `python bench_fake_server.py --port 0 [options]`; prints `PORT <n>` when ready.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--time-scale", type=float, default=None)
    p.add_argument("--ttft", type=float, default=0.05)
    p.add_argument("--itl", type=float, default=0.01)
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--accept-length", type=float, default=None)
    p.add_argument("--fail-every", type=int, default=0, help="every Nth request gets HTTP 500")
    p.add_argument("--disconnect-every", type=int, default=0, help="every Nth drops mid-stream")
    p.add_argument(
        "--crash-on-token-above",
        type=int,
        default=None,
        help="the whole process exits (as real sglang does) on a token id above this",
    )
    p.add_argument("--old-info-only", action="store_true", help="only /get_server_info")
    p.add_argument("--no-info", action="store_true", help="neither info endpoint")
    p.add_argument("--loading", action="store_true", help="info endpoints answer 503")
    p.add_argument("--api-key", default=None)
    p.add_argument("--no-output-ids", action="store_true")
    return p.parse_args(argv)


def serve(args: argparse.Namespace) -> None:
    from aiohttp import web

    scale = args.time_scale or 1.0
    served: list[dict] = []
    cache: list[list[int]] = []  # every prompt + output it has seen: a crude prefix cache
    state = {"n": 0, "in_flight": 0, "max_in_flight": 0}
    t0 = time.perf_counter()

    def now() -> float:
        return (time.perf_counter() - t0) * scale

    def cached_prefix(ids: list[int]) -> int:
        best = 0
        for seen in cache:
            n = 0
            for a, b in zip(seen, ids, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return min(best, max(len(ids) - 1, 0))

    @web.middleware
    async def auth(request, handler):
        if args.api_key and request.headers.get("Authorization") != f"Bearer {args.api_key}":
            return web.json_response({"error": "unauthorized"}, status=401)
        return await handler(request)

    async def info(request):
        if args.loading:
            return web.json_response({"error": "loading"}, status=503)
        body = {"served_model_name": "fake-model", "version": "fake"}
        if args.time_scale is not None:
            body["sim_time_scale"] = args.time_scale
        return web.json_response(body)

    async def fake_requests(request):
        return web.json_response(
            {"time_scale": scale, "requests": served, "max_in_flight": state["max_in_flight"]}
        )

    async def stream(request):
        api = request.path
        body = await request.json()
        state["n"] += 1
        n = state["n"]
        arrival = now()
        if args.fail_every and n % args.fail_every == 0:
            return web.json_response({"error": {"message": "injected failure"}}, status=500)
        if api == "/generate":
            ids = body.get("input_ids") or body["text"].split()
            limit = args.crash_on_token_above
            if limit is not None and any(isinstance(i, int) and i > limit for i in ids):
                os._exit(1)  # like sglang's embedding IndexError: the server is gone
            max_new = body["sampling_params"]["max_new_tokens"]
        elif api == "/v1/completions":
            prompt = body["prompt"]
            ids = prompt if isinstance(prompt, list) else prompt.split()
            max_new = body["max_tokens"]
        else:
            ids = " ".join(m["content"] for m in body["messages"]).split()
            max_new = body["max_tokens"]
        cached = cached_prefix(ids) if isinstance(ids[0], int) else 0
        rid = f"req-{n}"
        record = {
            "rid": rid,
            "arrival_s": arrival,
            "prompt_tokens": len(ids),
            "api": api,
            "cached_tokens": cached,
            "body": body,
        }
        served.append(record)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        state["in_flight"] += 1
        state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
        out: list[int] = []
        try:
            await asyncio.sleep(args.ttft / scale)
            first = True
            while len(out) < max_new:
                if not first:
                    await asyncio.sleep(args.itl / scale)
                step = min(args.tokens_per_chunk, max_new - len(out))
                out.extend(range(7000 + len(out), 7000 + len(out) + step))
                if first:
                    record["first_token_s"] = now()
                    first = False
                if args.disconnect_every and n % args.disconnect_every == 0 and len(out) > 1:
                    record["error"] = "disconnected"
                    request.transport.close()
                    return resp
                if api == "/generate":
                    meta = {
                        "id": rid,
                        "prompt_tokens": len(ids),
                        "completion_tokens": len(out),
                        "cached_tokens": cached,
                    }
                    if args.accept_length:
                        meta["spec_accept_length"] = args.accept_length
                    event = {"text": " w" * len(out), "meta_info": meta}
                    if not args.no_output_ids:
                        event["output_ids"] = list(out)
                else:
                    text = " w" * step
                    choice = (
                        {"index": 0, "text": text}
                        if api == "/v1/completions"
                        else {"index": 0, "delta": {"content": text}}
                    )
                    event = {"id": rid, "choices": [choice]}
                await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            if api != "/generate":
                usage = {
                    "prompt_tokens": len(ids),
                    "completion_tokens": len(out),
                    "prompt_tokens_details": {"cached_tokens": cached},
                }
                await resp.write(
                    b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n"
                )
            await resp.write(b"data: [DONE]\n\n")
            record["finish_s"] = now()
            record["completion_tokens"] = len(out)
            if isinstance(ids[0], int):
                cache.append(list(ids) + out)
        except (asyncio.CancelledError, ConnectionResetError):
            record["error"] = "cancelled"
            raise
        finally:
            state["in_flight"] -= 1
        return resp

    app = web.Application(middlewares=[auth])
    if not args.no_info:
        if not args.old_info_only:
            app.router.add_get("/server_info", info)
        app.router.add_get("/get_server_info", info)
    app.router.add_get("/fake/requests", fake_requests)
    for path in ("/generate", "/v1/completions", "/v1/chat/completions"):
        app.router.add_post(path, stream)

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"PORT {port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


@dataclass
class FakeServer:
    url: str
    process: subprocess.Popen


@contextlib.contextmanager
def fake_server(*options: str) -> Iterator[FakeServer]:
    """Start the fake server on a free port (it binds port 0) and stop its process group."""
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__)), "--port", "0", *options],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("PORT "):
            raise RuntimeError(f"fake server did not start: {line!r}")
        yield FakeServer(f"http://127.0.0.1:{int(line.split()[1])}", proc)
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """SIGTERM the process group, then SIGKILL it if it is still there."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if proc.stdout:
        proc.stdout.close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    with fake_server() as server:
        yield server


if __name__ == "__main__":
    serve(_parse(sys.argv[1:]))
