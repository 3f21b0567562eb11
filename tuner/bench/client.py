"""The streaming HTTP client and its two clocks: one RequestRecord per request, failures recorded.

`BenchClient` sends one streaming request to sglang (or the simulator) and fills its record;
failures are recorded in it, never raised. Its times are modelled seconds, read one of two ways:

- against the simulator (its /server_info says `sim_modelled_time`), from the modelled stamps on
  every chunk (`Stamps`), so a busy host changes how long a run takes, never what it measures;
- against a real server, from the client's wall clock, read once per network read and converted
  right there (`ModelClock`: wall x the server's time scale, 1 on a real server), so that every
  later computation works in modelled units and never needs to know the scale.

Example:
    >>> async def one(url: str) -> RequestRecord:
    ...     async with BenchClient(url, api="generate") as client:
    ...         await client.probe()
    ...         body = build_body("generate", [("user", [1, 2, 3])], 8, ignore_eos=True, model=None)
    ...         record, _ = await client.send(0, body, expected_output_tokens=8)
    ...         return record
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import httpx

from tuner.bench.payload import API_PATHS, APIS
from tuner.bench.records import RequestRecord
from tuner.bench.transport import LeanTransport
from tuner.errors import UserError

API_KEY_ENV = "SGLANG_API_KEY"
_CONNECT_TIMEOUT_S = 30.0  # wall seconds; a local server that takes longer is not serving
# How much slower than its time scale the simulator may run before a request's wall-clock guard
# ends it (its time limit proper is checked in modelled time).
_MODELLED_WALL_SLACK = 10.0


class ModelClock:
    """Modelled seconds since `restart()`: wall time multiplied by the server's time scale."""

    __slots__ = ("_origin", "scale")

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale
        self._origin = time.perf_counter()

    def restart(self) -> None:
        self._origin = time.perf_counter()

    def now(self) -> float:
        return (time.perf_counter() - self._origin) * self.scale

    def to_wall(self, modelled_s: float) -> float:
        return modelled_s / self.scale


class Stamps:
    """The simulator's stamps on one streamed request: its arrival, the latest chunk's time."""

    __slots__ = ("arrival", "late", "latest")

    def __init__(self) -> None:
        self.arrival: float | None = None
        self.latest = 0.0
        self.late = 0.0

    def read(self, event: dict[str, Any], generate: bool) -> float | None:
        """The event's modelled time since the arrival (None: it carries no stamp)."""
        if generate:
            meta = event.get("meta_info") or {}
            stamp = {k[4:]: v for k, v in meta.items() if k[:4] == "sim_"}
        else:
            stamp = event.get("sim") or {}
        if self.arrival is None and "arrival" in stamp:
            self.arrival = float(stamp["arrival"])
            self.late = float(stamp.get("late", 0.0))
        if "time" in stamp and self.arrival is not None:
            self.latest = float(stamp["time"])
            return self.latest - self.arrival
        return None

    def finish(self, record: RequestRecord, origin: float) -> None:
        """Start and end of the record, in modelled seconds since the run's `origin`."""
        if self.arrival is None:
            # refused, timed out or cut off before any stamp: a failed request that takes no
            # part in the run's modelled duration
            record.error = record.error or "the simulator sent no modelled timestamps"
            record.start_s = record.end_s = 0.0
            return
        record.start_s = self.arrival - origin
        record.end_s = self.latest - origin
        record.late_s = self.late


@dataclass(frozen=True)
class ServerInfo:
    """What `probe()` read from the server's /server_info."""

    time_scale: float
    model: str | None
    raw: dict[str, Any]
    modelled_time: bool = False  # the server stamps chunks with modelled time (the simulator)


class BenchClient:
    """Sends streaming requests to one sglang (or simulator) server.

    The API key comes from `api_key` or, when that is None, from the SGLANG_API_KEY environment
    variable; it is sent as `Authorization: Bearer <key>`, which is what sglang's `--api-key`
    checks.
    """

    def __init__(
        self,
        url: str,
        *,
        api: str = "generate",
        api_key: str | None = None,
        request_timeout_s: float | None = None,
        clock: ModelClock | None = None,
        use_server_time: bool = True,
    ) -> None:
        if api not in APIS:
            raise UserError(f"api {api!r} is not known; allowed: {', '.join(APIS)}")
        if not url.startswith(("http://", "https://")):
            raise UserError(f"server url {url!r} must start with http:// or https://")
        self.url = url.rstrip("/")
        self.api = api
        self.path = API_PATHS[api]
        self.clock = clock or ModelClock()
        self.use_server_time = use_server_time
        # Set by probe(): read the server's modelled timestamps instead of the wall clock.
        self.modelled = False
        # Modelled time (server clock) that records are measured from, in modelled mode.
        self.origin = 0.0
        self.request_timeout_s = request_timeout_s  # modelled seconds
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        # Streamed bytes are parsed as they are; a compressed stream would not parse.
        headers["Accept-Encoding"] = "identity"
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(None, connect=_CONNECT_TIMEOUT_S),
            # The lean transport costs a third of httpcore's CPU per streamed chunk (see
            # transport.py); the runner, not a pool limit, caps the concurrency.
            transport=LeanTransport(),
            # A benchmark talks straight to the server, never through a proxy from the environment.
            trust_env=False,
        )

    async def __aenter__(self) -> BenchClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def reachable(self) -> bool:
        """Whether anything still answers HTTP at the server's address (any status counts)."""
        try:
            await self._http.get("/health", timeout=_CONNECT_TIMEOUT_S)
        except httpx.HTTPError:
            return False
        return True

    async def probe(self) -> ServerInfo:
        """Read /server_info (or the older /get_server_info) and set the clock's time scale.

        Raises UserError when the server cannot be reached or refuses us.
        """
        info: dict[str, Any] = {}
        for path in ("/server_info", "/get_server_info"):
            try:
                response = await self._http.get(path, timeout=_CONNECT_TIMEOUT_S)
            except httpx.HTTPError as exc:
                raise UserError(
                    f"cannot reach the server at {self.url}: {_describe(exc)}"
                ) from None
            if response.status_code in (401, 403):
                raise UserError(
                    f"the server at {self.url} refused us (HTTP {response.status_code}); "
                    f"set {API_KEY_ENV} to the key it was started with"
                )
            if response.status_code >= 500:
                # A server still loading answers 503; its time scale is not known yet.
                raise UserError(
                    f"the server at {self.url} is not ready: {path} answered HTTP "
                    f"{response.status_code}"
                )
            if response.status_code == 200:
                try:
                    info = response.json()
                except ValueError:
                    info = {}
                break
        # Real sglang has no time scale: it runs in real time.
        scale = info.get("sim_time_scale", 1.0) if isinstance(info, dict) else 1.0
        if not isinstance(scale, int | float) or scale <= 0:
            scale = 1.0
        self.clock.scale = float(scale)
        self.modelled = bool(
            self.use_server_time and isinstance(info, dict) and info.get("sim_modelled_time")
        )
        model = info.get("served_model_name") or info.get("model_path")
        return ServerInfo(
            float(scale), model if isinstance(model, str) else None, info, self.modelled
        )

    async def sim_call(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST to a simulator-only route (/sim/hold, /sim/release); raises UserError."""
        try:
            response = await self._http.post(path, json=body, timeout=_CONNECT_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise UserError(f"the simulator at {self.url}: {path}: {_describe(exc)}") from None
        if response.status_code != 200:
            raise UserError(
                f"the simulator at {self.url}: {path} answered HTTP {response.status_code}"
            )
        result = response.json()
        return result if isinstance(result, dict) else {}

    async def flush_cache(self) -> int | None:
        """POST /flush_cache (sglang and the simulator): the HTTP status, None when unreachable.

        200: the prefix cache is empty; 400: requests still run or wait, nothing was flushed."""
        try:
            response = await self._http.post("/flush_cache", timeout=_CONNECT_TIMEOUT_S)
        except httpx.HTTPError:
            return None
        return response.status_code

    async def send(
        self,
        index: int,
        body: dict[str, Any],
        *,
        expected_output_tokens: int,
        conversation: int | None = None,
        turn: int | None = None,
        capture_output: bool = False,
    ) -> tuple[RequestRecord, list[int] | str | None]:
        """Send one streaming request; return its record and, when asked, the answer as the
        server generated it, for a multi-turn history to resend: token ids from /generate
        (when the server sends them), text from the chat endpoint, else None."""
        clock = self.clock
        content = json.dumps(body).encode()
        record = RequestRecord(
            index=index,
            start_s=clock.now(),
            expected_output_tokens=expected_output_tokens,
            conversation=conversation,
            turn=turn,
        )
        output: list[int] | str | None = None
        stamps = Stamps() if self.modelled else None
        timeout = None
        if self.request_timeout_s is not None:
            # An open loop sends requests to the simulator ahead of the modelled time they are
            # due (modelled.py), and it holds them until then: their time limit starts there.
            timeout = clock.to_wall(self.request_timeout_s + self._held_s(body))
            if stamps is not None:
                # On a busy host the simulator runs slower than its time scale: the limit is
                # judged in modelled time below; the wall clock only keeps a request that never
                # ends from hanging the run.
                timeout = timeout * _MODELLED_WALL_SLACK + _CONNECT_TIMEOUT_S
        try:
            async with asyncio.timeout(timeout):
                output = await self._stream(content, record, capture_output, stamps)
        except TimeoutError:
            record.error = f"timeout after {self.request_timeout_s:g} s"
        except httpx.HTTPError as exc:
            record.error = _describe(exc)
        except ValueError as exc:  # a chunk that is not JSON
            record.error = f"bad chunk from server: {exc}"
        if stamps is None:
            record.end_s = clock.now()
        else:
            stamps.finish(record, self.origin)
            limit = self.request_timeout_s
            if record.error is None and limit is not None and record.latency_s > limit:
                record.error = f"timeout after {limit:g} s"
        return record, output

    def _held_s(self, body: dict[str, Any]) -> float:
        """Modelled seconds at most that the simulator holds a request before it is due."""
        sim = body.get("sim") if self.modelled else None
        at = sim.get("at") if isinstance(sim, dict) else None
        return max(float(at) - self.origin, 0.0) if isinstance(at, int | float) else 0.0

    async def _stream(
        self, content: bytes, record: RequestRecord, capture_output: bool, stamps: Stamps | None
    ) -> list[int] | str | None:
        clock = self.clock
        start = record.start_s
        generate = self.api == "generate"
        chunk_times = record.chunk_times_s
        chunk_tokens = record.chunk_tokens
        loads = json.loads
        tokens_so_far = 0
        last: dict[str, Any] | None = None  # meta_info or usage with the latest totals
        ids_chunks: list[list[int]] = []
        capture_text = capture_output and self.api == "chat"
        texts: list[str] = []
        # Text length of each chunk, kept only while the server gives no per-chunk usage.
        chunk_chars: list[int] = []
        counted = False  # some chunk carried usage: the per-chunk counts are the server's
        done = False
        buffer = b""
        async with self._http.stream(
            "POST", self.path, content=content, headers={"Content-Type": "application/json"}
        ) as response:
            record.http_status = response.status_code
            if response.status_code != 200:
                detail = (await response.aread())[:300].decode(errors="replace").strip()
                record.error = f"HTTP {response.status_code}: {detail}"
                return None
            # Raw bytes skip httpx's text decoding and line splitting; the SSE framing is simple
            # enough to split here, which keeps the client's CPU cost per chunk low.
            async for piece in response.aiter_raw():
                now = clock.now() - start
                if buffer:
                    piece = buffer + piece
                lines = piece.split(b"\n")
                buffer = lines.pop()
                for line in lines:
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        done = True
                        continue
                    event = loads(payload)
                    new = 0
                    if stamps is not None:
                        stamped = stamps.read(event, generate)
                        if stamped is not None:
                            now = stamped
                    if generate:
                        meta = event.get("meta_info")
                        if meta is None:
                            record.error = _server_error(event)
                            return None
                        last = meta
                        new = meta.get("completion_tokens", 0) - tokens_so_far
                        if capture_output and "output_ids" in event:
                            ids_chunks.append(event["output_ids"])
                    else:
                        if "error" in event:
                            record.error = _server_error(event)
                            return None
                        usage = event.get("usage")
                        if usage:
                            last = usage
                        choices = event.get("choices")
                        text = _delta_text(choices[0]) if choices else None
                        if text:
                            if capture_text:
                                texts.append(text)
                            if usage and usage.get("completion_tokens"):
                                counted = True
                                new = max(1, usage["completion_tokens"] - tokens_so_far)
                            else:
                                # Counted as one token for now; spread by text length below.
                                new = 1
                                chunk_chars.append(len(text))
                    if new > 0:
                        tokens_so_far += new
                        chunk_times.append(now)
                        chunk_tokens.append(new)
        if not done:
            record.error = "stream ended before [DONE] (server closed the connection)"
        if chunk_times:
            record.ttft_s = chunk_times[0]
        self._fill_totals(record, last, tokens_so_far)
        if not counted and chunk_chars and record.output_tokens != tokens_so_far:
            # A server that coalesces tokens into chunks without per-chunk usage: share the
            # final token count out by text length, so ITL divides each gap by its tokens.
            record.chunk_tokens = spread(record.output_tokens, chunk_chars)
        if capture_text:
            return "".join(texts) if texts and record.error is None else None
        if not capture_output or not ids_chunks or record.error is not None:
            return None
        # sglang streams output_ids cumulatively by default, incrementally when told to.
        if len(ids_chunks[-1]) == record.output_tokens:
            return list(ids_chunks[-1])
        joined = [t for chunk in ids_chunks for t in chunk]
        return joined if len(joined) == record.output_tokens else None

    def _fill_totals(
        self, record: RequestRecord, last: dict[str, Any] | None, tokens_so_far: int
    ) -> None:
        record.output_tokens = tokens_so_far
        if last is None:
            return
        if self.api == "generate":
            record.prompt_tokens = int(last.get("prompt_tokens") or 0)
            record.output_tokens = int(last.get("completion_tokens") or tokens_so_far)
            record.cached_tokens = int(last.get("cached_tokens") or 0)
            accept = last.get("spec_accept_length")
            record.spec_accept_length = float(accept) if accept is not None else None
            rid = last.get("id")
            record.rid = str(rid) if rid is not None else None
        else:
            record.prompt_tokens = int(last.get("prompt_tokens") or 0)
            record.output_tokens = int(last.get("completion_tokens") or tokens_so_far)
            details = last.get("prompt_tokens_details") or {}
            record.cached_tokens = int(details.get("cached_tokens") or 0)


def spread(total: int, weights: list[int]) -> list[int]:
    """Split `total` into integers proportional to `weights` (largest remainder), giving
    every part at least 1 when there is enough to go round."""
    n = len(weights)
    floor = 1 if total >= n else 0
    rest = total - floor * n
    if not sum(weights):
        weights = [1] * n
    weight_sum = sum(weights)
    shares = [rest * w / weight_sum for w in weights]
    parts = [floor + int(share) for share in shares]
    leftover = total - sum(parts)
    by_remainder = sorted(range(n), key=lambda i: shares[i] - int(shares[i]), reverse=True)
    for i in by_remainder[:leftover]:
        parts[i] += 1
    return parts


def _delta_text(choice: dict[str, Any]) -> str | None:
    delta = choice.get("delta")
    if delta is not None:
        return delta.get("content") or delta.get("reasoning_content")
    return choice.get("text")


def _server_error(event: dict[str, Any]) -> str:
    error = event.get("error", event)
    if isinstance(error, dict):
        error = error.get("message", error)
    return f"server error: {str(error)[:300]}"


def _describe(exc: BaseException) -> str:
    kinds: dict[type[BaseException], str] = {
        httpx.ConnectError: "connection refused or failed",
        httpx.ConnectTimeout: "connect timeout",
        httpx.RemoteProtocolError: "disconnected",
        httpx.ReadError: "disconnected",
        httpx.ReadTimeout: "read timeout",
    }
    kind = kinds.get(type(exc), type(exc).__name__)
    detail = str(exc).strip()
    return f"{kind}: {detail}" if detail else kind
