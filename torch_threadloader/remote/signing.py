"""SigV4 for S3 GETs, by botocore, with what every GET of a day and region shares derived once.

botocore's ``S3SigV4Auth`` derives the signing key from the secret, the day, the region and
the service on every request (four HMACs), and works out the ``Host`` it signs from the URL
twice. :class:`GetSigner` runs botocore's signer unchanged but for two things it allows: each
HMAC of that derivation is kept (``_sign`` without ``hex``: a pure function of its key and
message), so the key is derived once per secret, day and region; and the ``Host`` of a
bucket's endpoint is given with the request (worked out once per bucket by botocore's own
``_host_from_url``), so botocore signs it as it is and the same value is sent.
"""

from __future__ import annotations

import threading
from typing import Any

from botocore.auth import S3SigV4Auth, _host_from_url
from botocore.awsrequest import AWSRequest
from botocore.config import Config

__all__ = ["GetSigner", "UNSIGNED_PAYLOAD_CONFIG", "host_of"]

#: A GET has no body to hash: botocore's S3 setting for signing it as ``UNSIGNED-PAYLOAD``
#: (which S3 accepts) spares preparing the request just to hash nothing.
UNSIGNED_PAYLOAD_CONFIG = Config(s3={"payload_signing_enabled": False})

#: Derivation steps kept at most (four per secret, day and region); past it they are dropped
#: and derived again, so rotated credentials and past days do not pile up.
MAX_KEPT_STEPS = 64


def host_of(base: str) -> str:
    """The ``Host`` botocore signs for a request to ``base`` (lower-case, the port only when it
    is not the scheme's default, an IPv6 host in brackets)."""
    host: str = _host_from_url(base)
    return host


class _DerivedKeys:
    """The HMACs of the signing key's derivation, by (key, message); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: dict[tuple[bytes, str], bytes] = {}

    def get(self, key: bytes, msg: str) -> bytes | None:
        with self._lock:
            return self._steps.get((key, msg))

    def put(self, key: bytes, msg: str, digest: bytes) -> None:
        with self._lock:
            if len(self._steps) >= MAX_KEPT_STEPS:
                self._steps.clear()
            self._steps[(key, msg)] = digest


class _KeptKeyS3SigV4Auth(S3SigV4Auth):  # type: ignore[misc]
    """botocore's S3 signer whose key derivation steps are kept in ``keys``."""

    def __init__(self, credentials: Any, region: str, keys: _DerivedKeys) -> None:
        super().__init__(credentials, "s3", region)
        self._keys = keys

    def _sign(self, key: bytes, msg: str, hex: bool = False) -> Any:
        if hex:  # the signature of one request's string to sign: never the same twice
            return super()._sign(key, msg, hex=True)
        digest = self._keys.get(key, msg)
        if digest is None:
            digest = super()._sign(key, msg)
            self._keys.put(key, msg, digest)
        return digest

    def headers_to_sign(self, request: AWSRequest) -> Any:
        # botocore reads them twice per signature (the canonical request, then the
        # Authorization header), from headers that do not change in between.
        kept = request.context.get("threadloader_headers_to_sign")
        if kept is None:
            kept = request.context["threadloader_headers_to_sign"] = super().headers_to_sign(request)
        return kept


class GetSigner:
    """Signs S3 GETs in one region with botocore's SigV4 (``S3SigV4Auth``, ``UNSIGNED-PAYLOAD``),
    the signing key derived once per secret, day and region. Thread-safe."""

    def __init__(self, region: str) -> None:
        self.region = region
        self._keys = _DerivedKeys()

    def headers(self, url: str, host: str, headers: dict[str, str], credentials: Any) -> dict[str, str]:
        """``headers`` plus ``Host`` (``host``, from :func:`host_of` of the URL's base) and
        SigV4's (``Authorization``, ``X-Amz-Date``, ...) for ``GET url`` with ``credentials``
        (botocore's frozen credentials): what botocore's ``S3SigV4Auth`` makes for it."""
        request = AWSRequest(method="GET", url=url, headers={"host": host, **headers})
        request.context["client_config"] = UNSIGNED_PAYLOAD_CONFIG
        _KeptKeyS3SigV4Auth(credentials, self.region, self._keys).add_auth(request)
        return dict(request.headers.raw_items())  # as set: items() re-parses each one
