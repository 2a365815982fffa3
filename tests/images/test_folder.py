"""ImageFolder: torchvision's classes, class_to_idx, samples and order, for a local path and for
fsspec URLs; items decoded by decode_image; a bad file fails only its batch, naming the file."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest
import torch
import torchvision.datasets
from torch.utils.data import DataLoader
from torchvision.transforms.v2.functional import pil_to_tensor

from tests.fixtures.images import write_tree
from torch_threadloader import ThreadLoader
from torch_threadloader.images import ImageDecodeError, ImageFolder


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return write_tree(tmp_path / "train")


@pytest.fixture
def memory_tree(tree: Path) -> Iterator[str]:
    """The same tree copied into fsspec's in-memory filesystem; removed after the test."""
    fs = fsspec.filesystem("memory")
    root = f"/images-{uuid.uuid4().hex}/train"
    for path in sorted(tree.rglob("*")):
        if path.is_file():
            fs.pipe_file(f"{root}/{path.relative_to(tree).as_posix()}", path.read_bytes())
    yield f"memory://{root}"
    fs.rm(root.rsplit("/", 1)[0], recursive=True)


def relative(samples: list[tuple[str, int]], root: str) -> list[tuple[str, int]]:
    prefix = root.rstrip("/") + "/"
    assert all(path.startswith(prefix) for path, _ in samples), (samples[:2], prefix)
    return [(path[len(prefix) :], target) for path, target in samples]


def assert_same_listing(ours: ImageFolder, theirs: torchvision.datasets.ImageFolder, root: str) -> None:
    assert ours.classes == theirs.classes == ["Ant", "bee", "cat", "dog"]
    assert ours.class_to_idx == theirs.class_to_idx
    assert relative(ours.samples, root) == relative(theirs.samples, str(theirs.root))
    assert ours.targets == theirs.targets
    assert len(ours) == len(theirs) == 7


def test_local_root_lists_as_torchvision_does(tree):
    ours, theirs = ImageFolder(tree), torchvision.datasets.ImageFolder(str(tree))
    assert ours.samples == theirs.samples  # the same paths, not only the same names
    assert_same_listing(ours, theirs, str(tree))


def test_items_are_torchvisions_images_as_tensors(tree):
    ours, theirs = ImageFolder(tree), torchvision.datasets.ImageFolder(str(tree))
    for i in range(len(ours)):
        (image, target), (pil, their_target) = ours[i], theirs[i]
        assert target == their_target
        expected = pil_to_tensor(pil)
        assert image.dtype == torch.uint8 and image.shape == expected.shape
        if ours.samples[i][0].lower().endswith((".jpg", ".jpeg")):
            assert (image.int() - expected.int()).abs().float().mean() < 2  # two JPEG decoders
        else:
            assert torch.equal(image, expected)


@pytest.mark.parametrize("scheme", ["file", "memory"])
def test_fsspec_urls_list_as_torchvision_does(tree, memory_tree, scheme):
    root = f"file://{tree}" if scheme == "file" else memory_tree
    ours, theirs = ImageFolder(root), torchvision.datasets.ImageFolder(str(tree))
    assert_same_listing(ours, theirs, root if scheme == "memory" else f"file://{tree}")
    local = ImageFolder(tree)
    for i in range(len(ours)):
        assert ours.samples[i][0].startswith(f"{scheme}://")
        assert torch.equal(ours[i][0], local[i][0])


def test_extension_rules_and_is_valid_file_follow_torchvision(tree):
    only_png = ImageFolder(tree, extensions=(".png",), allow_empty=True)
    theirs = torchvision.datasets.ImageFolder(
        str(tree), is_valid_file=lambda p: p.lower().endswith(".png"), allow_empty=True
    )
    assert only_png.samples == theirs.samples

    def is_valid(path: str) -> bool:
        return path.endswith(("a.png", "z.jpeg"))

    mine = ImageFolder(tree, is_valid_file=is_valid, allow_empty=True)
    assert mine.samples == torchvision.datasets.ImageFolder(str(tree), is_valid_file=is_valid, allow_empty=True).samples
    assert [Path(p).name for p, _ in mine.samples] == ["a.png", "z.jpeg"]


def test_empty_classes_raise_as_torchvision_does(tree, memory_tree):
    with pytest.raises(FileNotFoundError) as theirs:
        torchvision.datasets.ImageFolder(str(tree), is_valid_file=lambda p: p.endswith(".png"))
    for root in (tree, memory_tree):
        with pytest.raises(FileNotFoundError) as ours:
            ImageFolder(root, is_valid_file=lambda p: p.endswith(".png"))
        assert str(ours.value) == str(theirs.value)


def test_missing_root_and_root_without_classes(tmp_path):
    with pytest.raises(FileNotFoundError):
        ImageFolder(tmp_path / "nope")
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.png").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="class folder"):
        ImageFolder(tmp_path / "flat")
    with pytest.raises(FileNotFoundError, match="class folder"):
        ImageFolder(f"file://{tmp_path / 'flat'}")
    with pytest.raises(ValueError, match="storage_options"):
        ImageFolder(tmp_path, storage_options={"anon": True})


def test_transforms_and_options_are_applied(tree):
    ds = ImageFolder(tree, transform=lambda x: x.float() / 255, target_transform=lambda t: t * 10, mode="L")
    image, target = ds[0]
    assert image.dtype == torch.float32 and image.shape[0] == 1
    assert target == ds.samples[0][1] * 10


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_corrupt_file_fails_only_its_batch_and_names_it(tree, num_workers):
    bad = tree / "cat" / "b.jpg"
    bad.write_bytes(bad.read_bytes()[:60])
    ds = ImageFolder(tree, transform=lambda x: torch.nn.functional.interpolate(x[None].float(), size=(8, 8))[0])
    bad_index = [p for p, _ in ds.samples].index(str(bad))
    loader = ThreadLoader(ds, batch_size=2, num_workers=num_workers)
    outcomes = []
    it = iter(loader)
    for _ in range(len(loader)):
        try:
            _, targets = next(it)
            outcomes.append(len(targets))
        except ImageDecodeError as exc:
            assert str(bad) in str(exc)
            outcomes.append("error")
    with pytest.raises(StopIteration):
        next(it)
    assert outcomes[bad_index // 2] == "error"
    assert outcomes.count("error") == 1
    assert sum(n for n in outcomes if n != "error") == len(ds) - 2


def test_torch_worker_processes_load_it_too(tree):
    folder = ImageFolder(tree, transform=lambda x: x[:, :4, :4].clone(), seed=1)
    processes = list(DataLoader(folder, batch_size=None, num_workers=2))
    threads = list(ThreadLoader(folder, batch_size=None, num_workers=2))
    assert len(processes) == len(threads) == len(folder)
    for (a, t), (b, u) in zip(processes, threads, strict=True):
        assert torch.equal(a, b) and t == u
