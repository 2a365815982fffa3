"""``FsspecDataset``: items read from any fsspec URL; async filesystems awaited on the
loop, the others on the loop's threads."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import fsspec
from botocore.loaders import Loader, create_loader
from fsspec.core import split_protocol
from fsspec.implementations.http import HTTPFileSystem
from fsspec.spec import AbstractFileSystem

from torch_threadloader.remote.dataset import DEFAULT_TIMEOUT, RemoteDataset
from torch_threadloader.remote.errors import (
    HttpStatusError,
    LocationError,
    RemoteError,
    TooLargeError,
    redact_url,
)
from torch_threadloader.remote.http import get_body
from torch_threadloader.remote.locations import LocationsArg
from torch_threadloader.remote.per_loop import PerLoop
from torch_threadloader.remote.ranges import check_range_length
from torch_threadloader.remote.redirects import Scope
from torch_threadloader.remote.retry import TRANSIENT_STATUSES, Retry, Transient

__all__ = ["FsspecDataset"]

#: Errors of a filesystem that say the item is wrong, not the connection: never retried.
PERMANENT = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, ValueError, TypeError)


class FsspecDataset(RemoteDataset):
    """Item ``i`` is the bytes of the file at ``locations[i]``: any fsspec URL (a plain path,
    ``file://``, ``s3://``, ``gs://``, ``http(s)://``, ...), with ``storage_options`` passed
    to the filesystem of each protocol.

    Asynchronous filesystems (``fs.async_impl``: s3fs, gcsfs, HTTP) get one instance per
    event loop, made with ``asynchronous=True`` on it, awaited there and closed with it (and
    by :meth:`aclose`); the others (local files, ...) run one read each on the loop's
    default executor threads, which the loop shuts down when it closes.

    Caps and ranges: ``http(s)://`` is read with one GET on the filesystem's own aiohttp
    session (its ``client_kwargs`` and request options apply), through the same reader as
    :class:`HttpDataset`: a ``Range`` header, a server that ignores it read only up to
    ``stop`` and sliced, a body over ``max_bytes`` refused from ``Content-Length`` (unencoded) or
    after at most ``max_bytes`` plus one chunk, a 3xx left after redirects an error, and redirects
    followed by the same rules (with a base, each checked against it; the session's auth,
    headers and cookies and the request's ``headers``, ``auth``, ``cookies`` and ``params``
    never sent to another origin than the item's). Other filesystems are asked for at most
    ``max_bytes + 1`` bytes (of ``byte_range`` when given) with ``cat_file(path, start,
    end)``, which they honour.

    ``s3://`` (s3fs): one GET per item, as many in flight as the loader asks (see
    :func:`_one_get_per_item`; ``storage_options`` may set otherwise); each loop's client
    reads botocore's data through one :class:`SharedLoader`, so only the first parses it. ``http(s)://``: as
    many in flight as the loader asks too (fsspec's session is aiohttp's default, 100
    connections; see :func:`_unbounded_http`), unless ``storage_options`` give a
    ``get_client`` or a ``connector`` in ``client_kwargs``.

    A missing file raises ``FileNotFoundError`` at once; connection errors, timeouts and
    transient HTTP statuses are retried. A synchronous filesystem's read cannot be stopped:
    an attempt that passes ``timeout`` raises :class:`ReadTimeoutError` without a retry (the
    read finishes on its thread; closing the loader waits for it). Errors name the redacted
    location. Other arguments: see :class:`RemoteDataset`."""

    def __init__(
        self,
        locations: LocationsArg,
        *,
        length: int | None = None,
        columns: Mapping[str, Sequence[Any]] | None = None,
        base: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        retry: Retry | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        deadline: float | None = None,
        max_bytes: int | None = None,
        byte_range: tuple[int, int] | None = None,
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
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise TypeError(f"storage_options must be a mapping or None, got {type(storage_options).__name__}")
        self.storage_options = dict(storage_options or {})
        self._init_clients()

    def _init_clients(self) -> None:
        self._lock = threading.Lock()
        self._sync_fs: dict[str, AbstractFileSystem] = {}
        self._async_fs: dict[str, PerLoop[AbstractFileSystem]] = {}
        self._scope = Scope.of_base(self.locations.base, self.locations.path_base)

    def _span(self) -> tuple[int | None, int | None]:
        """The bytes to ask for: ``byte_range`` cut to ``max_bytes + 1``."""
        start, stop = self.byte_range if self.byte_range is not None else (None, None)
        if self.max_bytes is not None:
            first = start or 0
            stop = first + self.max_bytes + 1 if stop is None else min(stop, first + self.max_bytes + 1)
        return start, stop

    def _timeouts_stop_attempts(self, location: str) -> bool:
        protocol, _ = split_protocol(location)
        return bool(fsspec.get_filesystem_class(protocol or "file").async_impl)

    async def _fetch(self, location: str, shown: str, timeout: float | None) -> bytes:
        protocol, _ = split_protocol(location)
        protocol = protocol or "file"
        cls = fsspec.get_filesystem_class(protocol)
        path = cls._strip_protocol(location)
        start, end = self._span()
        try:
            if cls.async_impl:
                fs = self._async_client(protocol, cls).get()
                if isinstance(fs, HTTPFileSystem):
                    return await self._http_get(fs, path, shown)
                body = await fs._cat_file(path, start=start, end=end)
            else:
                body = await asyncio.to_thread(self._sync_client(protocol, cls).cat_file, path, start, end)
        except (RemoteError, LocationError, Transient):
            raise  # ours: already naming the redacted location
        except PERMANENT as exc:
            if location == shown:
                raise
            # Its text (and its cause's) may hold the raw URL: the same type, the location redacted.
            text = str(exc).replace(location, shown).replace(path, redact_url(path))
            try:
                redacted = type(exc)(text)
            except Exception:  # a subclass with another signature: the builtin it is
                redacted = next(t for t in PERMANENT if isinstance(exc, t))(text)
            raise redacted from None
        except aiohttp.ClientResponseError as exc:  # its text has the raw URL
            if exc.status in TRANSIENT_STATUSES:
                raise Transient(f"HTTP {exc.status} {exc.message} for {shown}".rstrip()) from None
            raise HttpStatusError(exc.status, shown, exc.message) from None
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, ConnectionError) as exc:
            raise Transient(f"{type(exc).__name__} for {shown}") from exc
        check_range_length(body, self.byte_range, shown)
        if self.max_bytes is not None and len(body) > self.max_bytes:
            raise TooLargeError(shown, self.max_bytes, None)
        return bytes(body)

    async def _http_get(self, fs: HTTPFileSystem, url: str, shown: str) -> bytes:
        """One GET on the filesystem's session, with its request options, through
        :func:`get_body` (which enforces ``byte_range`` and ``max_bytes``)."""
        session = await fs.set_session()
        options = dict(fs.kwargs)
        headers = options.pop("headers", None)
        allow_redirects = bool(options.pop("allow_redirects", True))
        return await get_body(
            session,
            fs.encode_url(url),
            headers,
            shown=shown,
            max_bytes=self.max_bytes,
            byte_range=self.byte_range,
            scope=self._scope,
            allow_redirects=allow_redirects,
            request_kwargs=options,
        )

    def _sync_client(self, protocol: str, cls: type[AbstractFileSystem]) -> AbstractFileSystem:
        with self._lock:
            fs = self._sync_fs.get(protocol)
            if fs is None:
                fs = self._sync_fs[protocol] = cls(**self.storage_options)
            return fs

    def _async_client(self, protocol: str, cls: type[AbstractFileSystem]) -> PerLoop[AbstractFileSystem]:
        with self._lock:
            per_loop = self._async_fs.get(protocol)
            if per_loop is None:
                options = _unbounded_http(cls, _one_get_per_item(cls, self.storage_options))

                def make() -> AbstractFileSystem:
                    loop = asyncio.get_running_loop()
                    return _with_shared_loader(cls(asynchronous=True, loop=loop, skip_instance_cache=True, **options))

                per_loop = self._async_fs[protocol] = PerLoop(make, _close_async_fs)
            return per_loop

    async def aclose(self) -> None:
        """Close the running loop's async filesystems (their sessions); idempotent."""
        with self._lock:
            per_loops = list(self._async_fs.values())
        for per_loop in per_loops:
            await per_loop.aclose()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_lock", "_sync_fs", "_async_fs", "_scope"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_clients()


#: s3fs's connection pool (aiobotocore's ``max_pool_connections``, 10 by default) when
#: ``storage_options`` do not set one: more than a loader's requests in flight (which bound
#: the connections), so the pool never holds them back, as :class:`HttpDataset`'s does not.
S3FS_POOL_CONNECTIONS = 4096


def _one_get_per_item(cls: type[AbstractFileSystem], options: dict[str, Any]) -> dict[str, Any]:
    """``options`` for ``cls``, with, for s3fs, what makes an item one GET with as many in
    flight as the loader asks: ``max_concurrency=1`` (above 1, s3fs's ``_cat_file`` of a
    whole object sends a HEAD for its size first, to split a large one into concurrent
    ranged GETs) and a pool of ``S3FS_POOL_CONNECTIONS``. What ``options`` set is kept."""
    s3fs = sys.modules.get("s3fs")  # loaded if cls is its filesystem
    if s3fs is None or not issubclass(cls, s3fs.S3FileSystem):
        return options
    config = {"max_pool_connections": S3FS_POOL_CONNECTIONS, **(options.get("config_kwargs") or {})}
    return {"max_concurrency": 1, **options, "config_kwargs": config}


class SharedLoader(Loader):  # type: ignore[misc]
    """botocore's data loader for one data path (``AWS_DATA_PATH``), as a botocore session makes
    it, shared by the s3fs clients of every event loop of this process: botocore's JSON (the S3
    model, endpoints, rule sets) is parsed once, not once per loop, which costs tens of ms of
    CPU each time. Loads run under its lock (the cache they fill is shared); what they return
    is read-only to botocore, whose clients of one session share it too."""

    def __init__(self, data_path: str | None) -> None:
        self.__dict__.update(create_loader(data_path).__dict__)
        self.lock = threading.RLock()

    def list_available_services(self, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return super().list_available_services(*args, **kwargs)

    def determine_latest_version(self, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return super().determine_latest_version(*args, **kwargs)

    def list_api_versions(self, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return super().list_api_versions(*args, **kwargs)

    def load_service_model(self, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return super().load_service_model(*args, **kwargs)

    def load_data_with_path(self, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return super().load_data_with_path(*args, **kwargs)


_loaders: dict[str | None, SharedLoader] = {}
_loaders_lock = threading.Lock()


def _loaders_after_fork() -> None:
    """A forked child's locks anew: a thread of the parent may have held one at the fork."""
    global _loaders_lock
    _loaders_lock = threading.Lock()
    for loader in _loaders.values():
        loader.lock = threading.RLock()


os.register_at_fork(after_in_child=_loaders_after_fork)


def shared_loader(data_path: str | None) -> SharedLoader:
    """This process's :class:`SharedLoader` for ``data_path``."""
    with _loaders_lock:
        loader = _loaders.get(data_path)
        if loader is None:
            loader = _loaders[data_path] = SharedLoader(data_path)
        return loader


def _with_shared_loader(fs: AbstractFileSystem) -> AbstractFileSystem:
    """``fs``; for s3fs without a session of the caller's, with the session s3fs would make
    (``AioSession(**fs.kwargs)``, which s3fs still owns) reading botocore's data through
    :func:`shared_loader`."""
    s3fs = sys.modules.get("s3fs")
    if s3fs is None or not isinstance(fs, s3fs.S3FileSystem) or fs.session is not None:
        return fs
    from aiobotocore.session import AioSession

    session = AioSession(**fs.kwargs)
    session.register_component("data_loader", shared_loader(session.get_config_variable("data_path")))
    fs.session = session
    return fs


def _unbounded_http(cls: type[AbstractFileSystem], options: dict[str, Any]) -> dict[str, Any]:
    """``options`` for ``cls``, with, for fsspec's HTTP filesystem, a session whose connector
    has no cap of its own (:func:`_unbounded_client`; aiohttp's default holds 100
    connections), so the loader's requests in flight bound the connections, as with
    :class:`HttpDataset`. A ``get_client`` or a ``connector`` in ``client_kwargs`` is kept."""
    if not issubclass(cls, HTTPFileSystem) or "get_client" in options:
        return options
    if "connector" in (options.get("client_kwargs") or {}):
        return options
    return {**options, "get_client": _unbounded_client}


async def _unbounded_client(**kwargs: Any) -> aiohttp.ClientSession:
    """fsspec's ``get_client`` (``aiohttp.ClientSession(**kwargs)``) with a connector of no
    connection cap (``limit=0``), made on the running loop; the session owns and closes it.
    A session ``auth`` (``aiohttp.BasicAuth``, what fsspec documents) becomes its
    ``Authorization`` header, the form aiohttp asks for now (``auth=`` is deprecated)."""
    auth = kwargs.pop("auth", None)
    if isinstance(auth, aiohttp.BasicAuth):
        kwargs["headers"] = {**dict(kwargs.get("headers") or {}), "Authorization": auth.encode()}
    elif auth is not None:
        kwargs["auth"] = auth
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), **kwargs)


async def _close_async_fs(fs: AbstractFileSystem) -> None:
    """Close the client session an async filesystem opened, as fsspec's async filesystems
    document it (``session = await fs.set_session(); ... await session.close()``)."""
    set_session = getattr(fs, "set_session", None)
    if set_session is None:
        return
    session = await set_session()
    close = getattr(session, "close", None)
    if close is not None:
        await close()
