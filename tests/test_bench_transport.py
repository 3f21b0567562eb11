"""The lean HTTP/1.1 transport against a raw asyncio server that answers scripted bytes."""

import asyncio

import httpx
import pytest

from tuner.bench.transport import LeanTransport


class RawServer:
    """Answers each request with the next scripted response; `None` closes the connection."""

    def __init__(self, responses):
        self.responses = list(responses)
        self.connections = 0
        self.requests = []
        self.server = None
        self.url = ""

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        await self.server.wait_closed()

    async def _handle(self, reader, writer):
        self.connections += 1
        try:
            while self.responses:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length) if length else b""
                self.requests.append((head, body))
                response = self.responses.pop(0)
                if response is None:
                    break
                for part in response if isinstance(response, list) else [response]:
                    if part == "pause":
                        await asyncio.sleep(0.05)
                    elif part == "close":
                        writer.close()
                        return
                    else:
                        writer.write(part)
                        await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def client():
    return httpx.AsyncClient(transport=LeanTransport(), trust_env=False)


def run(coro):
    return asyncio.run(coro)


OK_LENGTH = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"


def test_content_length_and_keep_alive_reuse():
    async def main():
        async with RawServer([OK_LENGTH, OK_LENGTH, OK_LENGTH]) as srv, client() as c:
            texts = [(await c.post(srv.url + "/x?a=1", content=b"abc")).text for _ in range(3)]
            assert texts == ["hello"] * 3
            assert srv.connections == 1
            head, body = srv.requests[0]
            assert head.startswith(b"POST /x?a=1 HTTP/1.1\r\n") and body == b"abc"
            assert b"host: 127.0.0.1" in head.lower()

    run(main())


def test_chunked_body_split_across_reads_with_extensions_and_trailers():
    parts = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"5\r\nhello\r\n6;ext=1\r\n wor",
        "pause",
        b"ld\r\n",
        "pause",
        b"0\r\nX-Trailer: 1\r\n\r\n",
    ]

    async def main():
        async with RawServer([parts, OK_LENGTH]) as srv, client() as c:
            async with c.stream("GET", srv.url) as response:
                pieces = [p async for p in response.aiter_raw()]
            assert b"".join(pieces) == b"hello world"
            assert len(pieces) >= 2  # streamed as it came, not buffered to the end
            assert (await c.get(srv.url)).text == "hello"
            assert srv.connections == 1  # the chunked response left the connection reusable

    run(main())


def test_body_until_close_and_no_body_statuses():
    async def main():
        close_body = [b"HTTP/1.1 200 OK\r\n\r\nuntil ", b"the end", "close"]
        async with RawServer([close_body]) as srv, client() as c:
            assert (await c.get(srv.url)).text == "until the end"
        async with RawServer([b"HTTP/1.1 204 No Content\r\n\r\n", OK_LENGTH]) as srv, client() as c:
            assert (await c.get(srv.url)).status_code == 204
            assert (await c.get(srv.url)).text == "hello"
            assert srv.connections == 1

    run(main())


def test_stale_keep_alive_connection_is_retried_once():
    async def main():
        # The server answers once, then closes the connection the client keeps alive.
        async with RawServer([[OK_LENGTH, "close"], OK_LENGTH]) as srv, client() as c:
            assert (await c.get(srv.url)).text == "hello"
            await asyncio.sleep(0.05)
            assert (await c.get(srv.url)).text == "hello"
            assert srv.connections == 2

    run(main())


def test_disconnect_mid_body_is_an_httpx_error():
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"

    async def main():
        async with RawServer([[head, b"5\r\nhello\r\n", "close"]]) as srv, client() as c:
            with pytest.raises(httpx.RemoteProtocolError):
                async with c.stream("GET", srv.url) as response:
                    async for _ in response.aiter_raw():
                        pass

    run(main())


def test_refused_connection_and_bad_response():
    async def main():
        async with RawServer([]) as srv:
            url = srv.url
        async with client() as c:
            with pytest.raises(httpx.ConnectError):
                await c.get(url)
        async with RawServer([b"SPDY nonsense\r\n\r\n"]) as srv, client() as c:
            with pytest.raises(httpx.RemoteProtocolError, match=r"not an HTTP/1\.x response"):
                await c.get(srv.url)

    run(main())


def test_leaving_a_stream_early_closes_its_connection():
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"

    async def main():
        endless = [head, b"5\r\nhello\r\n", "pause", "pause", b"5\r\nworld\r\n", b"0\r\n\r\n"]
        async with RawServer([endless, OK_LENGTH]) as srv, client() as c:
            async with c.stream("GET", srv.url) as response:
                async for _ in response.aiter_raw():
                    break
            assert (await c.get(srv.url)).text == "hello"
            assert srv.connections == 2  # the half-read connection was not reused

    run(main())
