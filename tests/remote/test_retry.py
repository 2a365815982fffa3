"""Retry: backoff, jitter, Retry-After (seconds and HTTP dates), validation; the concurrency rule."""

from __future__ import annotations

import email.utils
import warnings

import pytest

from torch_threadloader import concurrency
from torch_threadloader.concurrency import async_prefetch
from torch_threadloader.remote import Retry, in_flight, warn_if_unreachable
from torch_threadloader.remote.retry import parse_retry_after


def test_backoff_doubles_up_to_the_cap_without_jitter():
    r = Retry(max_retries=5, initial_backoff=0.5, max_backoff=3.0, jitter=0)
    assert [r.backoff(k) for k in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_jitter_takes_at_most_its_fraction_off():
    r = Retry(initial_backoff=1.0, max_backoff=1.0, jitter=0.25)
    waits = [r.backoff(0) for _ in range(200)]
    assert all(0.75 <= w <= 1.0 for w in waits)
    assert len(set(waits)) > 1


def test_retry_after_replaces_the_backoff_capped_by_max_backoff():
    r = Retry(initial_backoff=5.0, max_backoff=10.0, jitter=0)
    assert r.backoff(0, retry_after=0.0) == 0.0
    assert r.backoff(0, retry_after=2.0) == 2.0
    assert r.backoff(0, retry_after=3600.0) == 10.0


def test_retry_after_is_read_as_seconds_or_as_an_http_date():
    assert parse_retry_after("7") == 7.0
    now = 1_700_000_000.0
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30.0)
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now=now) == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("\u00b2") is None  # str.isdigit() says yes, float() says no
    assert parse_retry_after("\u0663") is None  # an Arabic-Indic digit: float() would read it


def test_a_very_late_retry_waits_the_cap_without_overflowing():
    r = Retry(max_retries=5000, initial_backoff=0.5, max_backoff=3.0, jitter=0)
    assert r.backoff(1023) == r.backoff(1024) == r.backoff(4999) == 3.0
    assert Retry(initial_backoff=0.0, max_backoff=3.0, jitter=0).backoff(4999) == 0.0


def test_the_default_retries_at_least_twice():
    assert Retry().max_retries >= 2


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"max_retries": -1}, "max_retries"),
        ({"max_retries": 1.5}, "max_retries"),
        ({"initial_backoff": -1}, "initial_backoff"),
        ({"max_backoff": float("inf")}, "max_backoff"),
        ({"jitter": 2}, "jitter"),
    ],
)
def test_bad_settings_are_refused_naming_them(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Retry(**kwargs)


def test_in_flight_is_workers_times_the_smaller_of_item_concurrency_and_batch():
    assert in_flight(32, 1, 128) == 32
    assert in_flight(32, 4, 32) == 128
    assert in_flight(32, 0, 8) == 8
    assert in_flight(None, 3, 16) == 3


def test_async_items_in_flight_span_the_batches_prefetch_allows():
    assert in_flight(32, 1, 128, prefetch_factor=2) == 64
    assert in_flight(32, 1, 128, prefetch_factor=async_prefetch(None, 32, 128)) == 128
    assert in_flight(32, 0, 128, prefetch_factor=async_prefetch(None, 32, 128)) == 128
    assert in_flight(None, 2, 16, prefetch_factor=async_prefetch(None, None, 16)) == 32
    assert async_prefetch(None, 32, 8) == 2
    assert async_prefetch(None, 32, 128) == 8  # two batches' worth of items per slot
    assert async_prefetch(3, 32, 128) == 3  # as given


@pytest.fixture
def no_warnings_given() -> None:
    """The warnings already given in this process (by other tests using the same setting) forgotten."""
    concurrency._forget_warnings()


def test_an_unreachable_item_concurrency_warns_once_with_the_setting_that_reaches_it(no_warnings_given):
    with pytest.warns(RuntimeWarning, match=r"at most 32 items in flight, not 128.*num_workers=4, item_concurrency=32"):
        assert warn_if_unreachable(32, 1, 128)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_if_unreachable(32, 1, 128)  # once
        assert not warn_if_unreachable(32, 4, 32)  # reachable
        assert not warn_if_unreachable(32, 0, 128, prefetch_factor=4)  # async: items across 4 batches
        assert not warn_if_unreachable(32, 1, 128, prefetch_factor=0)  # refused at iter(), as torch does
    with pytest.warns(RuntimeWarning, match=r"at most 64 items in flight, not 128.*prefetch_factor=4"):
        assert warn_if_unreachable(32, 1, 128, prefetch_factor=2)
