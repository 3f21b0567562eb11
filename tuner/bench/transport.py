"""A lean HTTP/1.1 transport for httpx: asyncio protocol, keep-alive pool, chunked decoding.

Why not httpx's default transport: per streamed chunk, httpcore goes through anyio cancel scopes,
h11's event machinery and several context managers. Measured against a plain aiohttp client on
the same stream, that cost about 3x the CPU per chunk, and the benchmark client shares the host
with the server it measures. This transport does only what a benchmark against sglang needs:
HTTP/1.1 (plain or TLS), bodies framed by Content-Length, chunked encoding or connection close,
and connection reuse. httpx stays the client API (requests, headers, auth, errors); only the
bytes on the wire are handled here.

Example:
    >>> client = httpx.AsyncClient(transport=LeanTransport())  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator

import httpx

_DEFAULT_PORTS = {"http": 80, "https": 443}
_NO_BODY_STATUS = frozenset({204, 304})
_MAX_HEAD_BYTES = 64 * 1024


class _Connection(asyncio.Protocol):
    """Bytes from the socket land in `buffer`; a reader waits with `wait()`."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.closed = False
        self.error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def eof_received(self) -> bool:
        self._lost(None)
        return False  # let the transport close itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost(exc)

    def _lost(self, exc: BaseException | None) -> None:
        self.closed = True
        if exc is not None and self.error is None:
            self.error = exc
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float | None = None) -> None:
        """Wait until more bytes arrived; raise when the peer has gone instead."""
        if self.closed:
            if self.error is not None:
                raise httpx.ReadError(f"connection lost: {self.error}")
            raise httpx.RemoteProtocolError("server closed the connection mid-response")
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        try:
            if timeout is None:
                await waiter
            else:
                async with asyncio.timeout(timeout):
                    await waiter
        except TimeoutError:
            raise httpx.ReadTimeout(f"no data for {timeout:g} s") from None
        finally:
            self._waiter = None

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self.closed = True


class _Body(httpx.AsyncByteStream):
    """The response body, de-framed; hands its connection back to the pool when fully read."""

    def __init__(
        self,
        pool: LeanTransport,
        key: tuple[str, str, int],
        conn: _Connection,
        framing: str,
        length: int,
        keep_alive: bool,
        read_timeout: float | None,
    ) -> None:
        self._pool = pool
        self._key = key
        self._conn = conn
        self._framing = framing  # "length", "chunked" or "close"
        self._length = length
        self._keep_alive = keep_alive
        self._timeout = read_timeout
        self._complete = False
        self._released = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        # The framing's own generator, not a wrapper around it: one layer less per chunk.
        if self._framing == "chunked":
            return self._chunked()
        if self._framing == "length":
            return self._sized()
        return self._until_close()

    def _done(self) -> None:
        self._complete = True
        self._release()

    async def _sized(self) -> AsyncIterator[bytes]:
        conn, remaining = self._conn, self._length
        while remaining > 0:
            if not conn.buffer:
                await conn.wait(self._timeout)
                continue
            part = bytes(conn.buffer[:remaining])
            del conn.buffer[: len(part)]
            remaining -= len(part)
            yield part
        self._done()

    async def _until_close(self) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            if conn.buffer:
                part = bytes(conn.buffer)
                conn.buffer.clear()
                yield part
            if conn.closed:
                if conn.error is not None:
                    raise httpx.ReadError(f"connection lost: {conn.error}")
                self._done()
                return
            await conn.wait(self._timeout)

    async def _chunked(self) -> AsyncIterator[bytes]:
        conn = self._conn
        buf = conn.buffer
        while True:
            parts: list[bytes] = []
            pos = 0
            finished = False
            # Take every complete chunk in the buffer at once: one yield per network read.
            while True:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                try:
                    size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
                except ValueError:
                    raise httpx.RemoteProtocolError("malformed chunk size in response") from None
                if size == 0:
                    end = buf.find(b"\r\n\r\n", eol)  # after any trailers
                    if end < 0:
                        break
                    pos = end + 4
                    finished = True
                    break
                start = eol + 2
                stop = start + size
                if len(buf) < stop + 2:
                    break
                parts.append(bytes(buf[start:stop]))
                pos = stop + 2
            if pos:
                del buf[:pos]
            if parts:
                yield parts[0] if len(parts) == 1 else b"".join(parts)
            if finished:
                self._done()
                return
            await conn.wait(self._timeout)

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        conn = self._conn
        if self._complete and self._keep_alive and not conn.closed and not conn.buffer:
            self._pool._idle.setdefault(self._key, []).append(conn)
        else:
            conn.close()
            self._pool._open.discard(conn)

    async def aclose(self) -> None:
        # Reached early when the caller stops reading (a cancelled request): closing the
        # connection is what tells the server to abort the request.
        self._release()


class LeanTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over asyncio with a keep-alive pool per host. No proxies, no HTTP/2."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._ssl_context = ssl_context
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._open: set[_Connection] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        if url.scheme not in _DEFAULT_PORTS:
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        key = (url.scheme, url.host, url.port or _DEFAULT_PORTS[url.scheme])
        timeouts = request.extensions.get("timeout", {})
        body = await request.aread()
        head = _request_head(request)
        for attempt in range(2):
            conn, reused = await self._acquire(key, timeouts.get("connect"))
            conn.transport.write(head + body)  # type: ignore[union-attr]
            try:
                status, headers, rest = await _read_head(conn, timeouts.get("read"))
            except httpx.TransportError:
                conn.close()
                self._open.discard(conn)
                # A kept-alive connection the server closed meanwhile: send again on a new one.
                if reused and attempt == 0 and not conn.buffer:
                    continue
                raise
            break
        else:
            raise AssertionError("unreachable: only the first attempt is retried")
        framing, length, keep_alive = _framing(request.method, status, headers)
        stream = _Body(self, key, conn, framing, length, keep_alive, timeouts.get("read"))
        return httpx.Response(
            status,
            headers=headers,
            stream=stream,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": rest},
        )

    async def _acquire(
        self, key: tuple[str, str, int], timeout: float | None
    ) -> tuple[_Connection, bool]:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn, True
            self._open.discard(conn)
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        context = None
        if scheme == "https":
            context = self._ssl_context or ssl.create_default_context()
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    _Connection, host, port, ssl=context, server_hostname=host if context else None
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"no connection to {host}:{port} in {timeout:g} s") from None
        except OSError as exc:
            raise httpx.ConnectError(f"{host}:{port}: {exc.strerror or exc}") from None
        self._open.add(conn)
        return conn, False

    async def aclose(self) -> None:
        for conn in list(self._open):
            conn.close()
        self._open.clear()
        self._idle.clear()


def _request_head(request: httpx.Request) -> bytes:
    lines = [b"%s %s HTTP/1.1" % (request.method.encode(), request.url.raw_path)]
    lines += [b"%s: %s" % (name, value) for name, value in request.headers.raw]
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def _read_head(
    conn: _Connection, timeout: float | None
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    buf = conn.buffer
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            break
        if len(buf) > _MAX_HEAD_BYTES:
            raise httpx.RemoteProtocolError("response head too large")
        await conn.wait(timeout)
    raw = bytes(buf[:end])
    del buf[: end + 4]
    status_line, *header_lines = raw.split(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise httpx.RemoteProtocolError(f"not an HTTP/1.x response: {status_line[:80]!r}")
    try:
        status = int(parts[1])
    except ValueError:
        raise httpx.RemoteProtocolError(f"bad status line: {status_line[:80]!r}") from None
    headers = []
    for line in header_lines:
        name, sep, value = line.partition(b":")
        if sep:
            headers.append((name.strip(), value.strip()))
    if 100 <= status < 200:  # an interim response; the real one follows
        return await _read_head(conn, timeout)
    return status, headers, parts[2] if len(parts) > 2 else b""


def _framing(method: str, status: int, headers: list[tuple[bytes, bytes]]) -> tuple[str, int, bool]:
    values = {name.lower(): value.lower() for name, value in headers}
    keep_alive = values.get(b"connection") != b"close"
    if method == "HEAD" or status in _NO_BODY_STATUS:
        return "length", 0, keep_alive
    if b"chunked" in values.get(b"transfer-encoding", b""):
        return "chunked", 0, keep_alive
    if b"content-length" in values:
        try:
            return "length", int(values[b"content-length"]), keep_alive
        except ValueError:
            raise httpx.RemoteProtocolError("bad Content-Length in response") from None
    return "close", 0, False
