"""The HTTP server: sglang's endpoints over aiohttp, backed by the simulated scheduler.

Endpoints (as sglang): /health, /health_generate, /ready (0.5.23), /server_info
(+ /get_server_info), /model_info (+ /get_model_info), /v1/models, /flush_cache, /generate
(native, streaming with cumulative text and meta_info), /v1/completions, /v1/chat/completions
(SSE, stream_options.include_usage), /metrics (with --enable-metrics). Simulator-only:
/sim/requests (GET; POST /sim/requests/clear or DELETE to empty it), /sim/hold and /sim/release
(holds of modelled time for a closed-loop client, see scheduler.py), and a ``sim`` object a
request body may carry: ``{"after": hold key, "at": modelled seconds, "hold": bool}``. Every
streamed chunk carries the modelled time its tokens were produced: ``sim_time`` /
``sim_arrival`` (and ``sim_late`` when the request came after its ``at``) in meta_info on
/generate, a ``sim`` object on the OpenAI routes; ``/server_info`` says
``sim_modelled_time: true`` so that a client knows to read them. ``--api-key`` is enforced like
sglang: ``Authorization: Bearer KEY`` on every route but /health*, /ready and /metrics.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any

import numpy as np
from aiohttp import web

from tuner.sim import startup_log as logs
from tuner.sim import tokens as tok
from tuner.sim.args import version_tuple
from tuner.sim.clock import Clock
from tuner.sim.config import SimConfig
from tuner.sim.failures import StartupFailure
from tuner.sim.faults import Faults, exit_holding_port
from tuner.sim.memory import MemoryPlan, plan_memory
from tuner.sim.metrics import Metrics
from tuner.sim.perf import build_perf_model
from tuner.sim.request import SimRequest
from tuner.sim.scheduler import Scheduler

JSONDict = dict[str, Any]
DEFAULT_MAX_NEW_TOKENS = 128
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class BadRequest(Exception):
    pass


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data), status=status, content_type="application/json")


def _openai_error(message: str, status: int = 400) -> web.Response:
    kind = "BadRequestError" if status == 400 else "InternalServerError"
    return _json(
        {"object": "error", "message": message, "type": kind, "param": None, "code": status}, status
    )


class SimServer:
    def __init__(self, config: SimConfig, sock: socket.socket) -> None:
        self.config = config
        self.args = config.args
        self.sock = sock
        self.clock = Clock(self.args.sim_time_scale)
        self.ready = False
        # the HTTP API as 0.5.23 has it (/ready, /model_info fields), else as 0.5.10
        self.new_api = version_tuple(config.sglang_version) >= (0, 5, 23)
        self.plan: MemoryPlan | None = None
        self.scheduler: Scheduler | None = None
        self.metrics: Metrics | None = None
        self.faults = Faults(
            self.args.sim_fault_crash_after,
            self.args.sim_fault_error_rate,
            self.args.sim_fault_hold_port,
            self.args.sim_fault_never_ready,
            self.args.sim_seed,
        )
        self._rng = np.random.default_rng(self.args.sim_seed + 1)
        self._req_seq = 0
        self._tasks: list[asyncio.Task[None]] = []  # keeps the scheduler task referenced
        self.app = self._build_app()

    # ------------------------------------------------------------ lifecycle
    def _build_app(self) -> web.Application:
        middlewares = [self._auth] if self.args.api_key else []
        app = web.Application(middlewares=middlewares, client_max_size=64 * 1024**2)
        r = app.router
        r.add_get("/health", self.health)
        if self.new_api:
            r.add_get("/ready", self.health)  # 0.5.23: 200 once ready, 503 before; 0.5.10: 404
        r.add_get("/health_generate", self.health_generate)
        for path in ("/server_info", "/get_server_info"):
            r.add_get(path, self.server_info)
        for path in ("/model_info", "/get_model_info"):
            r.add_get(path, self.model_info)
        r.add_get("/v1/models", self.models)
        r.add_route("*", "/flush_cache", self.flush_cache)
        r.add_post("/generate", self.generate)
        r.add_post("/v1/completions", self.completions)
        r.add_post("/v1/chat/completions", self.chat_completions)
        r.add_get("/metrics", self.metrics_endpoint)
        r.add_get("/sim/requests", self.sim_requests)
        r.add_delete("/sim/requests", self.sim_requests_clear)
        r.add_post("/sim/requests/clear", self.sim_requests_clear)
        r.add_post("/sim/hold", self.sim_hold)
        r.add_post("/sim/release", self.sim_release)
        return app

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._terminate)
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.SockSite(runner, self.sock, shutdown_timeout=0.2)
        await site.start()
        await self._load()
        await asyncio.Event().wait()

    def _terminate(self) -> None:
        logs.emit("Received sigterm, shutting down.")
        exit_holding_port(self.sock, self.faults.hold_port_s)

    async def _load(self) -> None:
        """Model loading, memory planning, graph capture: what sglang does before it is up."""
        cfg = self.config
        scale = self.clock.scale
        load_s = max(self.args.sim_load_time, 0.0)
        logs.emit(logs.load_begin_line(cfg), " TP0")
        await asyncio.sleep(load_s * 0.7)
        logs.emit(logs.load_end_line(cfg, load_s * 0.7 * scale), " TP0")
        try:
            plan = plan_memory(cfg)
        except StartupFailure as failure:
            self._die(failure)
            return
        for line in logs.pool_lines(cfg, plan):
            logs.emit(line, " TP0")
        await asyncio.sleep(load_s * 0.3)
        for line in logs.graph_lines(cfg, plan, load_s * 0.3 * scale):
            logs.emit(line, " TP0")
        logs.emit(logs.capacity_line(plan), " TP0")
        self.plan = plan
        perf = build_perf_model(cfg, plan)
        self.scheduler = Scheduler(
            cfg, plan, perf, self.clock, self.args.sim_seed, self.args.sim_stream_flush_ms
        )
        self.metrics = Metrics(self.scheduler, cfg.served_model_name)
        self._tasks.append(asyncio.create_task(self.scheduler.run()))
        logs.emit(
            f"Uvicorn running on http://{self.args.host}:{self.args.port} (Press CTRL+C to quit)"
        )
        if self.faults.never_ready:
            return
        self.ready = True
        logs.emit(logs.READY_LINE)

    @property
    def _scheduler(self) -> Scheduler:
        """The scheduler, for the routes that `_not_ready` lets through (after `_load`)."""
        if self.scheduler is None:
            raise RuntimeError("the scheduler is not running: the model has not loaded yet")
        return self.scheduler

    @property
    def _plan(self) -> MemoryPlan:
        """The memory plan, for the routes that `_not_ready` lets through (after `_load`)."""
        if self.plan is None:
            raise RuntimeError("no memory plan: the model has not loaded yet")
        return self.plan

    def _die(self, failure: StartupFailure) -> None:
        for line in logs.failure_lines(failure, in_scheduler=True):
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
        os._exit(1)

    # ------------------------------------------------------------ middleware
    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        path = request.path
        if request.method == "OPTIONS" or path.startswith(("/health", "/ready", "/metrics")):
            return await handler(request)
        if request.headers.get("Authorization") != f"Bearer {self.args.api_key}":
            return _json({"error": "Unauthorized"}, 401)
        return await handler(request)

    def _not_ready(self) -> web.Response | None:
        if self.ready and self.scheduler is not None:
            return None
        return web.Response(status=503, text="Server is starting")

    # ------------------------------------------------------------ info routes
    async def health(self, request: web.Request) -> web.Response:
        return self._not_ready() or web.Response(status=200)

    async def health_generate(self, request: web.Request) -> web.Response:
        not_ready = self._not_ready()
        if not_ready:
            return not_ready
        req = self._make_request([tok.word_id("hello")], 1, True, f"health-{uuid.uuid4().hex}")
        self._scheduler.submit(req)
        while not req.finished:
            await req.event.wait()
            req.event.clear()
        return web.Response(status=200)

    def server_info_dict(self) -> JSONDict:
        cfg, plan, s = self.config, self.plan, self.scheduler
        info: JSONDict = {
            k: v
            for k, v in asdict(self.args).items()
            if k not in ("argv", "old_flag_names") and not k.startswith("sim_")
        }
        info["api_key"] = None
        info.update(
            {
                "model_path": self.args.model_path or cfg.model.name,
                "served_model_name": cfg.served_model_name,
                "mem_fraction_static": cfg.mem_fraction_static,
                "chunked_prefill_size": cfg.chunked_prefill_size,
                "cuda_graph_max_bs_decode": cfg.cuda_graph_max_bs_decode,
                "cuda_graph_max_bs": cfg.cuda_graph_max_bs_decode,
                "page_size": cfg.page_size,
                "context_length": cfg.context_length,
                "disable_overlap_schedule": not cfg.overlap_schedule,
                "mamba_radix_cache_strategy": cfg.mamba_strategy
                or self.args.mamba_radix_cache_strategy,
                "mamba_scheduler_strategy": cfg.mamba_strategy
                or self.args.mamba_radix_cache_strategy,
                "speculative_algorithm": cfg.spec.algorithm if cfg.spec else None,
                "speculative_num_steps": cfg.spec.num_steps if cfg.spec else None,
                "speculative_eagle_topk": cfg.spec.topk if cfg.spec else None,
                "speculative_num_draft_tokens": cfg.spec.num_draft_tokens if cfg.spec else None,
                "version": cfg.sglang_version,
                "sim_time_scale": float(self.clock.scale),
                "sim_modelled_time": True,
                "sim_hardware": cfg.hardware.name,
                "sim_model": cfg.model.name,
                "sim_ready": self.ready,
            }
        )
        if plan is not None and s is not None:
            # managers/scheduler_components/memory_usage.py (0.5.23): GB rounded to 3 places
            memory_usage = {
                "weight": round(plan.weight_gib + plan.draft_weight_gib, 3),
                "kvcache": round(plan.kv_k_gib + plan.kv_v_gib, 3),
                "startup_available": round(plan.available_gpu_mem_gib, 3),
                "token_capacity": plan.max_total_num_tokens,
                "token_capacity_swa": None,
                "graph": _graph_memory(plan, cfg.spec is not None),
            }
            if not self.new_api:  # managers/scheduler.py get_internal_state (0.5.10)
                memory_usage = {
                    "weight": round(plan.weight_gib + plan.draft_weight_gib, 2),
                    "kvcache": round(plan.kv_k_gib + plan.kv_v_gib, 2),
                    "token_capacity": plan.max_total_num_tokens,
                    "graph": round(plan.cuda_graph_gib, 2),
                }
            state: JSONDict = {
                "effective_max_running_requests_per_dp": plan.max_running_requests,
                "last_gen_throughput": s.last_gen_throughput,
                "memory_usage": memory_usage,
            }
            if cfg.spec is not None:
                state["avg_spec_accept_length"] = s.avg_accept_length()
            info.update(
                {
                    # the resolved flag (48 with speculation when unset); the cap the memory
                    # allowed is internal_states[0].effective_max_running_requests_per_dp
                    "max_running_requests": cfg.max_running_requests_flag,
                    "max_total_num_tokens": plan.max_total_num_tokens,
                    "max_req_input_len": plan.max_req_input_len,
                    "max_mamba_cache_size": plan.mamba_slots or None,
                    "internal_states": [state],
                    "sim_memory_plan": plan.as_dict(),
                    # how far the host fell behind (modelled time ran slower than K x wall)
                    "sim_behind_s": self.clock.behind_wall_s,
                    # wall seconds modelled time waited for closed-loop clients at holds
                    "sim_hold_wait_s": s.hold_wait_s,
                    "sim_hold_timeouts": s.hold_timeouts,
                    # requests that came after the modelled time their client meant to send them
                    "sim_late_requests": s.late_requests,
                    "sim_late_s": s.late_s,
                    "sim_retracted_requests": s.retracted_total,
                    "sim_gpu_cache_tokens": s.cache.gpu_tokens if s.cache else 0,
                    "sim_owned_tokens": s.owned_tokens,
                    "sim_now_s": self.clock.now(),
                }
            )
        return info

    async def server_info(self, request: web.Request) -> web.Response:
        return _json(self.server_info_dict())

    async def model_info(self, request: web.Request) -> web.Response:
        model = self.config.model
        info = {
            # entrypoints/http_server.py model_info (0.5.23)
            "model_path": self.args.model_path or model.name,
            "served_model_name": self.config.served_model_name,
            "tokenizer_path": self.args.tokenizer_path or self.args.model_path or model.name,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": "auto",
            "reasoning_parser": None,
            "tool_call_parser": None,
            "disaggregation_mode": "null",
            "has_image_understanding": model.image_understanding,
            "has_audio_understanding": False,
            "model_type": model.model_type,  # the HF config's, e.g. qwen3_5
            "architectures": [model.architecture],
        }
        if not self.new_api:  # 0.5.10 had none of these
            for key in (
                "served_model_name",
                "load_format",
                "reasoning_parser",
                "tool_call_parser",
                "disaggregation_mode",
            ):
                del info[key]
        return _json(info)

    async def models(self, request: web.Request) -> web.Response:
        name = self.config.served_model_name
        return _json(
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": int(time.time()),
                        "owned_by": "sglang",
                        "root": name,
                        "parent": None,
                        "max_model_len": self.config.context_length,
                    }
                ],
            }
        )

    async def flush_cache(self, request: web.Request) -> web.Response:
        if self.scheduler is not None and self.scheduler.flush_cache():
            return web.Response(
                text="Cache flushed.\nPlease check backend logs for more details. "
                "(When there are running or waiting requests, the operation "
                "will not be performed.)\n"
            )
        return web.Response(
            status=400, text="Cache not flushed: there are running or waiting requests.\n"
        )

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        if not self.args.enable_metrics:
            return web.Response(status=404, text="Not Found")
        if self.metrics is None:
            return web.Response(text="", content_type="text/plain")
        return web.Response(text=self.metrics.render(), content_type="text/plain")

    async def sim_requests(self, request: web.Request) -> web.Response:
        records = self.scheduler.records if self.scheduler is not None else []
        return _json(
            {"time_scale": float(self.clock.scale), "requests": [r.as_dict() for r in records]}
        )

    async def sim_requests_clear(self, request: web.Request) -> web.Response:
        if self.scheduler is not None:
            self.scheduler.records.clear()
        return _json({"cleared": True})

    async def sim_hold(self, request: web.Request) -> web.Response:
        """Hold modelled time now until ``count`` requests name ``key`` in ``sim.after``."""
        not_ready = self._not_ready()
        if not_ready:
            return not_ready
        try:
            body = await self._body(request)
            key = str(body["key"])
            count = int(body.get("count", 1))
        except (BadRequest, KeyError, TypeError, ValueError) as exc:
            return _json({"error": {"message": f"bad hold: {exc}"}}, 400)
        return _json({"key": key, "t": self._scheduler.hold(key, count)})

    async def sim_release(self, request: web.Request) -> web.Response:
        not_ready = self._not_ready()
        if not_ready:
            return not_ready
        try:
            body = await self._body(request)
        except BadRequest as exc:
            return _json({"error": {"message": str(exc)}}, 400)
        keys = body.get("keys")
        prefix = body.get("prefix")
        released = self._scheduler.release(
            [str(k) for k in keys] if isinstance(keys, list) else None,
            str(prefix) if prefix else None,
        )
        return _json({"released": released})

    @staticmethod
    def _sim_options(body: JSONDict) -> tuple[str | None, float | None, bool]:
        """The simulator-only ``sim`` object of a request body: (after, at, hold)."""
        sim = body.get("sim")
        if not isinstance(sim, dict):
            return None, None, False
        after = sim.get("after")
        at = sim.get("at")
        if at is not None and not isinstance(at, int | float):
            raise BadRequest("sim.at must be a number of modelled seconds")
        return (
            str(after) if after is not None else None,
            float(at) if at is not None else None,
            bool(sim.get("hold", False)),
        )

    def _submit(self, req: SimRequest, sim: tuple[str | None, float | None, bool]) -> None:
        after, at, hold = sim
        req.hold = hold
        self._scheduler.submit(req, after, at)

    def _sim_stamp(self, req: SimRequest, t: float) -> JSONDict:
        stamp: JSONDict = {"sim_time": t, "sim_arrival": req.arrival}
        if req.late_s > 0:
            stamp["sim_late"] = req.late_s
        return stamp

    # ------------------------------------------------------------ requests
    def _make_request(
        self, prompt: list[int], max_new: int, ignore_eos: bool, rid: str | None
    ) -> SimRequest:
        plan = self._plan
        if not prompt:
            raise BadRequest("The input is empty: send text or input_ids")
        if len(prompt) > plan.max_req_input_len:
            raise BadRequest(
                f"The input ({len(prompt)} tokens) is longer than the model's context length "
                f"({plan.context_len} tokens)."
            )
        max_new = max(0, min(int(max_new), plan.context_len - len(prompt)))
        if max_new < 1:
            raise BadRequest("max_new_tokens must be at least 1")
        target = max_new
        if not ignore_eos:
            # a natural answer length: the model stops at EOS before the limit most times
            target = int(min(max_new, max(1, self._rng.lognormal(5.0, 0.8))))
        self._req_seq += 1
        req = SimRequest(
            rid=rid or uuid.uuid4().hex,
            prompt=prompt,
            max_new_tokens=max_new,
            target_len=target,
            arrival=self.clock.now(),
            seed=self._req_seq,
        )
        self._scheduler.prepare(req)
        return req

    def _accept(self, req: SimRequest) -> bool:
        """Fault hooks at acceptance; False: answer this request with HTTP 500."""
        self.faults.accept()
        if self.faults.should_fail():
            req.error = "Internal server error (simulated fault)"
            self._scheduler.record_error(req)
            return False
        return True

    async def _progress(self, req: SimRequest) -> AsyncIterator[tuple[int, int, float, bool]]:
        """Yield (from, to, modelled time, finished) per chunk the scheduler released."""
        sent = 0
        index = 0
        while True:
            await req.event.wait()
            req.event.clear()
            marks = req.marks
            finished = req.finished
            while index < len(marks):
                upto, t = marks[index]
                index += 1
                last = finished and index == len(marks) and upto >= req.generated
                yield sent, upto, t, last
                sent = upto
                if last:
                    return
            if finished and sent >= req.generated:
                yield sent, sent, req.finish_t if req.finish_t is not None else req.arrival, True
                return

    def _meta(self, req: SimRequest) -> JSONDict:
        meta: JSONDict = {
            "id": req.rid,
            "finish_reason": req.finish_reason,
            "prompt_tokens": req.prompt_len,
            "completion_tokens": req.released,
            "cached_tokens": req.cached,
            "weight_version": "default",
            # 0.5.10 called it total_retractions
            ("num_retractions" if self.new_api else "total_retractions"): req.retractions,
        }
        if req.marks:
            meta.update(self._sim_stamp(req, req.marks[-1][1]))
        if req.finished and req.finish_t is not None:
            meta["e2e_latency"] = req.finish_t - req.arrival
            # managers/tokenizer_manager.py (0.5.23): spec_* only once the request finishes
            if self.config.spec is not None and req.verify_ct > 0:
                meta["spec_verify_ct"] = req.verify_ct
                meta["spec_accept_length"] = req.spec_accept_length
        return meta

    async def _body(self, request: web.Request) -> JSONDict:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadRequest(f"invalid JSON body: {exc}") from exc
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return body

    async def generate(self, request: web.Request) -> web.StreamResponse:
        not_ready = self._not_ready()
        if not_ready:
            return not_ready
        try:
            body = await self._body(request)
            sampling = body.get("sampling_params") or {}
            max_new = sampling.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
            ignore_eos = bool(sampling.get("ignore_eos", False))
            prompts = self._native_prompts(body)
            batch = isinstance(prompts, list) and prompts and isinstance(prompts[0], list)
            if batch and body.get("stream"):
                raise BadRequest("streaming a batch of prompts is not supported")
            sim = self._sim_options(body)
            if batch:
                reqs = [self._make_request(p, max_new, ignore_eos, None) for p in prompts]
            else:
                reqs = [self._make_request(prompts, max_new, ignore_eos, body.get("rid"))]
        except BadRequest as exc:
            return _json({"error": {"message": str(exc)}}, 400)
        for req in reqs:
            if not self._accept(req):
                return _json({"error": {"message": req.error}}, 500)
        if body.get("stream"):
            return await self._stream_native(request, reqs[0], sim)
        for req in reqs:
            self._submit(req, sim)
        results = []
        for req in reqs:
            async for _ in self._progress(req):
                pass
            results.append(
                {
                    "text": tok.output_text(0, req.generated, req.seed),
                    "output_ids": tok.output_ids(0, req.generated, req.seed),
                    "meta_info": self._meta(req),
                }
            )
        return _json(results if batch else results[0])

    def _native_prompts(self, body: JSONDict) -> Any:
        if body.get("input_ids") is not None:
            ids = body["input_ids"]
            if isinstance(ids, list) and ids and isinstance(ids[0], list):
                return [[int(t) for t in p] for p in ids]
            if not isinstance(ids, list):
                raise BadRequest("input_ids must be a list of ints")
            return [int(t) for t in ids]
        text = body.get("text")
        if isinstance(text, list):
            return [tok.encode(str(t)) for t in text]
        if isinstance(text, str):
            return tok.encode(text)
        raise BadRequest("Either text or input_ids should be provided.")

    async def _stream_native(
        self, request: web.Request, req: SimRequest, sim: tuple[str | None, float | None, bool]
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        # submitted only now, so the first token is not held up by the response headers
        self._submit(req, sim)
        text = ""
        try:
            ids: list[int] = []
            async for start, stop, t, _ in self._progress(req):
                text += tok.output_text(start, stop, req.seed)
                ids += tok.output_ids(start, stop, req.seed)
                meta = self._meta(req)
                meta["completion_tokens"] = stop
                meta.update(self._sim_stamp(req, t))
                # Cumulative, like text: what sglang streams unless told to stream increments.
                chunk = {"text": text, "output_ids": ids, "meta_info": meta, "index": 0}
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self._scheduler.abort(req)
            raise
        return resp

    # ------------------------------------------------------------ OpenAI
    def _usage(self, req: SimRequest) -> JSONDict:
        return {
            "prompt_tokens": req.prompt_len,
            "completion_tokens": req.generated,
            "total_tokens": req.prompt_len + req.generated,
            "prompt_tokens_details": {"cached_tokens": req.cached},
        }

    def _openai_finish(self, req: SimRequest) -> str:
        return "length" if req.generated >= req.max_new_tokens else "stop"

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=True)

    async def _openai(self, request: web.Request, chat: bool) -> web.StreamResponse:
        not_ready = self._not_ready()
        if not_ready:
            return not_ready
        try:
            body = await self._body(request)
            if chat:
                messages = body.get("messages")
                if not isinstance(messages, list) or not messages:
                    raise BadRequest("messages must be a non-empty list")
                prompt = tok.encode_chat(messages)
            else:
                raw = body.get("prompt")
                if isinstance(raw, list) and raw and isinstance(raw[0], int):
                    prompt = [int(t) for t in raw]
                elif isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str):
                    prompt = tok.encode(raw[0])
                elif isinstance(raw, str):
                    prompt = tok.encode(raw)
                else:
                    raise BadRequest("prompt must be a string or a list of token ids")
            limit = body.get("max_completion_tokens") or body.get("max_tokens")
            if limit is None:
                limit = self._plan.context_len
            req = self._make_request(
                prompt, int(limit), bool(body.get("ignore_eos", False)), body.get("rid")
            )
            sim = self._sim_options(body)
        except (BadRequest, ValueError, TypeError) as exc:
            return _openai_error(str(exc))
        if not self._accept(req):
            return _openai_error(req.error or "error", 500)
        model = body.get("model") or self.config.served_model_name
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream_openai(request, req, chat, rid, model, created, usage, sim)
        self._submit(req, sim)
        async for _ in self._progress(req):
            pass
        text = tok.output_text(0, req.generated, req.seed)
        if chat:
            choice: JSONDict = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": self._openai_finish(req),
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": self._openai_finish(req),
            }
        return _json(
            {
                "id": rid,
                "object": "chat.completion" if chat else "text_completion",
                "created": created,
                "model": model,
                "choices": [choice],
                "usage": self._usage(req),
            }
        )

    async def _stream_openai(
        self,
        request: web.Request,
        req: SimRequest,
        chat: bool,
        rid: str,
        model: str,
        created: int,
        include_usage: bool,
        sim: tuple[str | None, float | None, bool],
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        self._submit(req, sim)
        obj = "chat.completion.chunk" if chat else "text_completion"

        def frame(
            choices: list[JSONDict], usage: JSONDict | None = None, t: float | None = None
        ) -> bytes:
            data: JSONDict = {
                "id": rid,
                "object": obj,
                "created": created,
                "model": model,
                "choices": choices,
            }
            if usage is not None:
                data["usage"] = usage
            if t is not None:
                stamp = self._sim_stamp(req, t)
                data["sim"] = {k[4:]: v for k, v in stamp.items()}
            return b"data: " + json.dumps(data).encode() + b"\n\n"

        try:
            if chat:
                await resp.write(
                    frame(
                        [
                            {
                                "index": 0,
                                "delta": {"role": "assistant", "content": ""},
                                "logprobs": None,
                                "finish_reason": None,
                            }
                        ]
                    )
                )
            async for start, stop, t, done in self._progress(req):
                if stop <= start and not done:
                    continue
                text = tok.output_text(start, stop, req.seed)
                finish = self._openai_finish(req) if done else None
                if chat:
                    choice: JSONDict = {
                        "index": 0,
                        "delta": {"content": text},
                        "logprobs": None,
                        "finish_reason": finish,
                    }
                else:
                    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
                await resp.write(frame([choice], t=t))
            if include_usage:
                end = req.finish_t if req.finish_t is not None else req.arrival
                await resp.write(frame([], self._usage(req), t=end))
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self._scheduler.abort(req)
            raise
        return resp


def _graph_memory(plan: MemoryPlan, spec: bool) -> dict[str, float]:
    """CUDA graph memory per capture phase, GB, as 0.5.23 reports it (model_executor/
    graph_memory_usage.py keys); the simulator splits its one figure between the phases."""
    phases = dict.fromkeys(
        ("prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend"),
        0.0,
    )
    if spec:
        share = plan.cuda_graph_gib / 3
        phases.update(target_verify=round(share, 3), draft_decode=round(share, 3))
        phases["draft_extend"] = round(plan.cuda_graph_gib - 2 * share, 3)
    else:
        phases["decode"] = round(plan.cuda_graph_gib, 3)
    return phases
