"""An error report never fails: an exception whose ``__str__`` (or ``__repr__``) raises is
still raised to the caller as itself (threads) or as its type (worker processes), and
recorded by ``on_error="skip"``, and the worker that met it lives on."""

from __future__ import annotations

import pytest
from torch.utils.data import Dataset

from torch_threadloader import ThreadLoader

pytestmark = pytest.mark.usefixtures("no_child_left")


class Unprintable(Exception):
    """An exception whose ``str()`` and ``repr()`` raise."""

    def __str__(self) -> str:
        raise RuntimeError("str() of this exception fails")

    def __repr__(self) -> str:
        raise RuntimeError("repr() of this exception fails")


class UnprintableAt(Dataset[int]):
    """``ds[i] == i``; index ``bad`` raises :class:`Unprintable`."""

    def __init__(self, n: int, bad: int) -> None:
        self.n = n
        self.bad = bad

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i == self.bad:
            raise Unprintable()
        return i


MODES = {"threads": {"num_workers": 2}, "processes": {"num_workers": 1, "worker_processes": 1}}


@pytest.mark.parametrize("mode", MODES)
def test_an_unprintable_error_fails_its_batch_and_the_loader_goes_on(mode):
    with ThreadLoader(UnprintableAt(8, bad=3), batch_size=2, **MODES[mode]) as loader:
        it = iter(loader)
        got = [next(it).tolist()]
        with pytest.raises(Unprintable):
            next(it)
        got += [b.tolist() for b in it]
    assert got == [[0, 1], [4, 5], [6, 7]]


@pytest.mark.parametrize("mode", MODES)
def test_an_unprintable_error_is_skipped_and_recorded(mode):
    with ThreadLoader(UnprintableAt(8, bad=3), batch_size=2, on_error="skip", **MODES[mode]) as loader:
        got = [b.tolist() for b in loader]
        records = loader.errors()
    assert {i for b in got for i in b} == {0, 1, 2, 4, 5, 6, 7}  # skipped, the batch refilled
    assert [(r["index"], r["type"]) for r in records] == [(3, "Unprintable")]
    assert "str() failed" in records[0]["message"]
