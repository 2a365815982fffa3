"""Redirects, followed hop by hop: each hop is checked before it is sent (against the
item's base and origin), and what it carries is decided per hop: credentials only to the
origin they were meant for."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from torch_threadloader.remote.errors import HttpStatusError, LocationError, redact_url
from torch_threadloader.remote.locations import path_problem

__all__ = ["MAX_REDIRECTS", "REDIRECT_STATUSES", "SAFE_HEADERS", "SAFE_OPTIONS", "Scope", "followed", "origin_of"]

#: Redirects followed at most for one request (aiohttp's default ``max_redirects``); one
#: more is an :class:`HttpStatusError`. A request option ``max_redirects`` replaces it.
MAX_REDIRECTS = 10
#: Statuses that are followed (with a ``Location``), as aiohttp follows them.
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
#: The only headers a hop to another origin carries (lower-case): none is a credential. The
#: rest (``Authorization``, ``Cookie``, API keys, a session's default headers, whatever a
#: session middleware or aiohttp's ``auth`` added) is removed just before it is sent.
SAFE_HEADERS = frozenset({"host", "accept", "accept-encoding", "user-agent", "range", "connection"})
#: The only request options a hop to another origin keeps: how to connect, never what to
#: send (``auth``, ``cookies``, ``headers``, ``params`` and ``server_hostname`` are dropped).
SAFE_OPTIONS = frozenset(
    {
        "ssl",
        "verify_ssl",
        "ssl_context",
        "fingerprint",
        "proxy",
        "proxy_auth",
        "proxy_headers",
        "timeout",
        "read_bufsize",
        "read_until_eof",
        "auto_decompress",
        "max_line_size",
        "max_field_size",
        "max_headers",
    }
)

Origin = tuple[str, str, int | None]


def origin_of(url: URL) -> Origin:
    """``(scheme, host, port)`` as parsed values: lower-case, the IDNA host, the port with
    the scheme's default filled in."""
    return (url.scheme.lower(), (url.raw_host or "").lower(), url.port)


@dataclass(frozen=True)
class Scope:
    """Where the requests of one item may go, from its base: the item's own origin (that of
    its first request; a template may make the host or port a column, never a redirect) and,
    on it, raw paths starting with ``path`` whose rest passes the server-view traversal check
    (:func:`~torch_threadloader.remote.locations.path_problem`). ``host`` and ``port`` are
    ``None`` when they are columns."""

    scheme: str
    host: str | None
    port: int | None
    path: str
    base: str

    @classmethod
    def of_base(cls, base: str, path_base: str = "/") -> Scope | None:
        """The scope of an ``http(s)://`` base (``None`` for another scheme or no base):
        ``"http://"`` (the host is a column), ``"http://h:"`` (the port is one) or a URL
        ending in ``/``; for the first two, ``path_base`` is the template's path after the
        host and port (:func:`~torch_threadloader.remote.locations.template_path_base`).
        Raises ``ValueError`` naming the base if it does not parse."""
        scheme, sep, rest = base.partition("://")
        scheme = scheme.lower()
        if not sep or scheme not in ("http", "https"):
            return None
        authority, slash, _ = rest.partition("/")
        path_base = URL(path_base).raw_path  # percent-encoded, as it is sent
        if not authority:
            return cls(scheme, None, None, path_base, base)
        try:
            if not slash:  # "http://h:": the port is a column
                url = URL(f"{scheme}://{authority.removesuffix(':')}/")
                return cls(scheme, (url.raw_host or "").lower(), None, path_base, base)
            url = URL(base)
            return cls(scheme, (url.raw_host or "").lower(), url.port, url.raw_path, base)
        except ValueError as exc:
            raise ValueError(f"the base {redact_url(base)!r} is not a URL ({exc})") from None

    def problem(self, url: URL, first: URL) -> str:
        """Why a request to ``url`` for an item whose first request was ``first`` leaves
        this scope, or ``""``."""
        scheme, host, port = origin = origin_of(url)
        if url is not first and origin != origin_of(first):
            return "another origin (scheme, host and port) than the item's"
        if scheme != self.scheme or (self.host is not None and host != self.host):
            return "another scheme or host than the base's"
        if self.port is not None and port != self.port:
            return "another port than the base's"
        raw = url.raw_path
        if not raw.startswith(self.path):
            return "a path outside the base's"
        return path_problem(raw[len(self.path) :], relative=True, http=True)


async def followed(
    session: aiohttp.ClientSession,
    url: str | URL,
    headers: Mapping[str, str] | None,
    *,
    shown: str,
    scope: Scope | None = None,
    allow_redirects: bool = True,
    middlewares: tuple[aiohttp.ClientMiddlewareType, ...] = (),
    request_kwargs: Mapping[str, Any] | None = None,
) -> aiohttp.ClientResponse:
    """The final response of ``GET url``, its redirects followed here one hop at a time
    (each request with ``allow_redirects=False``). The caller owns the response: ``async with
    response:`` releases it (and closes its connection if its body was not read to the end).

    - With a ``scope``, every request (the first too) is checked before it is sent: one
      outside it raises :class:`LocationError` ("a redirect to ... leaves the base").
    - A hop from ``https`` to ``http`` is refused (``LocationError``), with or without a base.
    - A hop to the first request's origin carries what the first did (``headers``, the
      request options, the URL's user info; not ``params``, which aiohttp too
      sends only once). A hop to another origin carries only :data:`SAFE_HEADERS` and
      :data:`SAFE_OPTIONS`: no session auth, session or request header, cookie, user info
      or query parameter of the caller's reaches it.
    - A location already requested (a loop), more than ``max_redirects`` hops, or a
      location that is not an ``http(s)`` URL raise an error naming ``shown``; user info in
      a ``Location`` is dropped.

    ``allow_redirects=False``: the first response is the final one. A plain coroutine, not
    an async context manager: a GET pays for no generator around it."""
    options = dict(request_kwargs or {})
    limit = int(options.pop("max_redirects", MAX_REDIRECTS))
    first = _parse(url, shown)
    current, seen, status = first, set[URL](), 0
    for hop in range(limit + 1):
        if scope is not None:
            _check_scope(scope, current, first, hop, shown)
        same = hop == 0 or origin_of(current) == origin_of(first)
        response = await session.get(
            _with_user_of(first, current) if same and hop else current,
            allow_redirects=False,
            **_hop_arguments(same, hop, headers, middlewares, options),
        )
        location = response.headers.get("Location") or None if response.status in REDIRECT_STATUSES else None
        if not allow_redirects or location is None:
            return response
        async with response:  # a hop: released here, as aiohttp releases its own redirects
            status = response.status
        target = _target(current, location, shown)
        seen.add(_bare(current))
        if target in seen:
            raise HttpStatusError(status, shown, f"a redirect loop back to {redact_url(str(target))}")
        current = target
    raise HttpStatusError(status, shown, f"more than {limit} redirects; the last to {redact_url(str(current))}")


def _hop_arguments(
    same: bool,
    hop: int,
    headers: Mapping[str, str] | None,
    middlewares: tuple[aiohttp.ClientMiddlewareType, ...],
    options: dict[str, Any],
) -> dict[str, Any]:
    """The keyword arguments of one hop's ``session.get``: everything for the item's own
    origin (``params`` on the first request only), only what cannot be a credential for
    another (and a middleware that strips the rest from the request as sent)."""
    if same:
        kwargs = options if hop == 0 else {k: v for k, v in options.items() if k != "params"}
        return {"headers": headers, "middlewares": middlewares or None, **kwargs}
    safe = {k: v for k, v in (headers or {}).items() if k.lower() in SAFE_HEADERS}
    return {
        "headers": safe,
        "middlewares": (*middlewares, _credentials_stripped),
        **{k: v for k, v in options.items() if k in SAFE_OPTIONS},
    }


async def _credentials_stripped(
    request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    """A client middleware, innermost (it sees the request as it will be sent, after the
    session merged its default headers, cookies and auth): every header but
    :data:`SAFE_HEADERS` is removed."""
    for name in {str(n) for n in request.headers}:
        if name.lower() not in SAFE_HEADERS:
            request.headers.popall(name, None)
    return await handler(request)


def _bare(url: URL) -> URL:
    return url.with_user(None).with_fragment(None)


def _with_user_of(first: URL, url: URL) -> URL:
    """``url`` with ``first``'s user info (aiohttp sends it as ``Authorization``): what a
    hop to the item's own origin carries, as aiohttp keeps it on its own redirects."""
    if first.raw_user is None and first.raw_password is None:
        return url
    return url.with_user(first.user).with_password(first.password)


def _parse(url: str | URL, shown: str) -> URL:
    if isinstance(url, URL):
        return url
    try:
        parsed = URL(url)
    except (ValueError, TypeError) as exc:
        raise LocationError(f"{shown} is not a URL that can be requested ({type(exc).__name__}); not sent") from None
    if not parsed.absolute or parsed.scheme.lower() not in ("http", "https"):
        raise LocationError(f"{shown} is not an http(s) URL with a host; not sent")
    return parsed


def _target(current: URL, location: str, shown: str) -> URL:
    """Where ``Location: location`` of a response to ``current`` points, resolved as
    aiohttp resolves it (re-quoted, relative to ``current``), without user info or fragment."""
    try:
        ref = URL(location)
        if not ref.absolute or (ref.scheme == current.scheme and not location.lower().startswith(f"{ref.scheme}://")):
            ref = current.join(ref)  # "/p", "p", "?q" and "http:p" are relative to the current URL
    except ValueError:
        raise LocationError(
            f"{shown}: a redirect to {redact_url(location)!r}, which is not a URL; not followed"
        ) from None
    if ref.scheme.lower() not in ("http", "https") or not ref.raw_host:
        raise LocationError(f"{shown}: a redirect to {redact_url(location)!r}, not an http(s) URL; not followed")
    target = ref.with_user(None).with_fragment(None)
    if current.scheme.lower() == "https" and target.scheme.lower() == "http":
        raise LocationError(f"{shown}: a redirect from https to {redact_url(str(target))} (plain http); not followed")
    return target


def _check_scope(scope: Scope, url: URL, first: URL, hop: int, shown: str) -> None:
    problem = scope.problem(url, first)
    if problem:
        what = f"a redirect to {redact_url(str(url))}" if hop else f"the request {redact_url(str(url))} of {shown}"
        raise LocationError(f"{what} leaves the base {redact_url(scope.base)!r} ({problem}); not followed")
