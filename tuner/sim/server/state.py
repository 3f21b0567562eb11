"""What every route of the served simulator shares: its state and its HTTP helpers.

The state: the configuration, the clock and, once the model has "loaded", the memory plan, the
scheduler and the metrics.
Also the small pieces of HTTP every route family speaks: JSON answers, sglang's OpenAI-style
error body, the body parser, and ``BadRequest`` for what a client sent wrong.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tuner.sim.args import ServerArgs, version_tuple
from tuner.sim.clock import Clock
from tuner.sim.config import SimConfig
from tuner.sim.memory import MemoryPlan
from tuner.sim.metrics import Metrics
from tuner.sim.scheduler import Scheduler

JSONDict = dict[str, Any]
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class BadRequest(Exception):
    """A request the client got wrong; answered with HTTP 400 and this message."""


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(data), status=status, content_type="application/json")


def openai_error(message: str, status: int = 400) -> web.Response:
    """sglang's error body on the OpenAI routes."""
    kind = "BadRequestError" if status == 400 else "InternalServerError"
    return json_response(
        {"object": "error", "message": message, "type": kind, "param": None, "code": status}, status
    )


async def read_body(request: web.Request) -> JSONDict:
    """The request's JSON object, or BadRequest."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"invalid JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    return body


@dataclass
class ServerState:
    """The server as its routes see it; ``plan`` / ``scheduler`` / ``metrics`` are set once the
    model has loaded (``SimServer._load``), ``ready`` once it would answer /health."""

    config: SimConfig
    clock: Clock
    plan: MemoryPlan | None = None
    scheduler: Scheduler | None = None
    metrics: Metrics | None = None
    ready: bool = False

    @property
    def args(self) -> ServerArgs:
        return self.config.args

    @property
    def new_api(self) -> bool:
        """The HTTP API as 0.5.23 has it (/ready, /model_info fields), else as 0.5.10."""
        return version_tuple(self.config.sglang_version) >= (0, 5, 23)

    def not_ready(self) -> web.Response | None:
        """503 while the server is starting (what sglang answers then), else None."""
        if self.ready and self.scheduler is not None:
            return None
        return web.Response(status=503, text="Server is starting")

    @property
    def loaded_scheduler(self) -> Scheduler:
        """The scheduler, for the routes that ``not_ready`` lets through."""
        if self.scheduler is None:
            raise RuntimeError("the scheduler is not running: the model has not loaded yet")
        return self.scheduler

    @property
    def loaded_plan(self) -> MemoryPlan:
        """The memory plan, for the routes that ``not_ready`` lets through."""
        if self.plan is None:
            raise RuntimeError("no memory plan: the model has not loaded yet")
        return self.plan
