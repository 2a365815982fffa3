"""Train a few steps from S3: a local moto server stands in for S3, S3Dataset reads from it.

Starts moto's server mode on 127.0.0.1 (``pip install 'moto[server]'``), uploads a small
labelled dataset (8x8 grayscale "images", the label in the object's first byte), lists it
with ``S3Dataset.from_prefix`` and trains a linear classifier for a few steps with
ThreadLoader: 4 batches of 32 loading at once, 128 GETs in flight on one event-loop thread.
Offline: fake credentials, a local endpoint, nothing leaves this machine.

    python examples/s3_training.py [--objects 512] [--steps 20]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request

import torch

from torch_threadloader import ThreadLoader
from torch_threadloader.remote import S3Dataset

BUCKET = "example-train"
SIDE = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalS3:
    """moto's server in a child process on 127.0.0.1; a context manager that stops it."""

    def __init__(self) -> None:
        self.endpoint = f"http://127.0.0.1:{free_port()}"
        port = self.endpoint.rsplit(":", 1)[1]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", port],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def __enter__(self) -> LocalS3:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=2):
                    return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.__exit__()
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.1)

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def upload(endpoint: str, count: int) -> None:
    """``count`` objects ``train/{i:06d}.bin``: a label byte (0-3), then SIDE*SIDE pixels
    whose brightness follows the label, with noise."""
    import botocore.session

    client = botocore.session.get_session().create_client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket=BUCKET)
    g = torch.Generator().manual_seed(0)
    for i in range(count):
        label = i % 4
        pixels = (label * 60 + torch.randint(0, 40, (SIDE * SIDE,), generator=g)).to(torch.uint8)
        client.put_object(Bucket=BUCKET, Key=f"train/{i:06d}.bin", Body=bytes([label]) + pixels.numpy().tobytes())
    client.close()


def decode(bodies: list[bytes]) -> tuple[torch.Tensor, torch.Tensor]:
    """The loader's ``collate_fn``: a batch of object bodies -> (images, labels)."""
    raw = torch.frombuffer(bytearray(b"".join(bodies)), dtype=torch.uint8).view(len(bodies), 1 + SIDE * SIDE)
    return raw[:, 1:].float() / 255.0, raw[:, 0].long()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--objects", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    # Fake credentials for the local server; no instance-metadata lookup.
    os.environ.update(
        AWS_ACCESS_KEY_ID="AKIAEXAMPLEEXAMPLE00",
        AWS_SECRET_ACCESS_KEY="example-secret",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_EC2_METADATA_DISABLED="true",
    )
    with LocalS3() as s3:
        upload(s3.endpoint, args.objects)
        dataset = S3Dataset.from_prefix(f"s3://{BUCKET}/train/", endpoint_url=s3.endpoint, max_bytes=1024)
        print(f"listed {len(dataset)} objects under s3://{BUCKET}/train/")
        model = torch.nn.Linear(SIDE * SIDE, 4)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        step, first_loss, loss = 0, None, torch.tensor(0.0)
        with ThreadLoader(
            dataset, batch_size=32, shuffle=True, num_workers=4, item_concurrency=32, collate_fn=decode, drop_last=True
        ) as loader:
            while step < args.steps:
                for images, labels in loader:
                    loss = torch.nn.functional.cross_entropy(model(images), labels)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    first_loss = loss.item() if first_loss is None else first_loss
                    step += 1
                    if step == args.steps:
                        break
    print(f"trained {step} steps from S3: loss {first_loss:.3f} -> {loss.item():.3f}")


if __name__ == "__main__":
    main()
