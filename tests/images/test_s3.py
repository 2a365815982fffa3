"""AsyncImageFolder over ``s3://`` (s3fs against moto's server on 127.0.0.1): torchvision's
listing of the same tree, the same decoded (and seeded) items as from the local copy, no thread
left behind; ImageFolder refuses an asynchronous filesystem; a missing root is named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import botocore.session
import pytest
import torch
import torchvision.datasets
from torchvision.transforms import v2

from tests.fixtures.images import write_tree
from tests.fixtures.servers import MotoServer, aws_env  # noqa: F401  (aws_env: a fixture)
from torch_threadloader import ThreadLoader
from torch_threadloader.images import AsyncImageFolder, ImageDecodeError, ImageFolder

BUCKET = "images"


@pytest.fixture(scope="module")
def s3_tree(aws_env: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:  # noqa: F811
    """The test tree on disk and uploaded under ``s3://images/train/``, and ``broken/cls/``
    with a good JPEG and a truncated one; the storage options."""
    tree = write_tree(tmp_path_factory.mktemp("s3") / "train")
    server = MotoServer()
    try:
        client = botocore.session.get_session().create_client("s3", endpoint_url=server.endpoint)
        client.create_bucket(Bucket=BUCKET)
        for path in sorted(tree.rglob("*")):
            if path.is_file():
                client.put_object(
                    Bucket=BUCKET, Key=f"train/{path.relative_to(tree).as_posix()}", Body=path.read_bytes()
                )
        good = (tree / "cat" / "b.jpg").read_bytes()
        client.put_object(Bucket=BUCKET, Key="broken/cls/0-good.jpg", Body=good)
        client.put_object(Bucket=BUCKET, Key="broken/cls/1-bad.jpg", Body=good[: len(good) // 3])
        client.close()
        yield tree, {"endpoint_url": server.endpoint}
    finally:
        server.stop()


def test_s3_root_lists_and_loads_as_the_local_copy(s3_tree):
    tree, options = s3_tree
    transform = v2.Compose([v2.RandomResizedCrop(8, antialias=True), v2.RandomHorizontalFlip()])
    ours = AsyncImageFolder(f"s3://{BUCKET}/train", transform=transform, seed=3, storage_options=options)
    theirs = torchvision.datasets.ImageFolder(str(tree))
    assert ours.classes == theirs.classes and ours.class_to_idx == theirs.class_to_idx
    prefix = f"s3://{BUCKET}/train/"
    assert [(p.removeprefix(prefix), t) for p, t in ours.samples] == [
        (str(Path(p).relative_to(tree)), t) for p, t in theirs.samples
    ]
    local = ImageFolder(tree, transform=transform, seed=3)
    for workers in (0, 2):
        with ThreadLoader(ours, batch_size=None, num_workers=workers, item_concurrency=2) as loader:
            items = list(loader)
        assert len(items) == len(local)
        for i, (image, target) in enumerate(items):
            assert torch.equal(image, local[i][0]) and target == local[i][1]


def test_image_folder_refuses_an_asynchronous_filesystem(s3_tree):
    _, options = s3_tree
    with pytest.raises(ValueError, match="AsyncImageFolder"):
        ImageFolder(f"s3://{BUCKET}/train", storage_options=options)


def test_a_missing_s3_root_is_named(s3_tree):
    _, options = s3_tree
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        AsyncImageFolder(f"s3://{BUCKET}/nothing-here", storage_options=options)


def test_a_corrupt_object_fails_only_its_batch_and_names_its_url(s3_tree):
    _, options = s3_tree
    folder = AsyncImageFolder(f"s3://{BUCKET}/broken", storage_options=options)
    with ThreadLoader(folder, batch_size=None, num_workers=2) as loader:
        it = iter(loader)
        image, target = next(it)
        assert image.shape[0] == 3 and target == 0
        with pytest.raises(ImageDecodeError, match=r"s3://images/broken/cls/1-bad\.jpg"):
            next(it)
        with pytest.raises(StopIteration):
            next(it)
