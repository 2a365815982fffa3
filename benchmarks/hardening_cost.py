"""What the remote datasets' hardening costs per GET, in CPU time.

    python -m benchmarks hardening_cost [--items 4096] [--in-flight 256] [--repeats 5] [--only http|s3] [--smoke]

An aiohttp server in another process answers 10 KB at once (no latency: the client's CPU is
what is measured), ``--in-flight`` GETs at a time from one event loop (``asyncio.gather``
with a semaphore). Interleaved rounds of three clients on the same server:

- ``bare``: ``session.get(url)`` and ``read()``, what aiohttp alone costs;
- ``unhardened``: ``HttpDataset.__getitem__`` with its hardening taken out: the location not
  checked against the base, not redacted for errors, the GET sent as aiohttp sends it
  (redirects followed by aiohttp, no scope check, no credential stripping, no range or size
  checks), retries and timeouts kept;
- ``HttpDataset``: the dataset as shipped (the location checked as the server will see it,
  redacted, ``open_followed``'s hop-by-hop redirect checks, the response checks).

And, with S3 (the same server answering any path as an S3 stub), interleaved rounds of:

- ``bare, unsigned``: aiohttp GETs of ``/bench/{i}.bin``, no signature;
- ``bare, botocore S3SigV4Auth``: the same, each signed by botocore's plain signer, made per
  GET (the key derived every time, the ``Host`` worked out from the URL);
- ``bare, GetSigner``: the same, signed as ``S3Dataset`` signs (``GetSigner``);
- ``S3Dataset, plain S3SigV4Auth``: ``S3Dataset.__getitem__`` signing with botocore's plain signer;
- ``S3Dataset``: as shipped (both datasets time their signing in the GET's own path, two
  clock reads per GET: its CPU per GET and share);
- ``FsspecDataset s3://`` and ``s3fs _cat_file``: the dataset over s3fs beside s3fs's own
  one-GET path (``max_concurrency=1``), on the same loop; and the CPU of the first GET on a
  new loop, its client made there (what each loader's loop pays once), for both.

CPU time is this process's (``getrusage``: every thread; the server's is not counted), so it
holds on a loaded machine better than a wall-clock rate. Records CPU µs per GET per round
and the hardening's share of ``HttpDataset``'s CPU per GET: what it
costs the throughput where the client's CPU is the limit, an upper bound elsewhere. The same
functions run per GET in ``S3Dataset`` and (the location check) ``FsspecDataset``, whose GETs
cost more CPU (SigV4 signing, s3fs): their share is smaller. Each synchronous check is also
timed per call (``timeit``, best of 5), and so is each signer (botocore's plain one,
``GetSigner``): apart from the GETs, where the caches are warm, it costs less than in them.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import timeit
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import aiohttp
import botocore.session
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from yarl import URL

from benchmarks.remote_throughput import BODY, bare_gets, gather
from benchmarks.result import Recorder, suite_parser
from benchmarks.workloads.remote_http import LocalServer
from torch_threadloader.remote import FsspecDataset, HttpDataset, S3Dataset
from torch_threadloader.remote.errors import redact_url
from torch_threadloader.remote.redirects import _check_scope, _parse
from torch_threadloader.remote.retry import Transient, with_retries
from torch_threadloader.remote.s3 import _Client
from torch_threadloader.remote.signing import UNSIGNED_PAYLOAD_CONFIG, GetSigner, host_of


class Unhardened(HttpDataset):
    """``HttpDataset`` without its hardening: the baseline the hardening is measured against."""

    async def __getitem__(self, index: int) -> bytes:  # type: ignore[override]
        location = self.locations._get(index)  # unchecked
        return await with_retries(
            lambda limit: self._plain(location),
            retry=self.retry,
            timeout=self.timeout,
            deadline=self.deadline,
            location=location,
        )

    async def _plain(self, location: str) -> bytes:
        async with self._sessions.get().get(location) as response:
            if response.status >= 300:
                raise Transient(f"HTTP {response.status}")
            return await response.read()


async def _cpu_per_get(get: Callable[[int], Awaitable[bytes]], items: int, in_flight: int) -> float:
    """CPU seconds per GET of ``items`` GETs, ``in_flight`` at a time."""
    timing = await gather(get, items, in_flight)
    return timing.cpu / timing.count


def run_round(base: str, items: int, in_flight: int, turn: int = 0) -> dict[str, float]:
    """One round: each client's CPU µs per GET, on a fresh event loop (its sessions too), the
    clients in an order rotated by ``turn`` (so none is always first after the loop starts)."""

    async def bare_client() -> float:
        timing = await bare_gets(base, items, in_flight)
        return timing.cpu / timing.count

    def dataset_client(cls: type[HttpDataset]) -> Callable[[], Awaitable[float]]:
        async def client() -> float:
            ds = cls(base + "/item/{i}", columns={"i": range(items)})
            try:
                return await _cpu_per_get(ds.__getitem__, items, in_flight)
            finally:
                await ds.aclose()

        return client

    clients: list[tuple[str, Callable[[], Awaitable[float]]]] = [
        ("bare aiohttp", bare_client),
        ("unhardened", dataset_client(Unhardened)),
        ("HttpDataset", dataset_client(HttpDataset)),
    ]
    turn %= len(clients)

    async def main() -> dict[str, float]:
        out = {name: await client() * 1e6 for name, client in clients[turn:] + clients[:turn]}
        return {name: out[name] for name, _ in clients}

    return asyncio.run(main())


def per_call_costs(items: int = 50_000) -> dict[str, float]:
    """µs per call of the hardening's synchronous checks, each over distinct locations (no
    cache helps), best of 5: what a GET pays for them wherever it is sent from."""
    ds = HttpDataset("http://127.0.0.1:8080/item/{i}", columns={"i": range(items)})
    locations, scope = ds.locations, ds._scope
    assert scope is not None
    urls = [locations._get(i) for i in range(items)]
    parsed = [_parse(u, u) for u in urls]

    def best(fn: Callable[[int], object]) -> float:
        def run() -> None:
            for i in range(items):
                fn(i)

        return min(timeit.repeat(run, number=1, repeat=5)) / items * 1e6

    floor = best(urls.__getitem__)
    return {
        "the location checked against the base (less the unchecked lookup)": best(locations.__getitem__)
        - best(locations._get),
        "the location redacted for errors": best(lambda i: redact_url(urls[i])) - floor,
        "the request checked against the base's scope": best(lambda i: _check_scope(scope, parsed[i], parsed[i], 0, ""))
        - floor,
    }


def plain_signed(url: str, credentials: Any, region: str = "us-east-1", headers: Any = None) -> dict[str, str]:
    """A GET of ``url`` signed by botocore's plain ``S3SigV4Auth``, made for it alone."""
    request = AWSRequest(method="GET", url=url, headers=headers or {})
    request.context["client_config"] = UNSIGNED_PAYLOAD_CONFIG
    S3SigV4Auth(credentials, "s3", region).add_auth(request)
    return dict(request.headers.items())


class _SigningTimed(_Client):
    """``S3Dataset``'s client, its signing timed (the loop thread's CPU); ``plain``: signed by
    botocore's plain signer, as ``S3Dataset`` signed before ``GetSigner``."""

    plain = False
    signing = 0.0
    signed = 0

    def signed_headers(self, url: str, host: str, headers: dict[str, str], frozen: Any) -> dict[str, str]:
        start = time.thread_time()
        try:
            if self.plain and frozen is not None:
                return plain_signed(url, frozen, self.region, headers)
            return super().signed_headers(url, host, headers, frozen)
        finally:
            self.signing += time.thread_time() - start
            self.signed += 1


class SigningTimed(S3Dataset):
    """``S3Dataset`` whose signing is timed in the GET's own path (two clock reads per GET)."""

    def __init__(self, *args: Any, plain: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plain = plain

    def _resolve(self) -> _Client:
        with self._lock:
            if not self._resolved:
                client = _SigningTimed(botocore.session.Session(), self.region, self.endpoint_url, self.anon)
                client.plain = self.plain
                self._resolved.append(client)
            return self._resolved[0]

    def signing_per_get(self) -> float:
        """CPU seconds per GET spent signing, so far."""
        client = self._client
        assert isinstance(client, _SigningTimed) and client.signed
        return client.signing / client.signed


def _credentials() -> Any:
    return botocore.session.Session().get_credentials().get_frozen_credentials()


def _set_fake_aws() -> None:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "AKIABENCHBENCHBENCH0")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench-secret")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"


async def _bare_s3(endpoint: str, items: int, in_flight: int, sign: Callable[[str], dict[str, str]] | None) -> float:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def get(i: int) -> bytes:
            url = f"{endpoint}/bench/{i}.bin"
            async with session.get(URL(url, encoded=True), headers=sign(url) if sign else None) as response:
                response.raise_for_status()
                return await response.read()

        return await _cpu_per_get(get, items, in_flight)


async def _dataset_cpu(ds: Any, items: int, in_flight: int) -> float:
    try:
        await _cpu_per_get(ds.__getitem__, min(items, 64), in_flight)  # resolves botocore / s3fs first
        return await _cpu_per_get(ds.__getitem__, items, in_flight)
    finally:
        await ds.aclose()


async def _s3fs_cpu(endpoint: str, items: int, in_flight: int) -> float:
    import s3fs

    fs = s3fs.S3FileSystem(
        asynchronous=True, skip_instance_cache=True, endpoint_url=endpoint, config_kwargs={"max_pool_connections": 4096}
    )
    session = await fs.set_session()

    async def get(i: int) -> bytes:
        body: bytes = await fs._cat_file(f"bench/{i}.bin", max_concurrency=1)
        return body

    try:
        await _cpu_per_get(get, min(items, 64), in_flight)
        return await _cpu_per_get(get, items, in_flight)
    finally:
        await session.close()


def s3_round(endpoint: str, items: int, in_flight: int, turn: int = 0) -> dict[str, float]:
    """One round: each S3 client's CPU µs per GET, in an order rotated by ``turn``; and the
    signing's µs per GET within each ``S3Dataset`` (keys ending in ``: its signing``)."""
    credentials, signer = _credentials(), GetSigner("us-east-1")
    host, template = host_of(f"{endpoint}/bench/"), "s3://bench/{i}.bin"
    columns = {"i": range(items)}
    plain = SigningTimed(template, columns=columns, endpoint_url=endpoint, plain=True)
    shipped = SigningTimed(template, columns=columns, endpoint_url=endpoint)
    over_s3fs = FsspecDataset(template, columns=columns, storage_options={"endpoint_url": endpoint})
    clients: list[tuple[str, Callable[[], Awaitable[float]]]] = [
        ("bare, unsigned", lambda: _bare_s3(endpoint, items, in_flight, None)),
        (
            "bare, botocore S3SigV4Auth",
            lambda: _bare_s3(endpoint, items, in_flight, lambda u: plain_signed(u, credentials)),
        ),
        (
            "bare, GetSigner",
            lambda: _bare_s3(endpoint, items, in_flight, lambda u: signer.headers(u, host, {}, credentials)),
        ),
        ("S3Dataset, plain S3SigV4Auth", lambda: _dataset_cpu(plain, items, in_flight)),
        ("S3Dataset", lambda: _dataset_cpu(shipped, items, in_flight)),
        ("FsspecDataset s3://", lambda: _dataset_cpu(over_s3fs, items, in_flight)),
        ("s3fs _cat_file", lambda: _s3fs_cpu(endpoint, items, in_flight)),
    ]
    turn %= len(clients)

    async def main() -> dict[str, float]:
        out = {name: await client() * 1e6 for name, client in clients[turn:] + clients[:turn]}
        return {name: out[name] for name, _ in clients}

    out = asyncio.run(main())
    for name, ds in (("S3Dataset, plain S3SigV4Auth", plain), ("S3Dataset", shipped)):
        out[f"{name}: its signing"] = ds.signing_per_get() * 1e6
    return out


def signing_costs(calls: int = 20_000) -> dict[str, float]:
    """µs per signature of a GET, best of 5: botocore's plain signer, and ``GetSigner``."""
    credentials, signer = _credentials(), GetSigner("us-east-1")
    base = "http://127.0.0.1:9000/bench/"
    host = host_of(base)
    urls = [f"{base}{i}.bin" for i in range(calls)]

    def best(sign: Callable[[str], object]) -> float:
        def run() -> None:
            for url in urls:
                sign(url)

        return min(timeit.repeat(run, number=1, repeat=5)) / calls * 1e6

    return {
        "botocore S3SigV4Auth, made per GET": best(lambda u: plain_signed(u, credentials)),
        "GetSigner": best(lambda u: signer.headers(u, host, {}, credentials)),
    }


def _http_part(recorder: Recorder, args: Any) -> None:
    server = LocalServer(max_requests=3 * args.items * (args.repeats + 1) + 3 * 256 + 100, delay=0.0, size=BODY)
    try:
        base = f"http://127.0.0.1:{server.port}"
        run_round(base, min(args.items, 256), args.in_flight)  # warm-up: imports, first connections
        rounds = [run_round(base, args.items, args.in_flight, turn) for turn in range(args.repeats)]
    finally:
        server.stop()
    case = f"{args.items} GETs of 10 KB, {args.in_flight} in flight"
    params = {"items": args.items, "in_flight": args.in_flight}
    for name in rounds[0]:
        recorder.add(case, name, "CPU per GET", [r[name] for r in rounds], "µs", **params)
    shares = [(r["HttpDataset"] - r["unhardened"]) / r["HttpDataset"] * 100 for r in rounds]
    recorder.add(case, "HttpDataset - unhardened", "hardening's share of the CPU per GET", shares, "%", **params)
    costs = per_call_costs(items=1_000 if args.smoke else 50_000)
    for name, us in costs.items():
        recorder.add("synchronous checks, per call", name, "CPU per call", [us], "µs")
    total, top = sum(costs.values()), statistics.median(r["HttpDataset"] for r in rounds)
    recorder.add(case, "synchronous checks together", "share of HttpDataset's CPU per GET", [total / top * 100], "%")


def first_get_costs(endpoint: str) -> dict[str, float]:
    """CPU ms of one GET on a new event loop, its client made there (what each loader's loop
    pays once): ``FsspecDataset`` over ``s3://``, and s3fs's own filesystem made as s3fs makes it."""
    import s3fs

    dataset = FsspecDataset("s3://bench/{i}.bin", columns={"i": range(1)}, storage_options={"endpoint_url": endpoint})

    async def through_dataset() -> None:
        try:
            await dataset[0]
        finally:
            await dataset.aclose()

    async def through_s3fs() -> None:
        fs = s3fs.S3FileSystem(asynchronous=True, skip_instance_cache=True, endpoint_url=endpoint)
        session = await fs.set_session()
        try:
            await fs._cat_file("bench/0.bin", max_concurrency=1)
        finally:
            await session.close()

    def cpu_ms(run: Callable[[], Coroutine[Any, Any, None]]) -> float:
        start = time.process_time()
        asyncio.run(run())
        return (time.process_time() - start) * 1e3

    return {"FsspecDataset s3://": cpu_ms(through_dataset), "s3fs, its filesystem made": cpu_ms(through_s3fs)}


def _s3_part(recorder: Recorder, args: Any) -> None:
    _set_fake_aws()
    per_round = 7 * (args.items + 64) + 2
    server = LocalServer(max_requests=per_round * (args.repeats + 1), delay=0.0, size=BODY, any_path=True)
    try:
        endpoint = f"http://127.0.0.1:{server.port}"
        s3_round(endpoint, min(args.items, 64), args.in_flight)  # warm-up
        rounds = [s3_round(endpoint, args.items, args.in_flight, turn) for turn in range(args.repeats)]
        firsts = [first_get_costs(endpoint) for _ in range(args.repeats)]
    finally:
        server.stop()
    for name in firsts[0]:
        recorder.add("the first GET on a new event loop", name, "CPU", [f[name] for f in firsts], "ms")
    case = f"S3 stub: {args.items} GETs of 10 KB, {args.in_flight} in flight"
    params = {"items": args.items, "in_flight": args.in_flight}
    for name in rounds[0]:
        if not name.endswith(": its signing"):
            recorder.add(case, name, "CPU per GET", [r[name] for r in rounds], "µs", **params)
    for name in ("S3Dataset, plain S3SigV4Auth", "S3Dataset"):
        signing = [r[f"{name}: its signing"] for r in rounds]
        recorder.add(case, name, "signing's CPU per GET, in the GET's path", signing, "µs", **params)
        shares = [s / r[name] * 100 for s, r in zip(signing, rounds, strict=True)]
        recorder.add(case, name, "signing's share of the CPU per GET", shares, "%", **params)
    for name, us in signing_costs(calls=1_000 if args.smoke else 20_000).items():
        recorder.add("SigV4 of one GET, per call", name, "CPU per call", [us], "µs")


def main(argv: Sequence[str] | None = None, *, suite: str = "hardening_cost") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--items", type=int, default=4096)
    parser.add_argument("--in-flight", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--only", choices=["http", "s3"], default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        args.items, args.in_flight, args.repeats = 32, 8, 1
    recorder = Recorder(suite, argv)
    if args.only in (None, "http"):
        _http_part(recorder, args)
    if args.only in (None, "s3"):
        _s3_part(recorder, args)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
