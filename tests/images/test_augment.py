"""Per-sample random draws: torchvision v2 transforms, used as they are, draw from a generator of
(seed, epoch, index), so batches are bit-identical for any num_workers, item_concurrency, timing,
run, and after a resume; torch's global generator is never touched."""

from __future__ import annotations

import copy
import os
import pickle
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import torchvision
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision.transforms import v2

from tests.fixtures.images import write_jpeg_folder
from torch_threadloader import ThreadLoader
from torch_threadloader.images import (
    Augmented,
    EpochCounter,
    ImageFolder,
    current_generator,
    sample_draws,
    sample_generator,
)

TRANSFORMS = {
    "RandomResizedCrop": lambda: v2.RandomResizedCrop(16, antialias=True),
    "RandomHorizontalFlip": lambda: v2.RandomHorizontalFlip(),
    "ColorJitter": lambda: v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
    "RandomErasing": lambda: v2.RandomErasing(p=0.9, value="random"),
    "AutoAugment": lambda: v2.AutoAugment(),
}


def pipeline() -> v2.Compose:
    return v2.Compose(
        [
            v2.AutoAugment(),
            v2.RandomResizedCrop(24, antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
            v2.ToDtype(torch.float32, scale=True),
            v2.RandomErasing(p=0.5, value="random"),
        ]
    )


def image(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (3, 32, 40), dtype=torch.uint8, generator=g)


def test_v2_transforms_do_not_use_pythons_or_numpys_global_generators():
    source_dir = Path(torchvision.__file__).parent / "transforms" / "v2"
    pattern = re.compile(
        r"^\s*(import random|from random import)|\brandom\.(random|randint|choice|uniform|shuffle)\(|np\.random\.", re.M
    )
    offenders = [p.name for p in source_dir.rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_each_transform_draws_only_from_the_sample_generator(name):
    transform = TRANSFORMS[name]()
    outputs = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        before = torch.get_rng_state()
        with sample_draws(sample_generator(7, 0, 3)):
            outputs.append(transform(image()))
        assert torch.equal(torch.get_rng_state(), before), "a draw went to torch's global generator"
    assert torch.equal(outputs[0], outputs[1])
    others = []
    for index in range(12):
        with sample_draws(sample_generator(7, 0, index)):
            others.append(transform(image()))
    assert any(not torch.equal(others[0], o) for o in others[1:]), "draws do not depend on the index"


def test_generators_depend_on_seed_epoch_and_index():
    draws = {
        key: torch.rand(4, generator=sample_generator(*key)) for key in [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)]
    }
    values = list(draws.values())
    assert all(not torch.equal(a, b) for i, a in enumerate(values) for b in values[i + 1 :])
    assert torch.equal(torch.rand(4, generator=sample_generator(0, 1, 0)), draws[(0, 1, 0)])
    for bad, name in [((-1, 0, 0), "seed"), ((0, 0, 1.5), "index"), ((0, True, 0), "epoch")]:
        with pytest.raises(ValueError, match=name):
            sample_generator(*bad)  # type: ignore[arg-type]


def test_the_mode_is_per_thread():
    generator = sample_generator(0, 0, 0)
    inside, started, release = threading.Event(), threading.Event(), threading.Event()
    seen: list[torch.Generator | None] = []

    def other_thread() -> None:
        started.set()
        inside.wait(5)
        before = torch.get_rng_state()
        torch.rand(3)  # must use the global generator: the block is on the main thread
        seen.append(current_generator())
        seen.append(None if torch.equal(before, torch.get_rng_state()) else generator)
        release.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    started.wait(5)
    with sample_draws(generator):
        assert current_generator() is generator
        inside.set()
        release.wait(5)
    thread.join(5)
    assert seen == [None, generator]  # the other thread saw no block and advanced the global state
    assert current_generator() is None


def test_explicit_generators_and_device_arguments_are_left_alone():
    mine = torch.Generator().manual_seed(3)
    expected = torch.rand(2, generator=torch.Generator().manual_seed(3))
    with sample_draws(sample_generator(0, 0, 0)):
        assert torch.equal(torch.rand(2, generator=mine), expected)
    with pytest.raises(ValueError, match=r"CPU torch\.Generator"):
        with sample_draws("not a generator"):  # type: ignore[arg-type]
            pass


class Images(Dataset[tuple[torch.Tensor, int]]):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return image(i), i


def epoch_batches(loader) -> list[torch.Tensor]:
    return [images.clone() for images, _ in loader]


def test_augmented_batches_are_bit_identical_for_any_loader_setting():
    def make() -> Augmented:
        return Augmented(Images(24), pipeline(), seed=1234)

    reference = epoch_batches(DataLoader(make(), batch_size=4))
    settings = [
        {"num_workers": 0},
        {"num_workers": 1},
        {"num_workers": 4},
        {"num_workers": 4, "item_concurrency": 3},
        {"num_workers": 2, "item_concurrency": 2, "in_order": False},
        {"num_workers": 4, "persistent_workers": True},
    ]
    for options in settings:
        for run in range(2):
            torch.manual_seed(run)  # the global generator must not matter
            got = epoch_batches(ThreadLoader(make(), batch_size=4, **options))
            if options.get("in_order") is False:
                key = lambda t: t.sum().item()  # noqa: E731
                got, expected = sorted(got, key=key), sorted(reference, key=key)
            else:
                expected = reference
            assert len(got) == len(expected)
            assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True)), options


def test_torch_worker_processes_give_the_same_batches():
    dataset = Augmented(Images(8), pipeline(), seed=5)
    processes = epoch_batches(DataLoader(dataset, batch_size=4, num_workers=2))
    threads = epoch_batches(ThreadLoader(dataset, batch_size=4, num_workers=2))
    assert all(torch.equal(a, b) for a, b in zip(processes, threads, strict=True))


@pytest.mark.parametrize("worker_copy", [None, "shallow", "deep", "pickle"])
def test_set_epoch_changes_the_draws_and_reaches_persistent_workers(worker_copy):
    """Whatever each worker's copy is made of (the default: pickled on a free-threaded build),
    the epoch set on the dataset is the one its copies in this process draw for."""
    dataset = Augmented(Images(8), pipeline(), seed=9)
    loader = ThreadLoader(dataset, batch_size=4, num_workers=2, persistent_workers=True, worker_copy=worker_copy)
    first = epoch_batches(loader)
    dataset.set_epoch(1)
    second = epoch_batches(loader)
    dataset.set_epoch(0)
    again = epoch_batches(loader)
    loader.close()
    assert not any(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    with pytest.raises(ValueError, match="epoch"):
        dataset.set_epoch(-1)


def test_an_epoch_counter_copied_in_this_process_is_the_same_one_and_another_process_gets_its_own():
    counter = EpochCounter(2)
    assert copy.copy(counter) is counter
    assert copy.deepcopy(counter) is counter
    assert pickle.loads(pickle.dumps(counter)) is counter
    code = "import pickle, sys; c = pickle.loads(sys.stdin.buffer.read()); print(c.get(), type(c).__name__)"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        [sys.executable, "-c", code], input=pickle.dumps(counter), capture_output=True, check=True, env=env
    ).stdout.decode()
    assert out.split() == ["2", "EpochCounter"]


def test_resuming_mid_epoch_gives_the_rest_of_the_epoch():
    def make() -> Augmented:
        ds = Augmented(Images(16), pipeline(), seed=77)
        ds.set_epoch(3)
        return ds

    order = torch.randperm(16, generator=torch.Generator().manual_seed(0)).tolist()
    full = epoch_batches(ThreadLoader(Subset(make(), order), batch_size=4, num_workers=2))
    # A fresh process resuming after two batches: a fresh dataset, the remaining indices.
    rest = epoch_batches(ThreadLoader(Subset(make(), order[8:]), batch_size=4, num_workers=3))
    assert all(torch.equal(a, b) for a, b in zip(full[2:], rest, strict=True))


def test_image_folder_with_seed_is_reproducible(tmp_path):
    root = write_jpeg_folder(tmp_path / "train", classes=2, per_class=6)
    folder = ImageFolder(root, transform=pipeline(), seed=42)
    reference = epoch_batches(ThreadLoader(folder, batch_size=4))
    for workers in (1, 4):
        got = epoch_batches(ThreadLoader(copy.copy(folder), batch_size=4, num_workers=workers, item_concurrency=2))
        assert all(torch.equal(a, b) for a, b in zip(reference, got, strict=True))
    unseeded = ImageFolder(root, transform=pipeline())
    torch.manual_seed(0)
    a = epoch_batches(ThreadLoader(unseeded, batch_size=4))
    torch.manual_seed(1)
    b = epoch_batches(ThreadLoader(unseeded, batch_size=4))
    assert not all(torch.equal(x, y) for x, y in zip(a, b, strict=True))  # without seed: torch's global draws
