"""The dispatcher's transports against their contract (datapipes/dispatch/transport.py): one
message per submitted item unless :meth:`ended` dropped it, however the calls interleave."""

from __future__ import annotations

import queue
from typing import Any

from datapipes._lifecycle import Deadline
from datapipes.dispatch.threads import ThreadTransport
from datapipes.dispatch.transport import ENDED
from datapipes.stats import StatsCounter


def transport() -> ThreadTransport:
    def fn(item: Any) -> Any:
        raise StopIteration  # every thread's share ends at its first item

    return ThreadTransport(
        "t",
        2,
        fn=fn,
        worker_fn=None,
        stop_ends_share=True,
        worker_of=None,
        first_thread=0,
        capacity=4,
        in_order=True,
        pool=None,
        stats=StatsCounter("t"),
    )


def test_an_item_given_to_a_thread_whose_share_ended_meanwhile_is_reported() -> None:
    # The dispatcher chooses the worker (room()), lets go of its lock to pull the source, and
    # submits: the worker's ENDED may have been taken in between (seen on 3.13t as a hang of
    # an IterableDataset epoch with 4 workers: the item was skipped by its thread, unreported).
    t = transport()
    results: queue.SimpleQueue[Any] = queue.SimpleQueue()
    t.open(results)
    try:
        worker = t.room()  # the dispatcher's choice for the next item, made under its lock
        assert worker == 0
        t.submit(0, 1, "first")  # thread 0's share ends at its first item
        assert results.get(timeout=5)[:2] == (1, ENDED)
        assert t.ended(0) == [1]  # the consumer took the ENDED before the next item was submitted
        t.submit(worker, 7, "late")  # ... which the dispatcher had given to thread 0 before
        try:
            seq, kind, _value, by, _at = results.get(timeout=5)
        except queue.Empty:
            raise AssertionError("the late item was dropped without a message: the epoch waits for ever") from None
        assert (seq, kind, by) == (7, ENDED, 0), "the late item is reported, as its share ended"
        assert t.ended(0) == [7], "and the dispatcher drops it"
    finally:
        assert t.close(5.0, Deadline(5.0), warn=True, interrupted=False)
