"""Servers for the security tests of the remote datasets (redirects, credentials,
traversal), built on :class:`tests.helpers_remote.HttpServer`:

- :class:`RedirectServer`: ``HttpServer``'s routes plus ``/data/hops/{n}`` (a chain of ``n``
  redirects ending in ``payload(n)``), ``/data/loop/a`` <-> ``/data/loop/b`` (a loop) and
  ``/data/setcookie?to=...`` (a 302 that sets the cookie ``sid=cookie-secret``); every
  request's headers are kept, in order, in ``headers_seen``, and its target (path and
  query, as sent) in ``targets``.
- :class:`NormalisingServer`: a server that sees paths as nginx does (:func:`nginx_path`),
  on 127.0.0.1 and ``[::1]``, recording every normalised path it is asked for in ``paths``;
  it serves ``/data/bytes/{n}``, ``/data/redirect?to=`` and, outside ``/data/``, a
  "private" body (counted in ``outside_hits``): a client that reaches it got data it
  must never see."""

from __future__ import annotations

import asyncio
import re
from typing import Any
from urllib.parse import unquote_to_bytes

from aiohttp import web

from tests.helpers_remote import HttpServer, payload

__all__ = ["CREDENTIAL_HEADERS", "NormalisingServer", "RedirectServer", "credentials_in", "nginx_path"]

#: Request headers that carry a credential in these tests.
CREDENTIAL_HEADERS = ("Authorization", "X-Api-Key", "Cookie", "X-Session-Default")


def credentials_in(headers: dict[str, str]) -> dict[str, str]:
    """The credential-bearing headers among ``headers`` (by name, case-insensitively)."""
    wanted = {h.lower() for h in CREDENTIAL_HEADERS}
    return {k: v for k, v in headers.items() if k.lower() in wanted}


class RedirectServer(HttpServer):
    """``HttpServer`` plus redirect chains, a loop and a cookie-setting redirect, listening
    on ``host`` (any address of 127.0.0.0/8: ``127.0.0.10`` is another host whose URL starts
    with ``http://127.0.0.1``)."""

    def __init__(self, ssl_context: Any = None, host: str = "127.0.0.1") -> None:
        self.host = host
        super().__init__(ssl_context)

    def url(self, path: str) -> str:
        return super().url(path).replace("127.0.0.1", self.host, 1)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.runner = web.AppRunner(self.make_app(), access_log=None, handler_cancellation=True)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, self.host, 0, backlog=1024, ssl_context=self.ssl_context)
        self.loop.run_until_complete(site.start())
        self.port = self.runner.addresses[0][1]
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.runner.cleanup())
        self.loop.close()

    def make_app(self) -> web.Application:
        app = super().make_app()
        app.middlewares.append(self._redirects)  # inside HttpServer's counting middleware
        return app

    def reset(self) -> None:
        super().reset()
        with self.lock:
            self.targets: list[str] = []

    @web.middleware
    async def _redirects(self, request: web.Request, handler: Any) -> web.StreamResponse:
        with self.lock:
            self.targets.append(request.raw_path)
        path = request.path
        if path.startswith("/data/hops/"):
            n = int(path.rsplit("/", 1)[1])
            if n == 0:
                return web.Response(body=payload(7))
            raise web.HTTPFound(f"/data/hops/{n - 1}")
        if path in ("/data/loop/a", "/data/loop/b"):
            raise web.HTTPFound("/data/loop/b" if path.endswith("a") else "/data/loop/a")
        if path == "/data/setcookie":
            response = web.HTTPFound(request.query["to"])
            response.set_cookie("sid", "cookie-secret")
            raise response
        return await handler(request)


def nginx_path(target: str) -> str | None:
    """The path nginx serves for the request target ``target`` (``/a/b?q``): cut at the
    first ``?`` (and ``#``), percent-decode once (``%3F`` becomes a ``?`` inside the path,
    ``%2F`` a ``/``), merge slashes, resolve ``.`` and ``..``; ``None`` (nginx's 400) when
    ``..`` climbs above the root or the bytes are not UTF-8."""
    raw = re.split(r"[?#]", target, maxsplit=1)[0]
    try:
        decoded = unquote_to_bytes(raw).decode("utf-8")
    except UnicodeDecodeError:
        return None
    out: list[str] = []
    for segment in decoded.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not out:
                return None
            out.pop()
        else:
            out.append(segment)
    return "/" + "/".join(out) + ("/" if decoded.endswith("/") and out else "")


class NormalisingServer(HttpServer):
    """A server that normalises paths as nginx does, on 127.0.0.1 (``port``) and ::1
    (``port6``), and records every normalised path in ``paths`` (a 400 for a path nginx
    refuses is recorded as ``"<400>"``)."""

    def __init__(self) -> None:
        self.port6 = 0
        super().__init__()

    def reset(self) -> None:
        super().reset()
        with self.lock:
            self.paths: list[str] = []

    def make_app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._serve_normalised)
        return app

    async def _serve_normalised(self, request: web.Request) -> web.StreamResponse:
        path = nginx_path(request.raw_path)
        with self.lock:
            self.paths.append(path if path is not None else "<400>")
            if path is not None and not path.startswith("/data/"):
                self.outside_hits += 1
        if path is None:
            return web.Response(status=400, text="bad request")
        if not path.startswith("/data/"):
            return web.Response(body=b"PRIVATE " + path.encode())
        bytes_route = re.fullmatch(r"/data/bytes/([0-9]{1,6})", path)
        if bytes_route:
            return web.Response(body=payload(int(bytes_route.group(1))))
        if path == "/data/redirect" and "to" in request.query:
            raise web.HTTPFound(request.query["to"])
        return web.Response(status=404, text="not found")

    def url6(self, path: str) -> str:
        return f"http://[::1]:{self.port6}{path}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.runner = web.AppRunner(self.make_app(), access_log=None, handler_cancellation=True)
        self.loop.run_until_complete(self.runner.setup())
        for host in ("127.0.0.1", "::1"):
            self.loop.run_until_complete(web.TCPSite(self.runner, host, 0, backlog=1024).start())
        self.port = self.runner.addresses[0][1]
        self.port6 = self.runner.addresses[1][1]
        self.ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.runner.cleanup())
        self.loop.close()
