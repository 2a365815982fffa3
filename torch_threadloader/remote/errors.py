"""The errors of the remote datasets: typed, each naming its item's location with any
credential in it redacted."""

from __future__ import annotations

from yarl import URL

__all__ = [
    "DeadlineExceededError",
    "HttpStatusError",
    "LocationError",
    "NotFoundError",
    "ReadTimeoutError",
    "RemoteError",
    "RetriesExhaustedError",
    "TooLargeError",
    "redact_url",
]

#: Query parameters whose values are secrets (presigned URLs, API keys, tokens).
SECRET_QUERY_KEYS = frozenset(
    {
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
        "signature",
        "sig",
        "token",
        "access_token",
        "api_key",
        "apikey",
        "key",
        "password",
        "x-goog-signature",
        "x-goog-credential",
    }
)

REDACTED = "REDACTED"


def redact_url(url: str) -> str:
    """``url`` with its user info and the values of secret query parameters replaced by
    ``REDACTED``; a string with nothing to redact (or that is not a URL with a host) is
    returned as it is, unnormalised."""
    try:
        parsed = URL(url)
    except (ValueError, TypeError):
        return url
    if not parsed.host:
        return url
    secret_query = bool(parsed.query_string) and any(k.lower() in SECRET_QUERY_KEYS for k in parsed.query)
    if parsed.user is None and parsed.password is None and not secret_query:
        return url
    if parsed.user is not None or parsed.password is not None:
        parsed = parsed.with_user(REDACTED if parsed.user else None).with_password(None)
    if secret_query:
        parsed = parsed.with_query(
            [(k, REDACTED if k.lower() in SECRET_QUERY_KEYS else v) for k, v in parsed.query.items()]
        )
    return str(parsed)


class RemoteError(Exception):
    """An item could not be fetched; ``location`` is its URL or path, redacted."""

    def __init__(self, message: str, location: str) -> None:
        super().__init__(message)
        self.location = location


class HttpStatusError(RemoteError):
    """The server answered ``status`` (not retried when it is not transient); ``reason`` is
    the server's reason phrase or, for S3, its error code."""

    def __init__(self, status: int, location: str, reason: str = "") -> None:
        detail = f" {reason}" if reason else ""
        super().__init__(f"HTTP {status}{detail} for {location}", location)
        self.status = status
        self.reason = reason


class NotFoundError(HttpStatusError, FileNotFoundError):
    """A 404 (or S3's ``NoSuchKey``): never retried; also a ``FileNotFoundError``."""


class TooLargeError(RemoteError):
    """The object is over ``max_bytes``: refused from its declared size (``size``) before
    reading, or abandoned once more than ``max_bytes`` arrived (``size`` is then ``None``)."""

    def __init__(self, location: str, max_bytes: int, size: int | None) -> None:
        what = f"{size} bytes" if size is not None else "more bytes"
        super().__init__(f"{location} is {what}, over max_bytes={max_bytes}", location)
        self.max_bytes = max_bytes
        self.size = size


class RetriesExhaustedError(RemoteError):
    """Every attempt failed with a transient error; ``attempts`` made, the last one's error
    is ``last_error`` (and ``__cause__``)."""

    def __init__(self, location: str, attempts: int, last_error: BaseException) -> None:
        super().__init__(f"{location}: {attempts} attempts failed, the last with {last_error!r}", location)
        self.attempts = attempts
        self.last_error = last_error


class DeadlineExceededError(RemoteError, TimeoutError):
    """The item's total ``deadline`` passed before an attempt succeeded; also a ``TimeoutError``."""

    def __init__(self, location: str, deadline: float, attempts: int, last_error: BaseException | None) -> None:
        last = f", the last with {last_error!r}" if last_error is not None else ""
        super().__init__(f"{location}: deadline of {deadline} s passed after {attempts} attempts{last}", location)
        self.deadline = deadline
        self.attempts = attempts
        self.last_error = last_error


class ReadTimeoutError(RemoteError, TimeoutError):
    """An attempt on a synchronous filesystem passed its ``timeout``. Its read runs on a
    thread that cannot be stopped, so the item is not retried (a retry would start another
    read beside it); the read finishes on its thread, and closing the loader waits for it.
    Also a ``TimeoutError``."""

    def __init__(self, location: str, timeout: float | None) -> None:
        super().__init__(
            f"{location}: the read passed timeout={timeout} s; a synchronous filesystem's read cannot be "
            f"stopped, so it is not retried",
            location,
        )
        self.timeout = timeout


class LocationError(ValueError):
    """A location that is not allowed: it leaves its base (``..``, ``%2e%2e``, an absolute
    path from a column) or is not a string. Names the item's index."""
