"""The OpenAI-compatible routes: completions, chat completions and the model list.

Routes: ``/v1/completions``, ``/v1/chat/completions``, ``/v1/models``.

Answers and SSE chunks have OpenAI's shape as sglang writes it; with
``"stream_options": {"include_usage": true}`` the last chunk carries ``usage`` and
``choices: []``. Each streamed chunk also has a ``sim`` object: the modelled time its tokens were
produced (``time``), the request's arrival (``arrival``) and ``late`` when it came late.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass

from aiohttp import web

from tuner.sim import tokens as tok
from tuner.sim.request import SimRequest
from tuner.sim.server.intake import RequestIntake, SimOptions, sim_options, sim_stamp
from tuner.sim.server.state import (
    SSE_HEADERS,
    BadRequest,
    JSONDict,
    ServerState,
    json_response,
    openai_error,
    read_body,
)


def usage(req: SimRequest) -> JSONDict:
    return {
        "prompt_tokens": req.prompt_len,
        "completion_tokens": req.generated,
        "total_tokens": req.prompt_len + req.generated,
        "prompt_tokens_details": {"cached_tokens": req.cached},
    }


def finish_reason(req: SimRequest) -> str:
    return "length" if req.generated >= req.max_new_tokens else "stop"


def prompt_of(body: JSONDict, chat: bool) -> list[int]:
    """The prompt's token ids: the chat template over ``messages``, or ``prompt``."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        return tok.encode_chat(messages)
    raw = body.get("prompt")
    if isinstance(raw, list) and raw and isinstance(raw[0], int):
        return [int(t) for t in raw]
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str):
        return tok.encode(raw[0])
    if isinstance(raw, str):
        return tok.encode(raw)
    raise BadRequest("prompt must be a string or a list of token ids")


@dataclass(frozen=True)
class Completion:
    """What every chunk of one answer repeats."""

    rid: str
    chat: bool
    model: str
    created: int

    def frame(
        self, req: SimRequest, choices: list[JSONDict], usage: JSONDict | None, t: float | None
    ) -> bytes:
        """One SSE chunk."""
        data: JSONDict = {
            "id": self.rid,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }
        if usage is not None:
            data["usage"] = usage
        if t is not None:
            data["sim"] = {k[4:]: v for k, v in sim_stamp(req, t).items()}
        return b"data: " + json.dumps(data).encode() + b"\n\n"


class OpenAIRoutes:
    def __init__(self, state: ServerState, intake: RequestIntake) -> None:
        self.state = state
        self.intake = intake

    def register(self, router: web.UrlDispatcher) -> None:
        router.add_get("/v1/models", self.models)
        router.add_post("/v1/completions", self.completions)
        router.add_post("/v1/chat/completions", self.chat_completions)

    async def models(self, request: web.Request) -> web.Response:
        """``GET /v1/models``: the one served model."""
        name = self.state.config.served_model_name
        return json_response(
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
                        "max_model_len": self.state.config.context_length,
                    }
                ],
            }
        )

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/completions``: ``prompt`` as text or token ids."""
        return await self._complete(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/chat/completions``: ``messages`` through the chat template."""
        return await self._complete(request, chat=True)

    async def _complete(self, request: web.Request, chat: bool) -> web.StreamResponse:
        not_ready = self.state.not_ready()
        if not_ready:
            return not_ready
        try:
            body = await read_body(request)
            prompt = prompt_of(body, chat)
            limit = body.get("max_completion_tokens") or body.get("max_tokens")
            if limit is None:
                limit = self.state.loaded_plan.context_len
            req = self.intake.make_request(
                prompt, int(limit), bool(body.get("ignore_eos", False)), body.get("rid")
            )
            sim = sim_options(body)
        except (BadRequest, ValueError, TypeError) as exc:
            return openai_error(str(exc))
        if not self.intake.accept(req):
            return openai_error(req.error or "error", 500)
        answer = Completion(
            rid=("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
            chat=chat,
            model=body.get("model") or self.state.config.served_model_name,
            created=int(time.time()),
        )
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, req, answer, include_usage, sim)
        self.intake.submit(req, sim)
        await self.intake.wait(req)
        text = tok.output_text(0, req.generated, req.seed)
        choice: JSONDict = {"index": 0}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        choice.update(logprobs=None, finish_reason=finish_reason(req))
        return json_response(
            {
                "id": answer.rid,
                "object": "chat.completion" if chat else "text_completion",
                "created": answer.created,
                "model": answer.model,
                "choices": [choice],
                "usage": usage(req),
            }
        )

    async def _stream(
        self,
        request: web.Request,
        req: SimRequest,
        answer: Completion,
        include_usage: bool,
        sim: SimOptions,
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        self.intake.submit(req, sim)
        try:
            if answer.chat:
                role = {"role": "assistant", "content": ""}
                first = {"index": 0, "delta": role, "logprobs": None, "finish_reason": None}
                await resp.write(answer.frame(req, [first], None, None))
            async for start, stop, t, done in self.intake.progress(req):
                if stop <= start and not done:
                    continue
                text = tok.output_text(start, stop, req.seed)
                finish = finish_reason(req) if done else None
                if answer.chat:
                    choice: JSONDict = {
                        "index": 0,
                        "delta": {"content": text},
                        "logprobs": None,
                        "finish_reason": finish,
                    }
                else:
                    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
                await resp.write(answer.frame(req, [choice], None, t))
            if include_usage:
                end = req.finish_t if req.finish_t is not None else req.arrival
                await resp.write(answer.frame(req, [], usage(req), end))
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.intake.abort(req)
            raise
        return resp
