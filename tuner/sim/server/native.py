"""sglang's native generation route, ``POST /generate``.

The body carries ``text`` or ``input_ids`` (one prompt or a batch) and ``sampling_params``
(``max_new_tokens``, ``ignore_eos``). Streamed (``"stream": true``), each ``data:`` line holds the
CUMULATIVE text and ids and a ``meta_info`` (prompt / completion / cached tokens, retractions,
the modelled-time stamps; ``spec_accept_length`` once the request finishes, as 0.5.23), ending
with ``data: [DONE]``; else one JSON answer (a list for a batch).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

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
    read_body,
)

DEFAULT_MAX_NEW_TOKENS = 128


def native_prompts(body: JSONDict) -> Any:
    """The prompt(s) of a /generate body as token ids: a list, or a list of lists (a batch)."""
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


class NativeRoutes:
    def __init__(self, state: ServerState, intake: RequestIntake) -> None:
        self.state = state
        self.intake = intake

    def register(self, router: web.UrlDispatcher) -> None:
        router.add_post("/generate", self.generate)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        """``POST /generate``: one prompt (streamed or not) or a batch (not streamed)."""
        not_ready = self.state.not_ready()
        if not_ready:
            return not_ready
        make = self.intake.make_request
        try:
            body = await read_body(request)
            sampling = body.get("sampling_params") or {}
            max_new = sampling.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
            ignore_eos = bool(sampling.get("ignore_eos", False))
            prompts = native_prompts(body)
            batch = isinstance(prompts, list) and prompts and isinstance(prompts[0], list)
            if batch and body.get("stream"):
                raise BadRequest("streaming a batch of prompts is not supported")
            sim = sim_options(body)
            if batch:
                reqs = [make(p, max_new, ignore_eos, None) for p in prompts]
            else:
                reqs = [make(prompts, max_new, ignore_eos, body.get("rid"))]
        except BadRequest as exc:
            return json_response({"error": {"message": str(exc)}}, 400)
        for req in reqs:
            if not self.intake.accept(req):
                return json_response({"error": {"message": req.error}}, 500)
        if body.get("stream"):
            return await self._stream(request, reqs[0], sim)
        for req in reqs:
            self.intake.submit(req, sim)
        results = []
        for req in reqs:
            await self.intake.wait(req)
            results.append(
                {
                    "text": tok.output_text(0, req.generated, req.seed),
                    "output_ids": tok.output_ids(0, req.generated, req.seed),
                    "meta_info": self.meta(req),
                }
            )
        return json_response(results if batch else results[0])

    def meta(self, req: SimRequest) -> JSONDict:
        """``meta_info`` of a /generate answer or chunk, with sglang's keys per release."""
        new_api = self.state.new_api
        meta: JSONDict = {
            "id": req.rid,
            "finish_reason": req.finish_reason,
            "prompt_tokens": req.prompt_len,
            "completion_tokens": req.released,
            "cached_tokens": req.cached,
            "weight_version": "default",
            # 0.5.10 called it total_retractions
            ("num_retractions" if new_api else "total_retractions"): req.retractions,
        }
        if req.marks:
            meta.update(sim_stamp(req, req.marks[-1][1]))
        if req.finished and req.finish_t is not None:
            meta["e2e_latency"] = req.finish_t - req.arrival
            # managers/tokenizer_manager.py (0.5.23): spec_* only once the request finishes
            if self.state.config.spec is not None and req.verify_ct > 0:
                meta["spec_verify_ct"] = req.verify_ct
                meta["spec_accept_length"] = req.spec_accept_length
        return meta

    async def _stream(
        self, request: web.Request, req: SimRequest, sim: SimOptions
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        # submitted only now, so the first token is not held up by the response headers
        self.intake.submit(req, sim)
        text = ""
        try:
            ids: list[int] = []
            async for start, stop, t, _ in self.intake.progress(req):
                text += tok.output_text(start, stop, req.seed)
                ids += tok.output_ids(start, stop, req.seed)
                meta = self.meta(req)
                meta["completion_tokens"] = stop
                meta.update(sim_stamp(req, t))
                # Cumulative, like text: what sglang streams unless told to stream increments.
                chunk = {"text": text, "output_ids": ids, "meta_info": meta, "index": 0}
                await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.intake.abort(req)
            raise
        return resp
