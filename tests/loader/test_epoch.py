"""The epoch (torch_threadloader.epoch): one class whatever the per-batch extras, closed by
dropping it, and the loader's record of open epochs and async datasets under epochs opened,
dropped and closed on many threads at once (free-threading: no GIL to lean on)."""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest

import datapipes as dp
from tests.fixtures.datasets import AsyncRange, RangeDataset, UnshardedStream
from torch_threadloader import ThreadLoader
from torch_threadloader.epoch import Epoch


@pytest.mark.parametrize(
    "settings",
    [{}, {"num_workers": 2}, {"stats": True}, {"on_error": "skip"}, {"num_workers": 2, "max_bytes_in_flight": 1 << 20}],
)
def test_one_epoch_class_whatever_the_per_batch_extras(settings: dict[str, Any]) -> None:
    loader = ThreadLoader(RangeDataset(10), batch_size=4, **settings)
    it = iter(loader)
    assert type(it) is Epoch
    assert [b.tolist() for b in it] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert type(it) is Epoch  # never swapped for another class
    loader.close()


def test_an_iterable_dataset_longer_than_its_len_warns_in_torchs_words() -> None:
    class Long(UnshardedStream):
        def __len__(self) -> int:
            return 2

    loader = ThreadLoader(Long(5), batch_size=None)
    len(loader)
    with pytest.warns(UserWarning, match=r"was reported to be 2\(when accessing len\(dataloader\)\), but 3 samples"):
        assert [int(x) for x in loader] == [0, 1, 2, 3, 4]


def _hammer(work: Any, threads: int, rounds: int) -> list[BaseException]:
    """Run ``work()`` ``rounds`` times on each of ``threads`` threads started together; the errors."""
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def run() -> None:
        start.wait()
        for _ in range(rounds):
            try:
                work()
            except BaseException as exc:  # collected: the test fails on it
                errors.append(exc)

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return errors


def test_epochs_opened_dropped_and_closed_on_many_threads_at_once() -> None:
    """Epochs of one loader are opened and dropped (their finalizers close them) on four
    threads while two more close the loader (which closes every open epoch) over and over:
    the loader's record of open epochs never changes under a copy of it, and ends empty."""
    loader = ThreadLoader(RangeDataset(64), batch_size=4)
    opened = iter(range(10**9)).__next__  # one count over the threads (a C call: atomic)

    def open_and_drop() -> None:
        it = iter(loader)
        try:
            next(it)
        except (StopIteration, dp.EpochClosedError):
            pass  # the loader's close() came first
        del it
        if opened() % 100 == 0:
            gc.collect()  # and some that the collector closes

    def close() -> None:
        loader.close()

    errors: list[BaseException] = []
    done = threading.Event()

    def closers() -> None:
        errors.extend(_hammer(close, 2, 400))
        done.set()

    closer = threading.Thread(target=closers)
    closer.start()
    errors.extend(_hammer(open_and_drop, 4, 400))
    closer.join()
    assert errors == []
    loader.close()
    assert len(loader._state.kept.epochs) == 0


class CountsAclose(AsyncRange):
    """An :class:`AsyncRange` that counts its ``aclose()`` calls (worker copies share the count)."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.acloses: list[int] = []

    async def aclose(self) -> None:
        self.acloses.append(1)


def test_an_async_dataset_opened_on_many_threads_at_once_is_closed_once() -> None:
    """Eight threads open an epoch of the same async loader at once (no workers: they share the
    loader's event loop): the loader's dataset is registered once, so its ``aclose()`` is
    awaited once when the loader closes."""
    for _ in range(20):
        dataset = CountsAclose(8)
        loader = ThreadLoader(dataset, batch_size=4)

        def open_one(loader: ThreadLoader[Any] = loader) -> None:
            it = iter(loader)
            try:
                next(it)
            finally:
                it.close()

        assert _hammer(open_one, 8, 1) == []
        loader.close()
        assert len(dataset.acloses) == 1


def test_a_close_from_another_thread_between_the_first_pulls_check_and_swap_still_ends_the_epoch() -> None:
    """A lean epoch's first ``next()`` swaps the mapper's ``map()`` in as the epoch's source
    (if the source is still the first-pull one); a ``close()`` from another thread in between
    the check and the swap set ENDED, which the swap overwrote: the epoch ran on after close.
    A line tracer pauses the first ``next()`` just before the swap and closes there."""
    import inspect
    import sys

    from torch_threadloader.epoch import hooks

    code = hooks._FirstPull.__next__.__code__
    lines, first = inspect.getsourcelines(hooks._FirstPull.__next__)
    swap = first + next(i for i, line in enumerate(lines) if "epoch._source = raw" in line)
    loader = ThreadLoader(RangeDataset(12), batch_size=4)
    it = iter(loader)
    closed: list[bool] = []

    def at_swap(frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_lineno == swap and not closed:
            closer = threading.Thread(target=it.close)
            closer.start()
            closer.join()
            closed.append(True)
        return at_swap

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        return at_swap if frame.f_code is code else None

    previous = sys.gettrace()  # a coverage tool's or a debugger's: put back after
    sys.settrace(tracer)
    try:
        with pytest.raises(dp.EpochClosedError):
            next(it)
    finally:
        sys.settrace(previous)
        loader.close()
    assert closed == [True]  # the close came where the test says
    with pytest.raises(StopIteration):
        next(it)  # and the epoch stays ended
