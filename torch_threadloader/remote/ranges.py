"""Ranged reads that return exactly the bytes asked for: a server's ``206`` is checked
against its ``Content-Range``, a ``200`` is cut, and nothing past the range is read."""

from __future__ import annotations

import re
from dataclasses import dataclass

import aiohttp

from torch_threadloader.remote.errors import RemoteError, TooLargeError

__all__ = ["ContentRange", "RangeError", "check_range_length", "parse_content_range", "read_range"]

#: Bytes read at a time (as ``http.CHUNK_BYTES``).
_CHUNK = 64 * 1024

#: RFC 9110 section 14.4: ``bytes first-last/complete`` (``complete`` may be ``*``).
_CONTENT_RANGE = re.compile(r"bytes[ \t]+(\d+)-(\d+)/(\d+|\*)", re.ASCII)


class RangeError(RemoteError):
    """The server's answer to a ranged read is not the range asked for (a ``206`` whose
    ``Content-Range`` is missing, malformed, or does not hold the range; a body longer or
    shorter than it declared; an object that ends before the range starts). Never retried:
    the same server gives the same answer."""


@dataclass(frozen=True)
class ContentRange:
    """A parsed ``Content-Range``: bytes ``first`` to ``last`` (inclusive) of an object of
    ``complete`` bytes (``None``: the server does not know)."""

    first: int
    last: int
    complete: int | None


def parse_content_range(value: str | None) -> ContentRange | None:
    """``Content-Range: bytes first-last/complete`` as a :class:`ContentRange`; ``None`` when
    it is absent, malformed or inconsistent (``last < first``, or ``last`` not inside the
    ``complete`` length)."""
    if value is None:
        return None
    match = _CONTENT_RANGE.fullmatch(value.strip())
    if match is None:
        return None
    first, last = int(match[1]), int(match[2])
    complete = None if match[3] == "*" else int(match[3])
    if last < first or (complete is not None and last >= complete):
        return None
    return ContentRange(first, last, complete)


async def read_range(
    response: aiohttp.ClientResponse, byte_range: tuple[int, int], max_bytes: int | None, shown: str
) -> bytes:
    """Bytes ``start`` to ``stop - 1`` of the object, from ``response`` (a ``200`` or ``206``
    to a GET with ``Range: bytes=start-(stop-1)``), or :class:`RangeError` naming ``shown``.

    A ``206`` is read where its ``Content-Range`` says the bytes are: it must start at or
    before ``start`` and reach ``stop - 1`` (or the object's end, when it declares the
    object's length); a server that sends aligned blocks or ignores the range's end is read
    only up to ``stop`` and cut, one that sends its declared range is read one byte past it
    to see a body longer than declared. A ``200`` (the whole object) is read up to ``stop``
    and cut. A result over ``max_bytes`` raises :class:`TooLargeError` (from the
    ``Content-Range`` before reading, when it is there). The rest of a body is never read:
    releasing the response closes its connection."""
    start, stop = byte_range
    if response.status == 206:
        return await _read_partial(response, start, stop, max_bytes, shown)
    limit = stop if max_bytes is None else min(stop, start + max_bytes + 1)
    body = await _read_at_most(response, limit)
    if len(body) <= start:
        raise RangeError(
            f"{shown}: the server sent the whole object ({len(body)} bytes, status {response.status}), which "
            f"ends before byte_range={byte_range} starts",
            shown,
        )
    return _within(body[start:], max_bytes, shown)


async def _read_partial(
    response: aiohttp.ClientResponse, start: int, stop: int, max_bytes: int | None, shown: str
) -> bytes:
    header = response.headers.get("Content-Range")
    sent = parse_content_range(header)
    asked = f"bytes {start}-{stop - 1}"
    if sent is None:
        raise RangeError(f"{shown}: a 206 with Content-Range {header!r}, not a valid one; asked for {asked}", shown)
    # The object ends before ``stop`` only if the server says how long it is.
    end = stop if sent.complete is None else min(stop, sent.complete)
    if sent.first > start or sent.last + 1 < end:
        raise RangeError(f"{shown}: a 206 with Content-Range {header!r} does not hold the {asked} asked for", shown)
    declared = sent.last + 1 - sent.first
    if response.content_length is not None and response.content_length != declared:
        raise RangeError(
            f"{shown}: a 206 whose Content-Length {response.content_length} is not its Content-Range {header!r}",
            shown,
        )
    if max_bytes is not None and end - start > max_bytes:
        raise TooLargeError(shown, max_bytes, end - start)
    want = end - sent.first
    exact = sent.last + 1 == end  # the range sent ends where ours does: one byte more is excess
    body = await _read_at_most(response, want + 1 if exact else want)
    if len(body) > want:
        raise RangeError(f"{shown}: a 206 whose body is longer than its Content-Range {header!r}", shown)
    if len(body) < want:
        raise RangeError(
            f"{shown}: a 206 whose body ends after {len(body)} bytes, short of its Content-Range {header!r}", shown
        )
    return body[start - sent.first :]


async def _read_at_most(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body's first ``limit`` bytes (fewer if it ends first); nothing more is taken
    from the response's stream."""
    parts: list[bytes] = []
    left = limit
    while left > 0:
        chunk = await response.content.read(min(left, _CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _within(body: bytes, max_bytes: int | None, shown: str) -> bytes:
    if max_bytes is not None and len(body) > max_bytes:
        raise TooLargeError(shown, max_bytes, None)
    return body


def check_range_length(body: bytes, byte_range: tuple[int, int] | None, shown: str) -> bytes:
    """``body``, the answer of a filesystem asked for ``byte_range``: :class:`RangeError`
    when it is longer than the range (a server that ignored the range's end, or sent an
    aligned block). Shorter is allowed: the object ends inside the range."""
    if byte_range is not None and len(body) > byte_range[1] - byte_range[0]:
        raise RangeError(
            f"{shown}: {len(body)} bytes came back for byte_range={byte_range} "
            f"({byte_range[1] - byte_range[0]} bytes at most): the server did not keep to the range",
            shown,
        )
    return body
