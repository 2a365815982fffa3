"""``S3Dataset``: S3 GETs signed by botocore (SigV4) and sent on the loop's aiohttp session;
s3fs lists prefixes."""

from __future__ import annotations

import asyncio
import ssl
import threading
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import botocore.session
from botocore import UNSIGNED
from botocore.config import Config
from yarl import URL

import datapipes as dp
from torch_threadloader.remote.dataset import DEFAULT_TIMEOUT, RemoteDataset
from torch_threadloader.remote.errors import HttpStatusError, NotFoundError
from torch_threadloader.remote.http import get_body, make_session
from torch_threadloader.remote.locations import LocationsArg
from torch_threadloader.remote.per_loop import PerLoop
from torch_threadloader.remote.retry import Retry
from torch_threadloader.remote.signing import GetSigner, host_of

__all__ = ["S3Dataset", "split_s3_url"]

#: S3 error codes that mean the object (or bucket) is not there.
NOT_FOUND_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "NotFound"})


def split_s3_url(location: str) -> tuple[str, str]:
    """``("bucket", "key")`` of ``s3://bucket/key``; ``ValueError`` naming it otherwise."""
    if not location.startswith("s3://"):
        raise ValueError(f"an S3 location must start with s3://, got {location!r}")
    bucket, _, key = location[5:].partition("/")
    if not bucket or not key:
        raise ValueError(f"an S3 location must be s3://bucket/key, got {location!r}")
    return bucket, key


class _Client:
    """What botocore resolved once: the signing region and its signer, the credentials
    (refreshed by botocore before they expire), and each bucket's base URL (its addressing
    style and endpoint, as botocore's client builds it) with the ``Host`` it is signed for."""

    def __init__(self, session: Any, region: str | None, endpoint_url: str | None, anon: bool) -> None:
        # The client only builds URLs (addressing style, endpoint): unsigned, so it never
        # touches the credentials (a refresh there would run on the event loop).
        config = Config(signature_version=UNSIGNED)
        self.client = session.create_client("s3", region_name=region, endpoint_url=endpoint_url, config=config)
        self.region: str = self.client.meta.region_name
        self.signer = GetSigner(self.region)
        self.credentials = None if anon else session.get_credentials()
        if not anon and self.credentials is None:
            raise RuntimeError(
                "S3Dataset: botocore found no AWS credentials (environment, ~/.aws, container or instance "
                "role); configure them, or pass anon=True for a public bucket"
            )
        # botocore's CA bundle (AWS_CA_BUNDLE, ca_bundle in ~/.aws/config): TLS is verified against it.
        ca_bundle = session.get_config_variable("ca_bundle")
        self.ssl_context = ssl.create_default_context(cafile=ca_bundle) if ca_bundle else None
        self.lock = threading.Lock()
        self.bases: dict[str, tuple[str, str]] = {}

    def base(self, bucket: str) -> tuple[str, str]:
        """The URL of ``bucket``'s objects, ending in ``/`` (the client's presigned URL of a
        key, less the key and the query), and the ``Host`` its requests are signed for."""
        with self.lock:
            found = self.bases.get(bucket)
        if found is None:
            url = self.client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
            parts = urlsplit(url)
            assert parts.path.endswith("/k"), url
            base = f"{parts.scheme}://{parts.netloc}{parts.path[:-1]}"
            found = (base, host_of(base))
            with self.lock:
                self.bases[bucket] = found
        return found

    def refresh_needed(self) -> bool:
        """True when botocore is about to refresh the credentials (network I/O: do it on a thread)."""
        refresh_needed = getattr(self.credentials, "refresh_needed", None)
        return bool(refresh_needed()) if refresh_needed is not None else False

    def frozen(self) -> Any:
        """The credentials now, refreshed by botocore if they are about to expire."""
        assert self.credentials is not None
        return self.credentials.get_frozen_credentials()

    def signed_headers(self, url: str, host: str, headers: dict[str, str], frozen: Any) -> dict[str, str]:
        """``headers`` plus SigV4's (``Host``, ``Authorization``, ``X-Amz-Date``, ...) for a GET
        of ``url`` (``host``: its base's, from :meth:`base`); unsigned without ``frozen``."""
        if frozen is None:
            return headers
        return self.signer.headers(url, host, headers, frozen)


class S3Dataset(RemoteDataset):
    """Item ``i`` is the object at ``locations[i]`` (``s3://bucket/key``), as bytes.

    Credentials, region and endpoint are resolved by botocore as s3fs and boto3 resolve them
    (environment, ``~/.aws``, ``profile``, roles; ``region``, ``endpoint_url`` override), at
    the first request, on a thread. Each GET is signed with botocore's SigV4
    (``S3SigV4Auth``; refreshable credentials are refreshed by botocore before expiry) and sent
    on the loop's aiohttp session, like :class:`HttpDataset`'s; ``anon=True`` sends unsigned
    requests. ``botocore_session``: a ``botocore.session.Session`` to resolve with instead
    (such a dataset cannot be pickled: pickling raises ``TypeError`` naming the argument).
    TLS is verified against botocore's CA bundle (``AWS_CA_BUNDLE``, ``ca_bundle``) when it
    names one, else the system's certificates.

    Errors: ``NoSuchKey`` (404) raises :class:`NotFoundError` (a ``FileNotFoundError``) at
    once; another error status raises :class:`HttpStatusError` whose ``reason`` is S3's code
    and message (a bad credential: ``InvalidAccessKeyId``, ``SignatureDoesNotMatch``), never
    retried; throttling (``503 SlowDown``) and 5xx are retried with ``retry``. Redirects are
    not followed: a 3xx (``PermanentRedirect``: a wrong region or endpoint) raises
    :class:`HttpStatusError` with S3's code. An item is the object's stored bytes (an object
    stored gzipped is its gzip bytes). botocore's proxy settings are not applied.
    ``byte_range=(start, stop)`` reads part of each object. Use :meth:`from_prefix` to list.
    Other arguments: see :class:`RemoteDataset`."""

    def __init__(
        self,
        locations: LocationsArg,
        *,
        length: int | None = None,
        columns: Mapping[str, Sequence[Any]] | None = None,
        base: str | None = None,
        region: str | None = None,
        endpoint_url: str | None = None,
        profile: str | None = None,
        anon: bool = False,
        botocore_session: Any = None,
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
        self.region = region
        self.endpoint_url = endpoint_url
        self.profile = profile
        self.anon = bool(anon)
        self.botocore_session = botocore_session
        if max_connections is not None and (
            isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1
        ):
            raise ValueError(f"max_connections must be an int >= 1 or None, got {max_connections!r}")
        self.max_connections = max_connections
        self._init_clients()

    def _init_clients(self) -> None:
        self._lock = threading.Lock()
        self._resolved: list[_Client] = []  # the client once resolved; shared by a loader's worker copies
        self._sessions = PerLoop(self._make_session, _close_session)

    @property
    def _client(self) -> _Client | None:
        resolved = self._resolved
        return resolved[0] if resolved else None

    def _make_session(self) -> aiohttp.ClientSession:
        """The loop's session (made after the first resolution, so with botocore's CA bundle)."""
        client = self._client
        return make_session(self.max_connections, client.ssl_context if client is not None else None)

    def _resolve(self) -> _Client:
        with self._lock:  # one resolution, however many requests ask at once
            if not self._resolved:
                session = self.botocore_session or botocore.session.Session(profile=self.profile)
                self._resolved.append(_Client(session, self.region, self.endpoint_url, self.anon))
            return self._resolved[0]

    async def _fetch(self, location: str, shown: str, timeout: float | None) -> bytes:
        client = self._client
        if client is None:
            client = await asyncio.to_thread(self._resolve)
        bucket, key = split_s3_url(location)
        base, host = client.base(bucket)
        url = base + quote(key, safe="/~")
        headers: dict[str, str] = {}
        if self.byte_range is not None:
            headers["Range"] = f"bytes={self.byte_range[0]}-{self.byte_range[1] - 1}"
        frozen = None
        if client.credentials is not None:
            # A refresh (STS, instance metadata) does network I/O: never on the event loop.
            frozen = await asyncio.to_thread(client.frozen) if client.refresh_needed() else client.frozen()
        return await get_body(
            self._sessions.get(),
            URL(url, encoded=True),  # sent as signed, not re-quoted
            client.signed_headers(url, host, headers, frozen),
            shown=shown,
            max_bytes=self.max_bytes,
            byte_range=self.byte_range,
            status_error=_s3_error,
            allow_redirects=False,  # S3 answers a wrong region or endpoint with a 301 and its error code
        )

    async def aclose(self) -> None:
        """Close the running loop's session and its connections; idempotent."""
        await self._sessions.aclose()

    @classmethod
    def from_prefix(
        cls,
        prefix: str,
        *,
        storage_options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> S3Dataset:
        """A dataset of every object under ``prefix`` (``s3://bucket/train/``), in key order,
        listed by s3fs (``endpoint_url``, ``region``, ``profile`` and ``anon`` from ``kwargs``
        are passed on to it, and ``storage_options`` as they are). ``kwargs`` go to the
        dataset. The listing runs on a private event-loop thread, closed before returning.
        ``FileNotFoundError`` when nothing is there (an empty epoch would pass unnoticed)."""
        if not isinstance(prefix, str) or not prefix.startswith("s3://") or not prefix[5:].split("/")[0]:
            raise ValueError(f"prefix must be s3://bucket/ or s3://bucket/some/prefix, got {prefix!r}")
        options: dict[str, Any] = dict(storage_options or {})
        if kwargs.get("endpoint_url") is not None:
            options.setdefault("endpoint_url", kwargs["endpoint_url"])
        if kwargs.get("region") is not None:
            options.setdefault("client_kwargs", {}).setdefault("region_name", kwargs["region"])
        if kwargs.get("profile") is not None:
            options.setdefault("profile", kwargs["profile"])
        if kwargs.get("anon"):
            options.setdefault("anon", True)
        loop = dp.EventLoopThread("threadloader-remote-list")
        try:
            keys = loop.run(_list(prefix, options))
        finally:
            loop.close()
        if not keys:
            raise FileNotFoundError(f"no objects under {prefix} (listed by s3fs with {sorted(options)})")
        return cls([f"s3://{key}" for key in keys], **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        if self.botocore_session is not None:
            raise TypeError(
                "S3Dataset(botocore_session=...) cannot be pickled (a botocore Session holds locks and "
                "open handles), so it cannot go to spawned worker processes: pass profile=, region= and "
                "endpoint_url= (or the environment) instead, which each process resolves itself, or load "
                "it with ThreadLoader or forked workers"
            )
        state = self.__dict__.copy()
        for name in ("_lock", "_resolved", "_sessions"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_clients()


async def _list(prefix: str, options: dict[str, Any]) -> list[str]:
    import s3fs

    fs = s3fs.S3FileSystem(asynchronous=True, skip_instance_cache=True, **options)
    session = await fs.set_session()
    try:
        found = await fs._find(prefix)
    finally:
        await session.close()
    return sorted(found)


async def _close_session(session: aiohttp.ClientSession) -> None:
    await session.close()


async def _s3_error(response: aiohttp.ClientResponse, shown: str) -> BaseException:
    """S3's error document (``<Code>``, ``<Message>``) as a typed error."""
    code = message = ""
    try:
        body = await response.content.read(64 * 1024)
        root = ET.fromstring(body)
        code = root.findtext("Code") or ""
        message = root.findtext("Message") or ""
    except (ET.ParseError, aiohttp.ClientError, ValueError):
        pass
    reason = ": ".join(p for p in (code, message) if p) or (response.reason or "")
    if response.status == 404 or code in NOT_FOUND_CODES:
        return NotFoundError(response.status, shown, reason)
    return HttpStatusError(response.status, shown, reason)
