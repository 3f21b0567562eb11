"""The served simulator's process: the aiohttp app, start-up as sglang logs it, shutdown.

``SimServer`` binds the route families to one ``ServerState``, "loads the model" (plans memory,
prints sglang's start-up lines, or dies with its failure), then runs the scheduler under the
paced driver. ``--api-key`` is enforced like sglang: ``Authorization: Bearer KEY`` on every route
but /health*, /ready and /metrics.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from typing import Any

from aiohttp import web

from tuner.sim import startup_log as logs
from tuner.sim.clock import Clock
from tuner.sim.config import SimConfig
from tuner.sim.failures import StartupFailure
from tuner.sim.faults import Faults, exit_holding_port
from tuner.sim.memory import plan_memory
from tuner.sim.metrics import Metrics
from tuner.sim.perf import build_perf_model
from tuner.sim.scheduler import PacedDriver, Scheduler
from tuner.sim.server.control import ControlRoutes
from tuner.sim.server.info import InfoRoutes
from tuner.sim.server.intake import RequestIntake
from tuner.sim.server.native import NativeRoutes
from tuner.sim.server.openai import OpenAIRoutes
from tuner.sim.server.state import ServerState, json_response

# request bodies up to 64 MiB (long prompts as token ids)
MAX_BODY_BYTES = 64 * 1024**2


class SimServer:
    """One simulated sglang server on an already bound socket: ``asyncio.run(serve())``."""

    def __init__(self, config: SimConfig, sock: socket.socket) -> None:
        args = config.args
        self.sock = sock
        self.state = ServerState(config, Clock(args.sim_time_scale))
        self.faults = Faults(
            args.sim_fault_crash_after,
            args.sim_fault_error_rate,
            args.sim_fault_hold_port,
            args.sim_fault_never_ready,
            args.sim_seed,
        )
        self.intake = RequestIntake(self.state, self.faults)
        self._tasks: list[asyncio.Task[None]] = []  # keeps the scheduler task referenced
        self.app = self._build_app()

    def _build_app(self) -> web.Application:
        middlewares = [self._auth] if self.state.args.api_key else []
        app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
        InfoRoutes(self.state, self.intake).register(app.router)
        ControlRoutes(self.state).register(app.router)
        NativeRoutes(self.state, self.intake).register(app.router)
        OpenAIRoutes(self.state, self.intake).register(app.router)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        path = request.path
        if request.method == "OPTIONS" or path.startswith(("/health", "/ready", "/metrics")):
            return await handler(request)
        if request.headers.get("Authorization") != f"Bearer {self.state.args.api_key}":
            return json_response({"error": "Unauthorized"}, 401)
        return await handler(request)

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
        state = self.state
        cfg, args, clock = state.config, state.args, state.clock
        scale = clock.scale
        load_s = max(args.sim_load_time, 0.0)
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
        state.plan = plan
        perf = build_perf_model(cfg, plan)
        scheduler = Scheduler(cfg, plan, perf, clock, args.sim_seed)
        driver = PacedDriver(scheduler, clock, args.sim_stream_flush_ms)
        state.scheduler = scheduler
        state.metrics = Metrics(scheduler, cfg.served_model_name)
        self._tasks.append(asyncio.create_task(driver.run()))
        logs.emit(f"Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
        if self.faults.never_ready:
            return
        state.ready = True
        logs.emit(logs.READY_LINE)

    def _die(self, failure: StartupFailure) -> None:
        for line in logs.failure_lines(failure, in_scheduler=True):
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
        os._exit(1)
