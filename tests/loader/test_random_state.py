"""Each worker owns torch's, Python's and NumPy's global random state, as a worker process does:
a dataset that reseeds the global generator per item (torchvision's ``FakeData``) gives its own
items in every mode, random transforms give torch's ``DataLoader``'s batches (the oracle) for
the same seed, and the caller's global state after an epoch is torch's."""

from __future__ import annotations

import asyncio
import random
import threading
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, IterableDataset
from torchvision.datasets import FakeData
from torchvision.transforms import v2

from tests.fixtures.processes import workers_in
from torch_threadloader import ThreadLoader, WorkerRandomStateWarning, get_worker_info

pytestmark = pytest.mark.usefixtures("no_child_left")

N = 48


def fake() -> FakeData:
    return FakeData(N, (3, 8, 8), 10, transform=v2.ToImage())


def labels_of(batches: list) -> tuple[list[int], list[int]]:
    """``(indices, labels)`` of ``return_indices`` batches, in the order they came."""
    indices = [int(i) for batch in batches for i in batch[0]]
    labels = [int(y) for batch in batches for y in batch[1][1]]
    return indices, labels


class AsyncReseeding(Dataset):
    """FakeData's pattern across an await: save the global state, seed it with the index, draw
    after the await (other items run meanwhile), set the state back."""

    def __len__(self) -> int:
        return N

    async def __getitem__(self, index: int) -> int:
        saved = torch.get_rng_state()
        torch.manual_seed(index)
        await asyncio.sleep(0.001 * (index % 3))
        label = int(torch.randint(0, 10, ()))
        torch.set_rng_state(saved)
        return label


def async_label(index: int) -> int:
    saved = torch.get_rng_state()
    torch.manual_seed(index)
    label = int(torch.randint(0, 10, ()))
    torch.set_rng_state(saved)
    return label


class FakeStream(IterableDataset):
    """FakeData's items, sharded over the workers; each comes as ``(index, label)``."""

    def __iter__(self):
        data, info = fake(), get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, N, step):
            yield i, data[i][1]


MAP_MODES = {
    "no workers": {"num_workers": 0},
    "4 threads": {"num_workers": 4},
    "2 threads, persistent": {"num_workers": 2, "persistent_workers": True},
    "item_concurrency": {"num_workers": 2, "item_concurrency": 4},
    "item_concurrency, no workers": {"num_workers": 0, "item_concurrency": 4},
    "out of order": {"num_workers": 3, "in_order": False},
    "stragglers": {"num_workers": 2, "defer_stragglers": True},
    "stragglers, item_concurrency": {"num_workers": 2, "item_concurrency": 3, "defer_stragglers": True},
    "per_sample_rng": {"num_workers": 2, "per_sample_rng": True},
    "processes": {"num_workers": 2, "worker_processes": 2},
}


@pytest.mark.parametrize("mode", list(MAP_MODES))
def test_fakedata_gives_its_own_items_in_every_mode(mode):
    data = fake()
    want = [data[i][1] for i in range(N)]
    with ThreadLoader(data, batch_size=8, shuffle=True, return_indices=True, **MAP_MODES[mode]) as loader:
        for _ in range(2):
            indices, labels = labels_of(list(loader))
            assert sorted(indices) == list(range(N))
            wrong = [i for i, y in zip(indices, labels, strict=True) if want[i] != y]
            assert not wrong, f"{len(wrong)} of {N} labels are not FakeData's own"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_workers": 0},
        {"num_workers": 3},
        {"num_workers": 2, "item_concurrency": 4},
        {"num_workers": 2, "defer_stragglers": True},
    ],
    ids=["no workers", "3 workers", "item_concurrency", "stragglers"],
)
def test_async_items_own_their_state_across_awaits(kwargs):
    with ThreadLoader(AsyncReseeding(), batch_size=8, return_indices=True, **kwargs) as loader:
        batches = list(loader)
    indices = [int(i) for b in batches for i in b[0]]
    labels = [int(y) for b in batches for y in b[1]]
    assert sorted(indices) == list(range(N))
    assert labels == [async_label(i) for i in indices]


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_an_iterable_datasets_workers_own_their_state(mode):
    data = fake()
    with ThreadLoader(FakeStream(), batch_size=4, **workers_in(mode, 2)) as loader:
        pairs = [(int(i), int(y)) for indices, labels in loader for i, y in zip(indices, labels, strict=True)]
    assert sorted(i for i, _ in pairs) == list(range(N))
    assert all(y == data[i][1] for i, y in pairs)


class Draws(Dataset):
    """Item ``i``: ``i``, two draws of torch's global generator, one of Python's ``random`` and
    one of NumPy's ``np.random``: a dataset written for worker processes."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, index: int) -> torch.Tensor:
        drawn = torch.rand(2, dtype=torch.float64)
        return torch.tensor([index, *drawn.tolist(), random.random(), float(np.random.rand())], dtype=torch.float64)


def augment() -> v2.Compose:
    return v2.Compose(
        [
            v2.RandomResizedCrop(16, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
            v2.AutoAugment(),
            v2.ToDtype(torch.float32, scale=True),
            v2.RandomErasing(p=0.5),
        ]
    )


class Augmented(Dataset):
    """A fixed uint8 image per index through a torchvision v2 pipeline in ``__getitem__``."""

    def __init__(self) -> None:
        self.transform = augment()

    def __len__(self) -> int:
        return 20

    def __getitem__(self, index: int) -> torch.Tensor:
        image = (torch.arange(3 * 24 * 24).reshape(3, 24, 24) * (index + 1) % 251).to(torch.uint8)
        return self.transform(image)


def seeded_globals(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def global_states() -> tuple:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def assert_same_states(a: tuple, b: tuple) -> None:
    assert torch.equal(a[0], b[0]), "torch's global generator"
    assert a[1] == b[1], "Python's random"
    assert a[2][0] == b[2][0] and np.array_equal(a[2][1], b[2][1]) and a[2][2:] == b[2][2:], "NumPy's np.random"


def three_epochs(loader_class, dataset_class, *, seed: int, generator: bool, **kwargs) -> tuple[list, tuple]:
    """Three epochs of ``loader_class`` from globals seeded with ``seed``, and the globals after."""
    seeded_globals(seed)
    gen = torch.Generator().manual_seed(seed) if generator else None
    loader = loader_class(dataset_class(), batch_size=4, shuffle=True, generator=gen, **kwargs)
    try:
        epochs = [list(loader) for _ in range(3)]
    finally:
        if isinstance(loader, ThreadLoader):
            loader.close()
    return epochs, global_states()


def assert_same_epochs(want: list, got: list) -> None:
    assert len(want) == len(got)
    for epoch, (a, b) in enumerate(zip(want, got, strict=True)):
        assert len(a) == len(b), f"epoch {epoch}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert torch.equal(x, y), f"epoch {epoch}, batch {i} differs from DataLoader's"


@pytest.mark.parametrize("persistent", [False, True], ids=["per epoch", "persistent"])
@pytest.mark.parametrize("dataset_class", [Draws, Augmented])
def test_random_items_are_dataloaders_for_the_same_seed_over_three_epochs(dataset_class, persistent):
    kwargs = {"num_workers": 2, "persistent_workers": persistent}
    want, want_after = three_epochs(DataLoader, dataset_class, seed=11, generator=True, **kwargs)
    got, got_after = three_epochs(ThreadLoader, dataset_class, seed=11, generator=True, **kwargs)
    assert_same_epochs(want, got)
    assert_same_states(want_after, got_after)


@pytest.mark.parametrize("num_workers", [0, 3])
def test_without_a_generator_the_seed_and_the_callers_state_are_torchs(num_workers):
    want, want_after = three_epochs(DataLoader, Draws, seed=5, generator=False, num_workers=num_workers)
    got, got_after = three_epochs(ThreadLoader, Draws, seed=5, generator=False, num_workers=num_workers)
    assert_same_epochs(want, got)
    assert_same_states(want_after, got_after)


def test_worker_processes_give_dataloaders_random_items():
    want, _ = three_epochs(DataLoader, Draws, seed=3, generator=True, num_workers=4)
    got, _ = three_epochs(ThreadLoader, Draws, seed=3, generator=True, num_workers=2, worker_processes=2)
    assert_same_epochs(want, got)


def reseeding_init(worker_id: int) -> None:
    torch.manual_seed(1000 + worker_id)
    random.seed(2000 + worker_id)
    np.random.seed(3000 + worker_id)


def test_worker_init_fn_seeds_the_workers_own_state_as_in_a_process():
    kwargs = {"num_workers": 2, "worker_init_fn": reseeding_init}
    want, want_after = three_epochs(DataLoader, Draws, seed=8, generator=True, **kwargs)
    got, got_after = three_epochs(ThreadLoader, Draws, seed=8, generator=True, **kwargs)
    assert_same_epochs(want, got)
    assert_same_states(want_after, got_after)


def test_the_global_functions_answer_for_the_worker_inside_it():
    class Seen(Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, index: int) -> torch.Tensor:
            info = get_worker_info()
            generator = torch.random.thread_safe_generator()
            assert generator is not None and info is not None
            initial = torch.initial_seed()
            with torch.random.fork_rng():
                torch.manual_seed(99)
                assert torch.initial_seed() == 99
            assert torch.initial_seed() == initial == info.seed
            # the global draws and the worker's thread-safe generator are one stream, as in a process
            before = generator.get_state()
            torch.rand(1)
            assert not torch.equal(before, generator.get_state())
            return torch.tensor([initial])

    torch.manual_seed(1)
    with ThreadLoader(Seen(), batch_size=None, num_workers=2) as loader:
        seeds = [int(x) for x in loader]
    assert torch.initial_seed() == 1
    assert len(set(seeds)) == 2


def test_item_concurrency_draws_are_reproducible_and_new_each_persistent_epoch():
    def run() -> list:
        gen = torch.Generator().manual_seed(4)
        with ThreadLoader(
            Draws(), batch_size=4, num_workers=2, item_concurrency=3, persistent_workers=True, generator=gen
        ) as loader:
            return [torch.cat(list(loader)) for _ in range(2)]

    first, second = run(), run()
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    # the same items (no shuffle), drawn anew in the second epoch of the same workers
    assert not torch.equal(first[0][:, 1:], first[1][:, 1:])


def test_per_sample_rng_gives_the_same_draws_for_any_num_workers_and_reaches_manual_seed():
    def run(num_workers: int) -> torch.Tensor:
        with ThreadLoader(
            Draws(),
            batch_size=4,
            num_workers=num_workers,
            per_sample_rng=True,
            generator=torch.Generator().manual_seed(2),
        ) as loader:
            return torch.cat(list(loader))

    assert torch.equal(run(0), run(3))
    data = fake()
    with ThreadLoader(data, batch_size=8, num_workers=2, per_sample_rng=True) as loader:
        labels = [int(y) for _, ys in loader for y in ys]
    assert labels == [data[i][1] for i in range(N)]


class Dropping(Dataset):
    def __init__(self, training: bool = True) -> None:
        self.training = training

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        return F.dropout(torch.ones(4), 0.5, training=self.training)


def test_a_draw_that_cannot_be_isolated_is_named_once_with_the_dataset():
    with pytest.warns(WorkerRandomStateWarning, match=r"dropout.*Dropping") as record:
        with ThreadLoader(Dropping(), batch_size=2, num_workers=2) as loader:
            list(loader)
    assert len([w for w in record if issubclass(w.category, WorkerRandomStateWarning)]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", WorkerRandomStateWarning)
        with ThreadLoader(Dropping(training=False), batch_size=2, num_workers=2) as loader:
            list(loader)


def test_nothing_changes_outside_a_loaders_workers():
    random.seed(5)
    np.random.seed(5)
    generator = torch.manual_seed(5)
    assert generator is torch.default_generator
    got = [random.random(), random.randint(0, 100), float(np.random.rand()), float(torch.rand(1))]
    python, numpy = random.Random(5), np.random.RandomState(5)
    want = [
        python.random(),
        python.randint(0, 100),
        float(numpy.rand()),
        float(torch.rand(1, generator=torch.Generator().manual_seed(5))),
    ]
    assert got == want

    seen = []

    def elsewhere() -> None:  # a thread that is not a loader's draws from the process's state
        torch.manual_seed(6)
        seen.append(torch.initial_seed())

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert seen == [6] and torch.initial_seed() == 6


class InitialSeeds(Dataset):
    """Item ``i``: the initial seed of the global generator its call sees."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([torch.initial_seed() % 2**62])  # a process's own seed may pass int64


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_own_random_state_false_leaves_the_workers_on_the_processs_state(mode):
    """The switch off: the workers' global calls are the process's (each worker process has its
    own process, so its seed is still the worker's there); on: the worker's own, base_seed + id."""
    kwargs = workers_in(mode, 2)
    torch.manual_seed(77)
    with ThreadLoader(InitialSeeds(), batch_size=None, own_random_state=False, **kwargs) as loader:
        shared = {int(x) for x in loader}
    with ThreadLoader(InitialSeeds(), batch_size=None, **kwargs) as loader:
        own = {int(x) for x in loader}
    assert len(own) == 2 and 77 not in own
    if mode == "threads":
        assert shared == {77}
    assert torch.initial_seed() == 77


def test_own_random_state_set_between_epochs_is_used_from_the_next_one():
    torch.manual_seed(78)
    with ThreadLoader(InitialSeeds(), batch_size=None, num_workers=2, persistent_workers=True) as loader:
        first = {int(x) for x in loader}
        loader.own_random_state = False
        second = {int(x) for x in loader}
        with pytest.raises(TypeError, match="own_random_state must be a bool"):
            loader.own_random_state = "no"
    assert 78 not in first and second == {78}


def test_torch_compile_traces_pythons_random_as_without_the_package():
    """The module functions the package wraps are traced by Dynamo as the originals are: no
    graph break at ``random.random()``, the same values as eager."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def step(x):
        y = x * 2
        return (y + random.random() + random.randint(0, 3)) * 3

    torch._dynamo.reset()
    compiled = torch.compile(step, backend=backend)
    random.seed(0)
    got = compiled(torch.ones(2))
    random.seed(0)
    assert torch.equal(got, step(torch.ones(2)))
    assert len(graphs) == 1, f"{len(graphs)} graphs: Dynamo broke the graph at a wrapped function"
    torch._dynamo.reset()


def test_an_items_state_is_hashed_on_first_use_and_draws_as_its_seed():
    from torch_threadloader.random_state import ItemStreams, WorkerRNG, sample_seed

    rng, seed = ItemStreams(7, 2, "Owner")(5), sample_seed(7, 2, 5)
    assert (rng.sample, rng.owner, rng._key) == (True, "Owner", (7, 2, 5))  # nothing hashed yet
    same = WorkerRNG.for_seed(seed)
    assert rng.numpy_state.random_sample() == same.numpy_state.random_sample()
    assert (rng.seed, rng._key, rng.numpy_seed) == (seed, None, [seed & 0xFFFFFFFF, seed >> 32])
    assert rng.random_generator.random() == same.random_generator.random()
    assert torch.equal(torch.rand(3, generator=rng.torch_generator), torch.rand(3, generator=same.torch_generator))
    assert rng.numpy_generator.random() == same.numpy_generator.random()


def test_drawn_gives_each_step_of_an_item_its_state_and_nothing_between_steps():
    """Two items awaited at once on one loop, a plain task stepping between theirs: each item's
    steps draw from its own state, the plain task sees no state and no mode on the thread."""
    from torch_threadloader.random_state import Drawn, WorkerRNG, current_rng

    a, b = WorkerRNG(1), WorkerRNG(2)
    between = []

    async def item(rng: WorkerRNG) -> list[float]:
        out = []
        for _ in range(3):
            assert current_rng() is rng
            out.append(float(torch.rand(())))
            await asyncio.sleep(0)
        return out

    async def plain() -> None:
        for _ in range(4):
            between.append((current_rng(), torch._C._len_torch_function_stack()))
            await asyncio.sleep(0)

    async def main() -> list[list[float] | None]:
        return await asyncio.gather(Drawn(item(a), a), Drawn(item(b), b), plain())

    got_a, got_b, _ = asyncio.run(main())
    assert got_a == torch.rand(3, generator=torch.Generator().manual_seed(1)).tolist()
    assert got_b == torch.rand(3, generator=torch.Generator().manual_seed(2)).tolist()
    assert between == [(None, 0)] * 4
    assert current_rng() is None and torch._C._len_torch_function_stack() == 0
