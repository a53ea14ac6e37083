"""The watch's upstream client against raw servers on loopback that answer with exactly the bytes a test gives:
HTTP as servers frame it (chunked, by length, to the close, after an interim answer), and as they break it."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hotloop.watch import upstream_client
from hotloop.watch.upstream_client import HELD, MAX_HEAD, UpstreamAnswer, UpstreamClient, UpstreamFault

from support import wait_until

OK_CHUNKED = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


class Server:
    """A loopback server that answers each request on a connection with the next of `replies`, then closes the
    connection if `close`, else keeps it until the client closes it; what each request's head and body were."""

    def __init__(self, *replies: bytes, close: bool = False) -> None:
        self.replies, self.close = replies, close
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []
        self.base = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.base = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            for reply in self.replies:
                await self._read_request(reader)
                writer.write(reply)
                await writer.drain()
            if not self.close:
                await reader.read()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def _read_request(self, reader: asyncio.StreamReader) -> None:
        """One request, its body read by its Content-Length or its chunks."""
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode().lower().split("\r\n")
        length = next((int(line.split(":")[1]) for line in lines if line.startswith("content-length:")), 0)
        if "transfer-encoding: chunked" in lines:
            body = b""
            while size := int((await reader.readuntil(b"\r\n"))[:-2], 16):
                body += (await reader.readexactly(size + 2))[:-2]
            await reader.readuntil(b"\r\n")
        else:
            body = await reader.readexactly(length)
        self.requests.append((head, body))


async def body_of(answer: UpstreamAnswer) -> bytes:
    async with answer:
        return b"".join([block async for block in answer.blocks()])


@pytest.fixture
async def client() -> AsyncIterator[UpstreamClient]:
    upstream = UpstreamClient()
    yield upstream
    await upstream.close()


async def test_a_chunked_answer_streams_and_its_connection_serves_the_next_request(client: UpstreamClient) -> None:
    """Two requests, each answered in chunks: the bodies as sent, the request as the client framed it (its headers,
    a Host, a Content-Length), and one connection for both."""
    reply = OK_CHUNKED + b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    async with Server(reply, reply) as server:
        for _ in range(2):
            answer = await client.request("POST", server.base, "/v1/chat?x=1", {"Authorization": "Bearer k"}, b"{}")
            assert (answer.status, answer.reason, answer.content_type) == (200, "OK", "text/event-stream")
            assert await body_of(answer) == b"hello world"
    head, body = server.requests[0]
    assert head.startswith(b"POST /v1/chat?x=1 HTTP/1.1\r\nHost: 127.0.0.1:") and body == b"{}"
    assert b"Authorization: Bearer k\r\n" in head and b"Content-Length: 2\r\n" in head
    assert server.connections == 1


async def test_a_base_urls_path_goes_before_the_requests(client: UpstreamClient) -> None:
    reply = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
    async with Server(reply) as server:
        assert await body_of(await client.request("GET", f"{server.base}/proxy/", "/v1/models", {}, None)) == b""
    assert server.requests[0][0].startswith(b"GET /proxy/v1/models HTTP/1.1\r\n")


async def test_an_answer_that_says_it_closes_is_not_kept(client: UpstreamClient) -> None:
    """`Connection: close`: its connection is not reused, the next request opens another. A GET says no length."""
    reply = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok"
    async with Server(reply, close=True) as server:
        for _ in range(2):
            assert await body_of(await client.request("GET", server.base, "/v1/models", {}, None)) == b"ok"
    assert server.connections == 2 and b"Content-Length" not in server.requests[0][0]


async def test_an_answer_of_no_stated_length_ends_with_its_connection(client: UpstreamClient) -> None:
    async with Server(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the end", close=True) as server:
        assert await body_of(await client.request("POST", server.base, "/", {}, b"x")) == b"until the end"


async def test_an_interim_answer_is_passed_over(client: UpstreamClient) -> None:
    """103 Early Hints, then the answer: the answer's status and headers, not the hints'."""
    reply = b"HTTP/1.1 103 Early Hints\r\nlink: </x>\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 1\r\n\r\n!"
    async with Server(reply) as server:
        answer = await client.request("POST", server.base, "/", {}, b"")
        assert (answer.status, "link" in answer.headers, await body_of(answer)) == (201, False, b"!")


async def test_a_head_request_ends_at_its_answers_head(client: UpstreamClient) -> None:
    """A HEAD's answer says the length of a body it doesn't send: it ends at its head, and its connection goes."""
    async with Server(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n") as server:
        answer = await client.request("HEAD", server.base, "/", {}, None)
        assert (answer.headers["content-length"], await body_of(answer)) == ("1000", b"")
        assert answer._connection.closed


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (b"HTTP/1.1 2OO OK\r\n\r\n", "its answer is not HTTP/1.1"),
        (b"SMTP ready\r\n\r\n", "its answer is not HTTP/1.1"),
        (b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n", "its answer is not HTTP/1.1"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab", "its answer is not HTTP/1.1"),
        (b"HTTP/1.1 200 OK\r\nx: " + b"a" * MAX_HEAD, f"longer than {MAX_HEAD:,} bytes"),
        (b"HTTP/1.1 101 Switching Protocols\r\nupgrade: h2c\r\nconnection: upgrade\r\n\r\n", "switched protocols"),
        (b"HTTP/1.1 200 OK\r\ncontent-le", "closed the connection before the answer's end"),
    ],
)
async def test_a_broken_head_is_one_line(client: UpstreamClient, reply: bytes, said: str) -> None:
    async with Server(reply, close=True) as server:
        with pytest.raises(UpstreamFault, match=said) as raised:
            await client.request("POST", server.base, "/", {}, b"{}")
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        (OK_CHUNKED + b"5\r\nhello\r\nzz\r\n", "its answer is not HTTP/1.1"),
        (OK_CHUNKED + b"5\r\nhello\r\n", "closed the connection before the answer's end"),
        (b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nhello", "closed the connection before the answer's end"),
    ],
)
async def test_a_body_that_breaks_off_is_a_fault_after_what_came(
    client: UpstreamClient, reply: bytes, said: str
) -> None:
    """The blocks before the break, then the fault: the watch passes on what came and closes the client's
    connection as the upstream closed its own."""
    got = b""
    async with Server(reply, close=True) as server:
        answer = await client.request("POST", server.base, "/", {}, b"{}")
        with pytest.raises(UpstreamFault, match=said):
            async with answer:
                async for block in answer.blocks():
                    got += block
    assert got == b"hello"


async def test_bytes_past_the_answers_end_close_its_connection(client: UpstreamClient) -> None:
    """Two answers to one request: the first is the answer, and the connection is not trusted with another."""
    reply = b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\na" + b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nb"
    async with Server(reply, reply) as server:
        for _ in range(2):
            assert await body_of(await client.request("POST", server.base, "/", {}, b"")) == b"a"
    assert server.connections == 2


async def test_a_connection_the_upstream_closed_while_idle_is_not_used(client: UpstreamClient) -> None:
    """The upstream closes a connection after one answer without saying so: the next request opens another."""
    reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    async with Server(reply, close=True) as server:
        answer = await client.request("POST", server.base, "/", {}, b"")
        assert await body_of(answer) == b"ok"
        await wait_until(lambda: answer._connection.closed, what="the upstream's close to arrive")
        assert await body_of(await client.request("POST", server.base, "/", {}, b"")) == b"ok"
    assert server.connections == 2


async def test_a_streamed_body_goes_in_chunks_unless_its_length_is_said(client: UpstreamClient) -> None:
    reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"

    async def parts() -> AsyncIterator[bytes]:
        for part in (b'{"a":', b"", b"1}"):
            yield part

    async with Server(reply, reply) as server:
        assert await body_of(await client.request("POST", server.base, "/", {}, parts())) == b"ok"
        said = {"Content-Length": "7"}
        assert await body_of(await client.request("POST", server.base, "/", said, parts())) == b"ok"
    (chunked, first), (sized, second) = server.requests
    assert b"Transfer-Encoding: chunked\r\n" in chunked and b"Transfer-Encoding" not in sized
    assert first == second == b'{"a":1}' and server.connections == 1


async def test_an_unreachable_upstream_is_a_socket_error(client: UpstreamClient) -> None:
    async with Server() as server:
        pass
    with pytest.raises(OSError, match="Connect call failed"):
        await client.request("POST", server.base, "/", {}, b"")


async def test_a_client_that_takes_nothing_pauses_the_upstream(client: UpstreamClient) -> None:
    """An answer far bigger than `HELD`, not read: the connection stops reading (the upstream's writes wait), and
    reading it then takes it all."""
    size = HELD * 8
    async with Server(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size + b"x" * size) as server:
        answer = await client.request("POST", server.base, "/", {}, b"")
        transport = answer._connection.transport
        assert transport is not None
        await wait_until(lambda: not transport.is_reading(), what="the connection to stop reading")
        assert len(await body_of(answer)) == size


def test_the_client_runs_on_uvloops_transports() -> None:
    """uvloop's transports are not asyncio's classes: the client takes them as they are (the watch on uvloop)."""
    uvloop = pytest.importorskip("uvloop", reason="uvloop is not installed here (an optional speed-up)")

    async def one() -> bytes:
        upstream = UpstreamClient()
        async with Server(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok") as server:
            got = await body_of(await upstream.request("POST", server.base, "/", {}, b""))
        await upstream.close()
        return got

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        assert runner.run(one()) == b"ok"


async def test_a_connection_idle_past_its_time_is_closed_not_used(
    client: UpstreamClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection idle longer than `IDLE` might be closed by its server just as a request goes out on it: it is
    closed, and the request goes on a new one."""
    reply = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    monkeypatch.setattr(upstream_client, "IDLE", -1.0)  # each connection's time is up as it is pooled
    async with Server(reply, reply) as server:
        first = await client.request("POST", server.base, "/", {}, b"")
        assert await body_of(first) == b"ok"
        second = await client.request("POST", server.base, "/", {}, b"")
        assert await body_of(second) == b"ok"
        assert first._connection.closed and second._connection is not first._connection
    assert server.connections == 2


def self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that signs itself, and its key: the files a TLS server on loopback serves."""
    x509 = pytest.importorskip("cryptography.x509", reason="cryptography makes the test's certificate")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    (folder / "cert.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return folder / "cert.pem", folder / "key.pem"


async def test_an_https_upstream_is_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An https:// upstream whose certificate no trusted authority signed is refused (a socket error, so the watch
    says it can't reach it); trusted (`SSL_CERT_FILE`, which Python's default context reads), the request goes over
    TLS with the upstream's name checked."""
    certificate, key = self_signed(tmp_path)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(certificate, key)
    server = Server(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\nsecret")
    listening = await asyncio.start_server(server._serve, "127.0.0.1", 0, ssl=served)
    base = f"https://127.0.0.1:{listening.sockets[0].getsockname()[1]}"
    try:
        untrusting = UpstreamClient()
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            await untrusting.request("POST", base, "/v1/messages", {}, b"{}")
        await untrusting.close()
        monkeypatch.setenv("SSL_CERT_FILE", str(certificate))
        trusting = UpstreamClient()
        assert await body_of(await trusting.request("POST", base, "/v1/messages", {}, b"{}")) == b"secret"
        await trusting.close()
    finally:
        listening.close()
    assert server.requests[0][0].startswith(b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:")
