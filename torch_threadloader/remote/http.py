"""``HttpDataset``: items fetched with aiohttp, many at a time on one event loop; and the
one GET that ``S3Dataset`` shares."""

from __future__ import annotations

import inspect
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import aiohttp
from yarl import URL

from torch_threadloader.remote.dataset import DEFAULT_TIMEOUT, RemoteDataset
from torch_threadloader.remote.errors import HttpStatusError, LocationError, NotFoundError, TooLargeError, redact_url
from torch_threadloader.remote.locations import LocationsArg
from torch_threadloader.remote.per_loop import PerLoop
from torch_threadloader.remote.ranges import read_range
from torch_threadloader.remote.redirects import Scope, followed
from torch_threadloader.remote.retry import TRANSIENT_STATUSES, Retry, Transient, parse_retry_after

__all__ = ["CHUNK_BYTES", "HttpDataset", "get_body", "make_session"]

#: Bytes read at a time when a body is streamed against ``max_bytes``.
CHUNK_BYTES = 64 * 1024

Headers = Mapping[str, str] | Callable[[str], Mapping[str, str] | Awaitable[Mapping[str, str]]] | None
#: Turns a non-transient error status into the exception to raise (S3 reads its error code).
StatusError = Callable[[aiohttp.ClientResponse, str], Awaitable[BaseException]]


def make_session(max_connections: int | None, ssl_context: ssl.SSLContext | None = None) -> aiohttp.ClientSession:
    """A keep-alive session whose connector holds at most ``max_connections`` connections
    (``None``: as many as there are requests in flight, which the loader bounds). Timeouts
    are the dataset's, per attempt, so the session has none of its own.

    Bodies are returned as sent: it asks for ``Accept-Encoding: identity`` and never
    decompresses (``auto_decompress=False``), so an item is the object's stored bytes (an
    S3 object stored gzipped is its gzip bytes, as botocore returns it) and ``max_bytes`` and
    ``byte_range`` count those bytes, never an inflated body. ``ssl_context``: how TLS is
    verified (``None``: aiohttp's default, the system's certificates)."""
    limit = 0 if max_connections is None else max_connections
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, limit_per_host=limit, ssl=ssl_context or True),
        timeout=aiohttp.ClientTimeout(total=None),
        auto_decompress=False,
        headers={"Accept-Encoding": "identity"},
    )


async def default_status_error(response: aiohttp.ClientResponse, shown: str) -> BaseException:
    cls = NotFoundError if response.status == 404 else HttpStatusError
    return cls(response.status, shown, response.reason or "")


async def get_body(
    session: aiohttp.ClientSession,
    url: str | URL,
    headers: Mapping[str, str] | None,
    *,
    shown: str,
    max_bytes: int | None,
    byte_range: tuple[int, int] | None,
    status_error: StatusError = default_status_error,
    middlewares: tuple[aiohttp.ClientMiddlewareType, ...] = (),
    allow_redirects: bool = True,
    request_kwargs: Mapping[str, Any] | None = None,
    scope: Scope | None = None,
) -> bytes:
    """One GET: the body's bytes (with ``byte_range``, exactly that range's, or
    :class:`~torch_threadloader.remote.ranges.RangeError`: see
    :func:`~torch_threadloader.remote.ranges.read_range`), within ``max_bytes``.

    Transient failures (connection errors, a body cut short, statuses in
    ``TRANSIENT_STATUSES`` with their ``Retry-After``) raise ``Transient``; another status
    of 300 or more once redirects are followed (a 3xx without ``Location``, or any 3xx with
    ``allow_redirects=False``) raises ``await status_error(response, shown)``; a body over
    ``max_bytes`` raises ``TooLargeError``, from an unencoded body's ``Content-Length``
    before reading, or after at most ``max_bytes`` plus one chunk. Redirects are followed
    one hop at a time by :func:`~torch_threadloader.remote.redirects.followed`: each checked against
    ``scope`` (a base) before it is sent, and a hop to another origin than the URL's
    carries no credential (``headers`` but ``Range``, session auth and headers, cookies,
    ``params``). Errors name ``shown`` and keep no
    aiohttp error that holds the raw URL. Leaving early (an error, a cancellation) closes
    the connection of an unfinished response, so the server sees the disconnect."""
    if byte_range is not None:  # not a secret: kept on every redirect
        headers = {**(headers or {}), "Range": f"bytes={byte_range[0]}-{byte_range[1] - 1}"}
    try:
        response = await followed(
            session,
            url,
            headers,
            shown=shown,
            scope=scope,
            allow_redirects=allow_redirects,
            middlewares=middlewares,
            request_kwargs=request_kwargs,
        )
        async with response:  # released on the way out; an unread body closes its connection
            return await _read_response(response, shown, max_bytes, byte_range, status_error)
    except aiohttp.ClientSSLError:
        raise  # a certificate or TLS failure does not pass by retrying
    except aiohttp.ServerFingerprintMismatch:
        raise  # a pinned certificate that does not match: a security failure, never retried
    except aiohttp.InvalidURL as exc:  # a redirect to a URL aiohttp cannot follow
        raise LocationError(f"{shown}: {type(exc).__name__} for {redact_url(str(exc.url))}") from None
    except aiohttp.ClientResponseError as exc:  # too many redirects, a bad redirect: its text has the raw URL
        raise HttpStatusError(exc.status, shown, f"{type(exc).__name__}: {exc.message}") from None
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
        raise Transient(f"{type(exc).__name__} for {shown}: {exc}") from exc


async def _read_response(
    response: aiohttp.ClientResponse,
    shown: str,
    max_bytes: int | None,
    byte_range: tuple[int, int] | None,
    status_error: StatusError,
) -> bytes:
    """The body of the final response of :func:`get_body`, or the error its status says."""
    status = response.status
    if status in TRANSIENT_STATUSES:
        raise Transient(
            f"HTTP {status} {response.reason or ''} for {shown}".rstrip(),
            parse_retry_after(response.headers.get("Retry-After")),
        )
    if status >= 300:
        raise await status_error(response, shown)
    if byte_range is not None:  # exactly the range's bytes, whatever the server sent
        return await read_range(response, byte_range, max_bytes, shown)
    if max_bytes is None:
        return await response.read()
    declared = response.content_length
    if declared is not None and "Content-Encoding" not in response.headers:
        if declared > max_bytes:
            raise TooLargeError(shown, max_bytes, declared)
        # aiohttp reads exactly Content-Length bytes of a body it does not decode (fewer is a
        # payload error): at most max_bytes, read in one piece, no chunks to join.
        body = await response.read()
    else:  # no length, or an encoding a session may decode (fsspec's does): counted as read
        body = await _read_upto(response, max_bytes, max_bytes, shown)
    if len(body) > max_bytes:
        raise TooLargeError(shown, max_bytes, len(body))
    return body


async def _read_upto(response: aiohttp.ClientResponse, limit: int, max_bytes: int | None, shown: str) -> bytes:
    """The body, read a chunk at a time until it ends or passes ``limit`` bytes: then, with
    ``max_bytes``, ``TooLargeError``; without, the bytes read so far (a prefix). The rest is
    never read: releasing the response closes its connection."""
    parts: list[bytes] = []
    total = 0
    async for chunk in response.content.iter_chunked(CHUNK_BYTES):
        parts.append(chunk)
        total += len(chunk)
        if max_bytes is None and total >= limit:
            break
        if total > limit:
            raise TooLargeError(shown, limit, None)
    return b"".join(parts)


async def _close_session(session: aiohttp.ClientSession) -> None:
    await session.close()


class HttpDataset(RemoteDataset):
    """Item ``i`` is the body of ``GET locations[i]`` (bytes), fetched with aiohttp.

    One ``aiohttp.ClientSession`` (keep-alive) per event loop, made on the loop at its first
    request: with ThreadLoader that is one per loader, on its loop, closed by :meth:`aclose`
    when the loader closes. ``max_connections`` caps its connections (``None``: one per
    request in flight, which the loader bounds). ``headers``: a mapping sent with every
    request, or a function of the URL returning one (or an awaitable of one), called for
    every attempt (a token refresh goes there) on the event loop: a function that blocks
    holds up every request in flight, so make a slow one async.

    Redirects are followed one hop at a time, each checked before it is sent: with a base (a
    template's, or ``base=``), one that leaves the item's origin or the base's path is
    refused (``LocationError``); ``https`` to ``http``, loops and more than 10 hops are
    errors. ``headers`` and every other credential (user info, cookies) go to the item's
    origin only: a hop elsewhere carries none (see docs/remote.md). A 3xx left after
    redirects raises :class:`HttpStatusError`. An item is the body as sent, never
    decompressed (see :func:`make_session`).

    Errors: a 404 raises :class:`NotFoundError` (a ``FileNotFoundError``) at once, another
    4xx :class:`HttpStatusError`, both with the status and the redacted URL; transient
    failures are retried (see :class:`Retry`) and then raise
    :class:`RetriesExhaustedError`. Other arguments: see :class:`RemoteDataset`.
    Cancelling an item (``break``, a loader ``timeout``, ``close()``) closes its request."""

    def __init__(
        self,
        locations: LocationsArg,
        *,
        length: int | None = None,
        columns: Mapping[str, Sequence[Any]] | None = None,
        base: str | None = None,
        headers: Headers = None,
        retry: Retry | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        deadline: float | None = None,
        max_bytes: int | None = None,
        byte_range: tuple[int, int] | None = None,
        max_connections: int | None = None,
    ) -> None:
        super().__init__(
            locations,
            length=length,
            columns=columns,
            base=base,
            retry=retry,
            timeout=timeout,
            deadline=deadline,
            max_bytes=max_bytes,
            byte_range=byte_range,
        )
        if headers is not None and not callable(headers) and not isinstance(headers, Mapping):
            raise TypeError(f"headers must be a mapping, a function of the URL or None, got {type(headers).__name__}")
        self.headers = headers
        if max_connections is not None and (
            isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1
        ):
            raise ValueError(f"max_connections must be an int >= 1 or None, got {max_connections!r}")
        self.max_connections = max_connections
        self._init_clients()

    def _init_clients(self) -> None:
        self._sessions = PerLoop(lambda: make_session(self.max_connections), _close_session)
        self._scope = Scope.of_base(self.locations.base, self.locations.path_base)

    async def _fetch(self, location: str, shown: str, timeout: float | None) -> bytes:
        headers = self.headers
        if callable(headers):
            made = headers(location)
            headers = await made if inspect.isawaitable(made) else made
        return await get_body(
            self._sessions.get(),
            location,
            headers,
            shown=shown,
            max_bytes=self.max_bytes,
            byte_range=self.byte_range,
            scope=self._scope,
        )

    async def aclose(self) -> None:
        """Close the running loop's session and its connections; idempotent."""
        await self._sessions.aclose()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_sessions"], state["_scope"]  # sessions belong to loops of this process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_clients()
