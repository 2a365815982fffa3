"""Skipping bad samples: ``on_error``, ``max_errors``, ``errors()``, and skips in the state."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

from tests.fixtures.datasets import UnshardedStream
from tests.fixtures.scripts import run_ranks
from torch_threadloader import ThreadLoader
from torch_threadloader.skip import PAST_RECORDS_KEPT, TooManyErrors
from torch_threadloader.stats import stage

N = 100
BAD = {3, 17, 18, 55, 99}


class Corrupt(Dataset[int]):
    """Sample ``i`` is ``i``; the samples in ``bad`` raise, as a corrupt file would."""

    def __init__(self, bad: set[int] = BAD, n: int = N) -> None:
        self.bad, self.n = bad, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        if i in self.bad:
            raise ValueError(f"sample {i} is corrupt")
        return i


class AsyncCorrupt(Corrupt):
    async def __getitem__(self, i: int) -> int:  # type: ignore[override]
        await asyncio.sleep(0)
        return Corrupt.__getitem__(self, i)


class BatchedCorrupt(Corrupt):
    def __getitems__(self, indices: list[int]) -> list[int]:
        return [Corrupt.__getitem__(self, i) for i in indices]


@pytest.mark.parametrize("kind", ["sync", "async", "getitems"])
@pytest.mark.parametrize(("nw", "ic"), [(0, 1), (2, 1), (2, 4)])
def test_skipped_samples_are_replaced_in_their_batch_and_recorded(kind: str, nw: int, ic: int) -> None:
    data = {"sync": Corrupt, "async": AsyncCorrupt, "getitems": BatchedCorrupt}[kind]()
    with ThreadLoader(data, batch_size=8, num_workers=nw, item_concurrency=ic, on_error="skip", stats=True) as loader:
        batches = [b.tolist() for b in loader]
        errors = loader.errors()
        skipped = loader.stats()["skipped"]
    assert [len(b) for b in batches] == [8] * 12 + [4], "every batch keeps its size"
    assert sorted(r["index"] for r in errors) == sorted(BAD) and skipped == len(BAD)
    seen = [i for b in batches for i in b]
    assert set(seen) == set(range(N)) - BAD, "no good sample is lost"
    for r in errors:
        assert r["type"] == "ValueError" and r["message"] == f"sample {r['index']} is corrupt"
        assert r["stage"] == "fetch" and r["attempts"] == 1 and r["epoch"] == 1
    # The replacement is the next good sample of the same batch.
    first = batches[0]
    assert first == [0, 1, 2, 4, 4, 5, 6, 7]


@pytest.mark.parametrize("kind", ["sync", "getitems"])
def test_a_record_names_its_batch_with_or_without_workers(kind: str) -> None:
    """The batch's position in the epoch's order, so records match whatever num_workers was,
    also across a resume that changes it."""
    data = {"sync": Corrupt, "getitems": BatchedCorrupt}[kind]()

    def make(nw: int) -> ThreadLoader[Any]:
        g = torch.Generator().manual_seed(1)
        return ThreadLoader(data, batch_size=8, shuffle=True, generator=g, num_workers=nw, on_error="skip")

    def placed(records: list[dict[str, Any]]) -> list[tuple[int, int]]:
        return sorted((r["index"], r["batch"]) for r in records)

    runs = {}
    for nw in (0, 2):
        with make(nw) as loader:
            list(loader)
            runs[nw] = placed(loader.errors())
    # torch's batches of the same order, no sample failing: where each bad sample was.
    clean = torch.utils.data.DataLoader(
        Corrupt(bad=set()), batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(1)
    )
    where = {i: p for p, b in enumerate(clean) for i in b.tolist()}
    assert runs[0] == runs[2] == sorted((i, where[i]) for i in BAD)
    for before, after in ((0, 2), (2, 0)):
        with make(before) as first:
            it = iter(first)
            for _ in range(5):
                next(it)
            state = first.state_dict()
            del it
        with make(after) as resumed:
            resumed.load_state_dict(state)
            list(resumed)
            assert placed(resumed.errors()) == runs[0], (before, after)


def test_a_callable_decides_per_error() -> None:
    class Mixed(Corrupt):
        def __getitem__(self, i: int) -> int:
            if i == 40:
                raise KeyError(i)
            return super().__getitem__(i)

    def only_value_errors(index: Any, exc: BaseException) -> bool:
        return isinstance(exc, ValueError)

    loader = ThreadLoader(Mixed(), batch_size=10, on_error=only_value_errors)
    with pytest.raises(KeyError):
        list(loader)
    assert sorted(r["index"] for r in loader.errors()) == [3, 17, 18], "the batches before 40's skipped theirs"


@pytest.mark.parametrize("max_errors", [2, 0.02])
def test_past_max_errors_the_batch_raises(max_errors: float) -> None:
    loader = ThreadLoader(Corrupt(), batch_size=10, on_error="skip", max_errors=max_errors)
    it = iter(loader)
    next(it)  # sample 3: one error
    with pytest.raises(TooManyErrors, match=r"3 samples failed this epoch, more than max_errors allows \(2\)") as info:
        next(it)  # 17 and 18: three
    assert [r["index"] for r in info.value.errors] == [3, 17, 18]
    it.close()


@pytest.mark.parametrize(
    "mode",
    [{"num_workers": 0}, {"num_workers": 2}, {"num_workers": 1, "worker_processes": 1}],
    ids=["workers-0", "workers-2", "processes"],
)
def test_two_live_epochs_count_and_label_their_own_skips(mode: dict[str, int]) -> None:
    """Two live epochs of one loader (``zip(loader, loader)``): each counts its own skips
    against ``max_errors`` and labels its records with its own epoch. Found in review: the
    second epoch's start took the first's records as the past, and the first's later skips
    went to the second (its label, its count: 4 past a max of 2)."""
    with ThreadLoader(Corrupt({1, 3}, n=8), batch_size=2, on_error="skip", max_errors=2, **mode) as loader:
        pairs = [(a.tolist(), b.tolist()) for a, b in zip(loader, loader, strict=True)]
        records = loader.errors()
    assert [a for a, _ in pairs] == [b for _, b in pairs] == [[0, 0], [2, 2], [4, 5], [6, 7]]
    assert sorted((r["epoch"], r["index"]) for r in records) == [(1, 1), (1, 3), (2, 1), (2, 3)]


def test_the_state_carries_the_skips_of_the_epoch_it_describes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``state_dict()`` describes the epoch whose record the loader holds, and carries that
    epoch's skips. Found in review: it read the newest epoch's policy, so an ``iter()`` that
    failed after starting its policy (here: building its graph) left a state with none."""
    from torch_threadloader.epoch import epoch as epoch_module

    with ThreadLoader(Corrupt({1, 3}, n=8), batch_size=2, on_error="skip") as loader:
        it = iter(loader)
        next(it), next(it)  # the skips of samples 1 and 3 delivered

        def fails(*args: Any) -> Any:
            raise RuntimeError("building the graph failed")

        monkeypatch.setattr(epoch_module, "_build", fails)
        with pytest.raises(RuntimeError, match="building the graph failed"):
            iter(loader)
        monkeypatch.undo()
        state = loader.state_dict()
        it.close()
    assert sorted(r["index"] for r in state["errors"]) == [1, 3]


def test_a_batch_with_no_good_sample_raises() -> None:
    loader = ThreadLoader(Corrupt(bad=set(range(8, 12)), n=12), batch_size=4, on_error="skip")
    it = iter(loader)
    next(it), next(it)
    with pytest.raises(RuntimeError, match="every sample of the batch failed"):
        next(it)


def test_the_stage_a_failure_was_marked_in_is_recorded() -> None:
    class FailsInTransform(Corrupt):
        def __getitem__(self, i: int) -> int:
            with stage("transform"):
                return super().__getitem__(i)

    loader = ThreadLoader(FailsInTransform(), batch_size=10, num_workers=2, on_error="skip")
    list(loader)
    assert {r["stage"] for r in loader.errors()} == {"transform"}


def test_bad_settings_are_refused_naming_them() -> None:
    with pytest.raises(ValueError, match="on_error='skip' needs a map-style dataset"):
        ThreadLoader(UnshardedStream(3), batch_size=2, on_error="skip")
    with pytest.raises(ValueError, match="on_error='skip' needs a map-style dataset"):
        ThreadLoader(Corrupt(), batch_size=None, on_error="skip")
    with pytest.raises(ValueError, match="on_error must be"):
        ThreadLoader(Corrupt(), on_error="ignore")
    with pytest.raises(ValueError, match="max_errors"):
        ThreadLoader(Corrupt(), on_error="skip", max_errors=1.5)
    with pytest.raises(ValueError, match="max_errors"):
        ThreadLoader(Corrupt(), on_error="skip", max_errors=-1)


@pytest.mark.parametrize("k", [1, 3, 6])
@pytest.mark.parametrize("nw", [0, 3])
def test_skips_are_part_of_the_state(k: int, nw: int) -> None:
    def make() -> ThreadLoader[Any]:
        return ThreadLoader(
            Corrupt(),
            batch_size=8,
            shuffle=True,
            generator=torch.Generator().manual_seed(1),
            num_workers=nw,
            in_order=False,
            on_error="skip",
        )

    full = make()
    uninterrupted = sorted(tuple(b.tolist()) for b in full)
    b = make()
    it = iter(b)
    got = [tuple(next(it).tolist()) for _ in range(k)]
    buffer = io.BytesIO()
    torch.save(b.state_dict(), buffer)
    it.close()
    buffer.seek(0)
    c = make()
    c.load_state_dict(torch.load(buffer, weights_only=True))
    rest = [tuple(x.tolist()) for x in c]
    assert sorted(got + rest) == uninterrupted, "the same batches, replacements included"
    assert sorted(r["index"] for r in c.errors()) == sorted(BAD), "each skip reported once"


def test_ddp_ranks_skip_their_corrupt_samples_and_step_equally(tmp_path: Path) -> None:
    results = run_ranks("tests.ddp_skip", tmp_path, timeout=180)
    from tests.ddp_skip import CORRUPT, SAMPLES

    assert len(results[0]["sizes"]) == len(results[1]["sizes"]), "both ranks step as often"
    for r in results:
        assert set(r["sizes"][:-1]) == {r["batch_size"]}, "every batch full"
        assert r["resumed"] == r["full"], "a mid-epoch resume gives the same batches"
        assert r["resumed_errors"] == r["errors"], "and reports each skip once"
    reported = sorted(i for r in results for i in r["errors"])
    assert reported == sorted(CORRUPT), "the report lists exactly the corrupt indices"
    assert SAMPLES == 400


@pytest.mark.parametrize("nw", [0, 2])
def test_return_indices_name_the_sample_that_fills_a_skipped_slot(nw: int) -> None:
    loader = ThreadLoader(Corrupt(bad={2}, n=8), batch_size=4, num_workers=nw, on_error="skip", return_indices=True)
    out = [(list(indices), batch.tolist()) for indices, batch in loader]
    assert out == [([0, 1, 3, 3], [0, 1, 3, 3]), ([4, 5, 6, 7], [4, 5, 6, 7])]


@pytest.mark.parametrize("nw", [0, 2])
def test_the_records_held_stay_bounded_across_epochs(nw: int) -> None:
    """Three samples in four fail, five epochs in a row: the current epoch's records are all
    kept, the earlier epochs' only the newest PAST_RECORDS_KEPT, and the count is of every skip.
    (Before, every record of every epoch was kept and each skip scanned them all: the epochs
    grew slower as they went.)"""
    n, per_epoch = 4_000, 3_000
    bad = {i for i in range(n) if i % 4}
    with ThreadLoader(Corrupt(bad=bad, n=n), batch_size=8, num_workers=nw, on_error="skip") as loader:
        for epoch in range(1, 6):
            assert sum(len(b) for b in loader) == n
            records = loader.errors()
            past = min(per_epoch * (epoch - 1), PAST_RECORDS_KEPT)
            assert len(records) == past + per_epoch, epoch
            assert loader.stats()["skipped"] == per_epoch * epoch
            assert sorted(r["index"] for r in records if r["epoch"] == epoch) == sorted(bad)
            epochs = [r["epoch"] for r in records]
            assert epochs == sorted(epochs), "oldest first"
            if past:
                assert epochs[past - 1] == epoch - 1, "the newest of the earlier epochs are the ones kept"
