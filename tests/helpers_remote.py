"""A real aiohttp server on 127.0.0.1 for the remote-dataset tests, on its own thread, with
routes that say what they do, and counters the tests read (under a lock):

- ``/data/bytes/{n}``: exactly ``n`` bytes of :func:`payload` (``?chunked=1``: streamed
  without ``Content-Length``); ``/data/delay/{ms}/{n}``: the same after ``ms`` milliseconds;
- ``/data/flaky/{key}/{failures}/{status}``: ``status`` for the first ``failures`` requests
  of ``key`` (with ``Retry-After`` from ``?retry_after=``), then 64 bytes;
- ``/data/cut/{key}/{failures}/{n}``: declares ``n`` bytes but sends half and closes, the
  first ``failures`` times; then the ``n`` bytes;
- ``/data/status/{code}``; ``/data/endless``: 1 KiB chunks as fast as the client takes them
  (back-pressure, no clock), forever, counting ``endless_bytes``; ``/data/huge/{n}``:
  declares ``n`` bytes and streams them the same way; ``/data/hang``: never answers;
- ``/data/gate/{n}``: ``n`` bytes once the test calls ``release()`` (held until then);
- ``/data/gzip/{n}``: ``gzip_payload(n)`` with ``Content-Encoding: gzip``, whatever was asked;
- ``/data/moved``: a 301 without ``Location`` (an S3-style ``PermanentRedirect`` document);
- ``/data/redirect?to=...``: a 302 to ``to``;
- anything outside ``/data/``: counted in ``outside_hits``, answered 418; nothing may hit it.

Handlers that end by a client's disconnect count ``disconnects``."""

from __future__ import annotations

import asyncio
import collections
import gzip
import importlib.util
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, Self

import aiohttp
import botocore.session
import pytest
from aiohttp import web

__all__ = [
    "BUCKET",
    "ODD_KEYS",
    "SIZES",
    "aws_env",
    "moto",
    "HttpServer",
    "MotoServer",
    "S3FaultProxy",
    "free_port",
    "gzip_payload",
    "payload",
    "self_signed_tls",
    "socket_buffer_bytes",
    "wait_until",
]


def payload(n: int, salt: int = 0) -> bytes:
    """``n`` bytes that differ per size and salt (so a wrong or shifted body is seen)."""
    pattern = bytes((i * 7 + n + salt) % 251 for i in range(251))
    return (pattern * (n // 251 + 1))[:n]


def gzip_payload(n: int) -> bytes:
    """``payload(n)`` gzip-compressed (deterministic: no timestamp)."""
    return gzip.compress(payload(n), mtime=0)


def self_signed_tls(directory: Any) -> ssl.SSLContext:
    """A server TLS context with a fresh self-signed certificate for 127.0.0.1 (files in
    ``directory``), made with ``cryptography``."""
    import datetime
    import ipaddress

    pytest.importorskip("cryptography", reason="cryptography is not installed (it has no free-threaded wheels)")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(key, hashes.SHA256())
    )
    certfile, keyfile = f"{directory}/cert.pem", f"{directory}/key.pem"
    with open(certfile, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(keyfile, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certfile, keyfile)
    return context


def socket_buffer_bytes() -> int:
    """The most bytes the kernel may hold between a sender and a receiver on this machine
    (the largest TCP send and receive buffers): what a server can write beyond what its
    client read, with back-pressure and no clock."""
    total = 0
    for name in ("tcp_wmem", "tcp_rmem"):
        try:
            with open(f"/proc/sys/net/ipv4/{name}") as f:
                total += int(f.read().split()[-1])
        except OSError:
            total += 8 << 20
    return total


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll ``condition`` (a server counter, settled by another thread) until true or ``timeout``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


class HttpServer:
    """The server: ``start()`` on a thread named ``test-http-server``, ``stop()`` joins it.
    ``url(path)`` is an address on it; ``reset()`` zeroes the counters."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.ssl_context = ssl_context
        self.lock = threading.Lock()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._serve, name="test-http-server", daemon=True)
        self.ready = threading.Event()
        self.port = 0
        self.gate = asyncio.Event()  # used on the server's loop only
        self.reset()

    # -- counters -------------------------------------------------------------------------------
    def reset(self) -> None:
        with self.lock:
            self.requests: collections.Counter[str] = collections.Counter()
            self.peers: set[Any] = set()
            self.in_flight = 0
            self.max_in_flight = 0
            self.disconnects = 0
            self.endless_bytes = 0
            self.outside_hits = 0
            self.flaky: collections.Counter[str] = collections.Counter()
            self.headers_seen: list[dict[str, str]] = []
        self._on_loop(self.gate.clear)

    def release(self) -> None:
        """Let the requests held at ``/data/gate/`` (and later ones) through."""
        self._on_loop(self.gate.set)

    def _on_loop(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the server's loop (now, before it starts) and wait for it."""
        if not self.thread.is_alive():
            fn()
            return

        async def call() -> None:
            fn()

        asyncio.run_coroutine_threadsafe(call(), self.loop).result(5)

    def count(self, name: str) -> int:
        with self.lock:
            return int(getattr(self, name))

    def total_requests(self) -> int:
        with self.lock:
            return sum(self.requests.values())

    def connections_opened(self) -> int:
        with self.lock:
            return len(self.peers)

    def open_connections(self) -> int:
        """Connections the server holds open now (read on its loop)."""
        future = asyncio.run_coroutine_threadsafe(self._open_connections(), self.loop)
        return future.result(5)

    async def _open_connections(self) -> int:
        return len(self.runner.server.connections) if self.runner.server is not None else 0

    def url(self, path: str) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    # -- handlers -------------------------------------------------------------------------------
    @web.middleware
    async def _track(self, request: web.Request, handler: Any) -> web.StreamResponse:
        with self.lock:
            self.requests[request.path] += 1
            self.peers.add(request.transport.get_extra_info("peername") if request.transport else None)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.headers_seen.append(dict(request.headers))
            if not request.path.startswith("/data/"):
                self.outside_hits += 1
        try:
            return await handler(request)
        except (asyncio.CancelledError, ConnectionResetError):
            with self.lock:
                self.disconnects += 1
            raise
        finally:
            with self.lock:
                self.in_flight -= 1

    async def _bytes(self, request: web.Request) -> web.StreamResponse:
        n = int(request.match_info["n"])
        body = payload(n)
        if request.query.get("chunked"):
            response = web.StreamResponse()
            response.enable_chunked_encoding()
            await response.prepare(request)
            for i in range(0, n, 4096):
                await response.write(body[i : i + 4096])
            await response.write_eof()
            return response
        return web.Response(body=body)

    async def _delay(self, request: web.Request) -> web.Response:
        await asyncio.sleep(int(request.match_info["ms"]) / 1000)
        return web.Response(body=payload(int(request.match_info["n"])))

    async def _flaky(self, request: web.Request) -> web.Response:
        key = request.match_info["key"]
        with self.lock:
            self.flaky[key] += 1
            seen = self.flaky[key]
        if seen <= int(request.match_info["failures"]):
            headers = {}
            if "retry_after" in request.query:
                headers["Retry-After"] = request.query["retry_after"]
            return web.Response(status=int(request.match_info["status"]), headers=headers, text="try again")
        return web.Response(body=payload(64))

    async def _cut(self, request: web.Request) -> web.StreamResponse:
        key, n = request.match_info["key"], int(request.match_info["n"])
        with self.lock:
            self.flaky[key] += 1
            seen = self.flaky[key]
        if seen > int(request.match_info["failures"]):
            return web.Response(body=payload(n))
        response = web.StreamResponse(headers={"Content-Length": str(n)})
        await response.prepare(request)
        await response.write(payload(n)[: n // 2])
        assert request.transport is not None
        request.transport.close()
        return response

    async def _status(self, request: web.Request) -> web.Response:
        return web.Response(status=int(request.match_info["code"]), text="status route")

    async def _stream(self, request: web.Request, total: int | None) -> web.StreamResponse:
        headers = {"Content-Length": str(total)} if total is not None else {}
        response = web.StreamResponse(headers=headers)
        if total is None:
            response.enable_chunked_encoding()
        await response.prepare(request)
        chunk = b"x" * 1024
        sent = 0
        while total is None or sent < total:
            await response.write(chunk)
            sent += len(chunk)
            with self.lock:
                self.endless_bytes += len(chunk)
        await response.write_eof()
        return response

    async def _endless(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, None)

    async def _huge(self, request: web.Request) -> web.StreamResponse:
        return await self._stream(request, int(request.match_info["n"]))

    async def _gate(self, request: web.Request) -> web.Response:
        await self.gate.wait()
        return web.Response(body=payload(int(request.match_info["n"])))

    async def _gzip(self, request: web.Request) -> web.Response:
        body = gzip_payload(int(request.match_info["n"]))
        return web.Response(body=body, headers={"Content-Encoding": "gzip", "Content-Type": "application/octet-stream"})

    async def _moved(self, request: web.Request) -> web.Response:
        return web.Response(status=301, text="<Error><Code>PermanentRedirect</Code></Error>")

    async def _hang(self, request: web.Request) -> web.Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def _redirect(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    async def _outside(self, request: web.Request) -> web.Response:
        return web.Response(status=418, text="outside the base")

    # -- lifecycle ------------------------------------------------------------------------------
    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._track])
        app.router.add_get("/data/bytes/{n}", self._bytes)
        app.router.add_get("/data/delay/{ms}/{n}", self._delay)
        app.router.add_get("/data/flaky/{key}/{failures}/{status}", self._flaky)
        app.router.add_get("/data/cut/{key}/{failures}/{n}", self._cut)
        app.router.add_get("/data/status/{code}", self._status)
        app.router.add_get("/data/endless", self._endless)
        app.router.add_get("/data/huge/{n}", self._huge)
        app.router.add_get("/data/hang", self._hang)
        app.router.add_get("/data/gate/{n}", self._gate)
        app.router.add_get("/data/gzip/{n}", self._gzip)
        app.router.add_get("/data/moved", self._moved)
        app.router.add_get("/data/redirect", self._redirect)
        app.router.add_route("*", "/{tail:.*}", self._outside)
        return app

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.runner = web.AppRunner(self.make_app(), access_log=None, handler_cancellation=True)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0, backlog=1024, ssl_context=self.ssl_context)
        self.loop.run_until_complete(site.start())
        self.port = self.runner.addresses[0][1]
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.on_stop())
        self.loop.run_until_complete(self.runner.cleanup())
        self.loop.close()

    async def on_stop(self) -> None:
        """Clean-up on the server's loop before it stops."""

    def start(self) -> Self:
        self.thread.start()
        if not self.ready.wait(10):
            raise RuntimeError("the test server did not start")
        return self

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def free_port() -> int:
    """A port nothing listens on now (bound and released; a race with another process is unlikely)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    """moto's server mode in a child process on 127.0.0.1; ``stop()`` ends it. ``set_auth(on)``
    makes it check credentials (moto's ``reset-auth``: every request from then on)."""

    def __init__(self) -> None:
        # moto needs cryptography, which has no free-threaded (3.13t) wheel: skip, not error.
        if importlib.util.find_spec("moto") is None:
            pytest.skip("moto is not installed (it needs cryptography, which has no free-threaded wheels)")
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=2):
                    break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.1)

    def set_auth(self, on: bool) -> None:
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/reset-auth",
            data=b"0" if on else b"inf",
            method="POST",
            headers={"Content-Type": "text/plain"},  # not a form: moto reads the raw body
        )
        with urllib.request.urlopen(request, timeout=10):
            pass

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class S3FaultProxy(HttpServer):
    """An aiohttp server in front of moto that forwards every request as it came (the signed
    ``Host`` header included), except that ``fail(n)`` answers the next ``n`` GETs with
    ``503 SlowDown`` (or ``status`` and ``code``) in S3's error format. Counts requests by
    path like :class:`HttpServer`."""

    def __init__(self, upstream: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self.upstream = upstream
        self.failures = 0
        self.fail_with = (503, "SlowDown")
        self.client: Any = None
        super().__init__(ssl_context)

    def fail(self, n: int, status: int = 503, code: str = "SlowDown") -> None:
        with self.lock:
            self.failures = n
            self.fail_with = (status, code)

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._track])
        app.router.add_route("*", "/{tail:.*}", self._forward)
        return app

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        with self.lock:
            inject = request.method == "GET" and self.failures > 0
            if inject:
                self.failures -= 1
            status, code = self.fail_with
        if inject:
            body = f"<Error><Code>{code}</Code><Message>Injected by the test proxy.</Message></Error>"
            return web.Response(status=status, text=body, content_type="application/xml")
        if self.client is None:
            self.client = aiohttp.ClientSession(auto_decompress=False)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("content-length", "transfer-encoding")}
        async with self.client.request(
            request.method, self.upstream + request.path_qs, headers=headers, data=await request.read()
        ) as upstream:
            body = await upstream.read()
            out = {
                k: v
                for k, v in upstream.headers.items()
                if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding")
            }
            return web.Response(status=upstream.status, body=body, headers=out)

    async def on_stop(self) -> None:
        if self.client is not None:
            await self.client.close()


BUCKET = "tl-test"
SIZES = [0, 1, 1000, 300_000]
ODD_KEYS = ["odd/a b+c.bin", "odd/ünïcode~%.bin"]


@pytest.fixture(scope="module")
def aws_env() -> Iterator[None]:
    """Fake credentials and no instance-metadata lookup or config files: nothing reaches AWS."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AWS_ACCESS_KEY_ID", "AKIATESTTESTTESTTEST")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "test-secret")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        mp.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
        mp.delenv("AWS_PROFILE", raising=False)
        mp.delenv("AWS_SESSION_TOKEN", raising=False)
        yield


@pytest.fixture(scope="module")
def moto(aws_env: None) -> Iterator[MotoServer]:
    """moto's server with bucket ``BUCKET``: ``sizes/{n:07d}.bin`` (``payload(n)`` for ``SIZES``),
    ``train/{i:04d}.bin`` (``payload(100, salt=i)``, 5 of them) and ``ODD_KEYS`` (their names)."""
    server = MotoServer()
    try:
        client = botocore.session.get_session().create_client("s3", endpoint_url=server.endpoint)
        client.create_bucket(Bucket=BUCKET)
        for n in SIZES:
            client.put_object(Bucket=BUCKET, Key=f"sizes/{n:07d}.bin", Body=payload(n))
        for i in range(5):
            client.put_object(Bucket=BUCKET, Key=f"train/{i:04d}.bin", Body=payload(100, salt=i))
        for key in ODD_KEYS:
            client.put_object(Bucket=BUCKET, Key=key, Body=key.encode())
        client.close()
        yield server
    finally:
        server.stop()
