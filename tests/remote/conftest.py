"""The aiohttp server every module of remote tests shares, one per module, and the check that
runs after each test that used it. A module that needs another server (ranges, redirects, S3)
defines its own ``server`` fixture, which pytest prefers to this one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fixtures.servers import HttpServer
from tests.fixtures.threads import wait_until


@pytest.fixture(scope="module")
def server() -> Iterator[HttpServer]:
    srv = HttpServer().start()
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def http_server_left_clean(request: pytest.FixtureRequest) -> Iterator[None]:
    """For a test on the shared HTTP server: counters from zero; after it, no connection left
    open and nothing outside the base hit."""
    if "server" not in request.fixturenames:
        yield
        return
    srv = request.getfixturevalue("server")
    if type(srv) is not HttpServer:  # a module with a server of its own checks it itself
        yield
        return
    srv.reset()
    yield
    assert wait_until(lambda: srv.open_connections() == 0), f"{srv.open_connections()} connections left open"
    assert srv.count("outside_hits") == 0
