"""The aiohttp server every module of remote tests shares, one per module, and the check that
runs around each test that used a server. A module that needs other servers (ranges, redirects,
S3 proxies) starts them in a fixture named in :data:`SERVER_FIXTURES`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.servers import HttpServer, RecordingProxy, S3FaultProxy
from tests.fixtures.threads import wait_until

#: The fixtures whose value is a server, or a tuple or dict holding servers.
SERVER_FIXTURES = ("server", "range_server", "fault_proxy", "recording_proxy", "pair", "servers")


@pytest.fixture(scope="module")
def server() -> Iterator[HttpServer]:
    srv = HttpServer().start()
    yield srv
    srv.stop()


def servers_in(value: Any) -> list[HttpServer]:
    """The servers a server fixture's value holds (a dict's other values, e.g. an SSL
    context, left out)."""
    values = value.values() if isinstance(value, dict) else value if isinstance(value, tuple) else [value]
    return [v for v in values if isinstance(v, HttpServer)]


@pytest.fixture(autouse=True)
def servers_left_clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """For a test on any of :data:`SERVER_FIXTURES`: each server's counters from zero (and an
    S3 proxy fails nothing); after it, a recording proxy lets what it holds through, no server
    holds a connection open and the shared HTTP server saw nothing outside the base."""
    used = [
        srv
        for name in SERVER_FIXTURES
        if name in request.fixturenames
        for srv in servers_in(request.getfixturevalue(name))
    ]
    for srv in used:
        srv.reset()
        if isinstance(srv, S3FaultProxy):
            srv.fail(0)
    yield
    for srv in used:
        if isinstance(srv, RecordingProxy):
            srv.release()
        assert wait_until(lambda srv=srv: srv.open_connections() == 0), (
            f"{type(srv).__name__} at {srv.url('')}: {srv.open_connections()} connections left open"
        )
        if type(srv) is HttpServer:
            assert srv.count("outside_hits") == 0
