"""The errors of the remote datasets: typed, each naming its item's location with any
credential in it redacted."""

from __future__ import annotations

import re

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

#: Query parameters whose values are secrets (presigned URLs, API keys, tokens), compared
#: lower-cased with ``-`` read as ``_``. Any key naming a credential is one too: see
#: :data:`SECRET_KEY_PARTS` and :data:`SECRET_KEY_PREFIXES`.
SECRET_QUERY_KEYS = frozenset(
    {
        "x_amz_signature",
        "x_amz_credential",
        "x_amz_security_token",
        "signature",
        "sig",
        "token",
        "access_token",
        "api_key",
        "apikey",
        "key",
        "password",
        "x_goog_signature",
        "x_goog_credential",
        "code",
        "pwd",
        "passwd",
        "jwt",
    }
)
#: A query key containing one of these (lower-cased, ``-`` read as ``_``) is a secret:
#: ``client_secret``, ``private_token``, ``api-key``, ``sessionid``, ``X-Auth``.
SECRET_KEY_PARTS = (
    "token",
    "secret",
    "passw",
    "signature",
    "credential",
    "auth",
    "session",
    "apikey",
    "api_key",
    "access_key",
    "accesskey",
    "private_key",
    "privatekey",
    "_key",
    "key_",
    "_sig",
    "sig_",
)
#: Query keys of signing schemes: every one of them is redacted (``X-Amz-Date`` too).
SECRET_KEY_PREFIXES = ("x_amz_", "x_goog_")
#: Keys that make a URL presigned (AWS SigV4 and SigV2, Google, Azure SAS): its whole query
#: is a bearer credential, so all of it is redacted.
PRESIGNED_KEYS = frozenset({"x_amz_credential", "x_amz_algorithm", "x_goog_credential", "x_goog_algorithm"})
PRESIGNED_PAIRS = (
    (frozenset({"awsaccesskeyid", "signature"})),
    frozenset({"googleaccessid", "signature"}),
    frozenset({"sv", "sig"}),
)

REDACTED = "REDACTED"
#: What user info (``@``), a query (``?``) or a fragment (``#``) needs: without one of
#: them a URL has nothing to redact.
_MAY_HOLD_SECRET = re.compile(r"[@?#]")


def is_secret_key(key: str) -> bool:
    """Whether a query (or fragment) parameter named ``key`` holds a credential."""
    k = key.lower().replace("-", "_")
    return k in SECRET_QUERY_KEYS or k.startswith(SECRET_KEY_PREFIXES) or any(p in k for p in SECRET_KEY_PARTS)


def _is_presigned(keys: set[str]) -> bool:
    return bool(keys & PRESIGNED_KEYS) or any(pair <= keys for pair in PRESIGNED_PAIRS)


def redact_url(url: str) -> str:
    """``url`` with its user info and the values of secret query parameters replaced by
    ``REDACTED``, and the whole query of a presigned URL (AWS, Google, Azure SAS); a string
    with nothing to redact (or that is not a URL with a host) is returned as it is,
    unnormalised.

    It fails closed: a URL that ``yarl`` cannot parse (a port out of range, a bad host) has
    everything between ``//`` and its last ``@`` and everything after its first ``?`` or
    ``#`` replaced, never returned as it is.

    A string without ``@``, ``?`` and ``#`` can hold neither user info nor a query or
    fragment: it is returned as it is without being parsed (every item's location passes
    here, so the common case costs one scan, not a URL parse)."""
    if not _MAY_HOLD_SECRET.search(url):
        return url
    try:
        return _redact_parsed(url)
    except (ValueError, TypeError, UnicodeError):
        return _redact_unparsed(url)


def _redact_parsed(url: str) -> str:
    parsed = URL(url)
    if not parsed.host:
        return _redact_unparsed(url) if "://" in url else url
    keys = {k.lower().replace("-", "_") for k in parsed.query}
    presigned = _is_presigned(keys)
    secret_query = presigned or any(is_secret_key(k) for k in parsed.query)
    secret_fragment = "=" in parsed.fragment and any(
        is_secret_key(part.partition("=")[0]) for part in parsed.fragment.split("&")
    )
    has_user = parsed.raw_user is not None or parsed.raw_password is not None
    if not (has_user or secret_query or secret_fragment):
        return url
    if has_user:
        parsed = parsed.with_user(REDACTED if parsed.raw_user else None).with_password(None)
    if presigned:
        parsed = parsed.with_query(REDACTED)
    elif secret_query:
        parsed = parsed.with_query([(k, REDACTED if is_secret_key(k) else v) for k, v in parsed.query.items()])
    if secret_fragment:
        parsed = parsed.with_fragment(REDACTED)
    return str(parsed)


def _redact_unparsed(url: str) -> str:
    """A URL that does not parse, redacted by its text alone: whatever could be user info
    (between ``//`` and the last ``@``) and whatever could be a query or fragment."""
    slashes = url.find("//")
    at = url.rfind("@")
    if 0 <= slashes < at:
        url = f"{url[: slashes + 2]}{REDACTED}{url[at:]}"
    cut = min((i for i in (url.find("?"), url.find("#")) if i >= 0), default=-1)
    if cut >= 0:
        url = f"{url[: cut + 1]}{REDACTED}"
    return url


class RemoteError(Exception):
    """An item could not be fetched; ``location`` is its URL or path, redacted.

    Every remote error can also be built from its message alone (``cls(message)``, as torch's
    ``ExceptionWrapper.reraise()`` rebuilds an error): its fields are then ``None``."""

    def __init__(self, message: str, location: str | None = None) -> None:
        super().__init__(message)
        self.location = location


class HttpStatusError(RemoteError):
    """The server answered ``status`` (not retried when it is not transient); ``reason`` is
    the server's reason phrase or, for S3, its error code."""

    status: int | None

    def __init__(self, status: int | str, location: str | None = None, reason: str = "") -> None:
        self.reason = reason
        if isinstance(status, str):  # the message alone
            super().__init__(status)
            self.status = None
            return
        detail = f" {reason}" if reason else ""
        super().__init__(f"HTTP {status}{detail} for {location}", location)
        self.status = status


class NotFoundError(HttpStatusError, FileNotFoundError):
    """A 404 (or S3's ``NoSuchKey``): never retried; also a ``FileNotFoundError``."""


class TooLargeError(RemoteError):
    """The object is over ``max_bytes``: refused from its declared size (``size``) before
    reading, or abandoned once more than ``max_bytes`` arrived (``size`` is then ``None``)."""

    def __init__(self, location: str, max_bytes: int | None = None, size: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.size = size
        if max_bytes is None:  # the message alone
            super().__init__(location)
            return
        what = f"{size} bytes" if size is not None else "more bytes"
        super().__init__(f"{location} is {what}, over max_bytes={max_bytes}", location)


class RetriesExhaustedError(RemoteError):
    """Every attempt failed with a transient error; ``attempts`` made, the last one's error
    is ``last_error`` (and ``__cause__``)."""

    def __init__(self, location: str, attempts: int | None = None, last_error: BaseException | None = None) -> None:
        self.attempts = attempts
        self.last_error = last_error
        if attempts is None:  # the message alone
            super().__init__(location)
            return
        super().__init__(f"{location}: {attempts} attempts failed, the last with {last_error!r}", location)


class DeadlineExceededError(RemoteError, TimeoutError):
    """The item's total ``deadline`` passed before an attempt succeeded; also a ``TimeoutError``."""

    def __init__(
        self,
        location: str,
        deadline: float | None = None,
        attempts: int | None = None,
        last_error: BaseException | None = None,
    ) -> None:
        self.deadline = deadline
        self.attempts = attempts
        self.last_error = last_error
        if deadline is None:  # the message alone
            super().__init__(location)
            return
        last = f", the last with {last_error!r}" if last_error is not None else ""
        super().__init__(f"{location}: deadline of {deadline} s passed after {attempts} attempts{last}", location)


class ReadTimeoutError(RemoteError, TimeoutError):
    """An attempt on a synchronous filesystem passed its ``timeout``. Its read runs on a
    thread that cannot be stopped, so the item is not retried (a retry would start another
    read beside it); the read finishes on its thread, and closing the loader waits for it.
    Also a ``TimeoutError``."""

    def __init__(self, location: str, *timeout: float | None) -> None:
        if not timeout:  # the message alone
            super().__init__(location)
            self.timeout: float | None = None
            return
        (self.timeout,) = timeout
        super().__init__(
            f"{location}: the read passed timeout={self.timeout} s; a synchronous filesystem's read cannot be "
            f"stopped, so it is not retried",
            location,
        )


class LocationError(ValueError):
    """A location that is not allowed: it leaves its base (``..``, ``%2e%2e``, an absolute
    path from a column) or is not a string. Names the item's index."""
