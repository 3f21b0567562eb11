"""The routes that act on the server: the cache flush and the simulator-only controls.

- ``/flush_cache`` (any method): empties the prefix cache when nothing runs or waits, as sglang;
- ``GET /sim/requests``: the finished requests' records (modelled times); ``DELETE`` it or
  ``POST /sim/requests/clear`` to empty it;
- ``POST /sim/hold`` ``{"key", "count"}``: hold modelled time now until ``count`` requests name
  ``key`` in ``sim.after``; ``POST /sim/release`` ``{"keys"}`` or ``{"prefix"}``: drop holds
  (``scheduler.holds``).
"""

from __future__ import annotations

from aiohttp import web

from tuner.sim.server.state import BadRequest, ServerState, json_response, read_body


class ControlRoutes:
    def __init__(self, state: ServerState) -> None:
        self.state = state

    def register(self, router: web.UrlDispatcher) -> None:
        router.add_route("*", "/flush_cache", self.flush_cache)
        router.add_get("/sim/requests", self.requests)
        router.add_delete("/sim/requests", self.clear_requests)
        router.add_post("/sim/requests/clear", self.clear_requests)
        router.add_post("/sim/hold", self.hold)
        router.add_post("/sim/release", self.release)

    async def flush_cache(self, request: web.Request) -> web.Response:
        """``/flush_cache``: 200 when the cache was emptied, 400 while requests run or wait."""
        scheduler = self.state.scheduler
        if scheduler is not None and scheduler.flush_cache():
            return web.Response(
                text="Cache flushed.\nPlease check backend logs for more details. "
                "(When there are running or waiting requests, the operation "
                "will not be performed.)\n"
            )
        return web.Response(
            status=400, text="Cache not flushed: there are running or waiting requests.\n"
        )

    async def requests(self, request: web.Request) -> web.Response:
        """``GET /sim/requests``: every finished request's record, with the time scale."""
        scheduler = self.state.scheduler
        records = scheduler.records if scheduler is not None else []
        return json_response(
            {
                "time_scale": float(self.state.clock.scale),
                "requests": [r.as_dict() for r in records],
            }
        )

    async def clear_requests(self, request: web.Request) -> web.Response:
        """``DELETE /sim/requests``: forget the records kept so far."""
        if self.state.scheduler is not None:
            self.state.scheduler.records.clear()
        return json_response({"cleared": True})

    async def hold(self, request: web.Request) -> web.Response:
        """``POST /sim/hold``: hold modelled time now until ``count`` requests name ``key``."""
        not_ready = self.state.not_ready()
        if not_ready:
            return not_ready
        try:
            body = await read_body(request)
            key = str(body["key"])
            count = int(body.get("count", 1))
        except (BadRequest, KeyError, TypeError, ValueError) as exc:
            return json_response({"error": {"message": f"bad hold: {exc}"}}, 400)
        return json_response({"key": key, "t": self.state.loaded_scheduler.holds.hold(key, count)})

    async def release(self, request: web.Request) -> web.Response:
        """``POST /sim/release``: drop the holds named in ``keys`` or under ``prefix``."""
        not_ready = self.state.not_ready()
        if not_ready:
            return not_ready
        try:
            body = await read_body(request)
        except BadRequest as exc:
            return json_response({"error": {"message": str(exc)}}, 400)
        keys = body.get("keys")
        prefix = body.get("prefix")
        released = self.state.loaded_scheduler.holds.release(
            [str(k) for k in keys] if isinstance(keys, list) else None,
            str(prefix) if prefix else None,
        )
        return json_response({"released": released})
