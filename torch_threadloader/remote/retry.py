"""Retries of transient failures: exponential backoff with jitter, ``Retry-After``, a
per-attempt timeout and a total deadline per item."""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from torch_threadloader.remote.errors import DeadlineExceededError, ReadTimeoutError, RetriesExhaustedError

__all__ = ["Retry", "TRANSIENT_STATUSES", "Transient", "parse_retry_after", "with_retries"]

T = TypeVar("T")

#: HTTP statuses retried: request timeout, too many requests, and the server-side 5xx that pass.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Retry:
    """How transient failures are retried: at most ``max_retries`` retries after the first
    attempt; before retry ``k`` (0-based) a wait of ``min(max_backoff, initial_backoff * 2**k)``
    seconds, less a random fraction of at most ``jitter`` of it (``jitter=0``: exact waits).
    A server's ``Retry-After`` (seconds or an HTTP date) replaces the backoff, capped by
    ``max_backoff``. Only transient failures are retried (connection errors, timeouts, a body
    cut short, statuses in :data:`TRANSIENT_STATUSES`); others are raised at once."""

    max_retries: int = 3
    initial_backoff: float = 0.1
    max_backoff: float = 10.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int) or self.max_retries < 0:
            raise ValueError(f"Retry(max_retries=) must be an int >= 0, got {self.max_retries!r}")
        for name in ("initial_backoff", "max_backoff"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"Retry({name}=) must be a finite number >= 0, got {value!r}")
        if not isinstance(self.jitter, (int, float)) or not 0 <= self.jitter <= 1:
            raise ValueError(f"Retry(jitter=) must be between 0 and 1, got {self.jitter!r}")

    def backoff(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number ``retry`` (0-based)."""
        if retry_after is not None:
            return min(self.max_backoff, max(0.0, retry_after))
        wait = min(self.max_backoff, self.initial_backoff * 2.0 ** min(retry, _MAX_DOUBLINGS))
        return wait * (1.0 - self.jitter * random.random())


#: Doublings past this change no wait (2**64 times any backoff passes any cap) and would
#: overflow a float near 1024.
_MAX_DOUBLINGS = 64


class Transient(Exception):
    """Raised by an attempt for a failure worth retrying; ``retry_after`` is the server's
    ``Retry-After`` in seconds, if it sent one. Its ``__cause__`` or message says what failed."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header as seconds from now: delta-seconds or an HTTP date (RFC 9110);
    ``None`` when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # not "²", which isdigit() accepts and float() refuses
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = datetime.now(UTC).timestamp() if now is None else now
    return max(0.0, when.timestamp() - current)


async def with_retries(
    attempt: Callable[[float | None], Awaitable[T]],
    *,
    retry: Retry,
    timeout: float | None,
    deadline: float | None,
    location: str,
    retry_timeouts: bool = True,
) -> T:
    """``await attempt(attempt_timeout)`` until it returns, retrying when it raises
    :class:`Transient` (or a ``TimeoutError`` of its own timeout) as ``retry`` says.
    ``retry_timeouts=False``: an attempt that passes ``timeout`` raises
    :class:`ReadTimeoutError` at once (its work cannot be stopped, so none is started beside it).

    Each attempt gets ``timeout`` seconds, less when ``deadline`` (seconds for the whole item)
    would pass first. Raises :class:`RetriesExhaustedError` (attempts and the last cause),
    :class:`DeadlineExceededError`, or at once any other exception of ``attempt``."""
    start = time.monotonic()
    last: BaseException | None = None
    attempts = 0
    while True:
        remaining = None if deadline is None else deadline - (time.monotonic() - start)
        if remaining is not None and remaining <= 0:
            raise DeadlineExceededError(location, deadline, attempts, last) from last
        limit = remaining if timeout is None else timeout if remaining is None else min(timeout, remaining)
        attempts += 1
        retry_after: float | None = None
        try:
            async with asyncio.timeout(limit):
                return await attempt(limit)
        except Transient as exc:
            last, retry_after = exc, exc.retry_after
        except TimeoutError as exc:
            # Our own asyncio.timeout, or the client's timeout: both are transient.
            if not retry_timeouts:
                raise ReadTimeoutError(location, limit) from exc
            last = exc
        if attempts > retry.max_retries:
            raise RetriesExhaustedError(location, attempts, last) from last
        wait = retry.backoff(attempts - 1, retry_after)
        if deadline is not None and time.monotonic() - start + wait >= deadline:
            raise DeadlineExceededError(location, deadline, attempts, last) from last
        await asyncio.sleep(wait)
