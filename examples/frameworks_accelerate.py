"""accelerate: train from a ThreadLoader prepared for accelerate, checkpoint mid-epoch, resume.

Offline, on CPU: python examples/frameworks_accelerate.py
"""

from __future__ import annotations

import os
import tempfile

import torch
from accelerate import Accelerator

from torch_threadloader import ThreadLoader
from torch_threadloader.integrations.accelerate import prepare_threadloader, skip_first_batches


class Squares(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.tensor([i / 64.0])
        return x, x * x


def loader(accelerator: Accelerator, register: bool = True) -> ThreadLoader:
    torch.manual_seed(0)  # accelerate seeds the shuffle's generator from it
    tl = ThreadLoader(Squares(), batch_size=8, shuffle=True, num_workers=2)
    return prepare_threadloader(accelerator, tl, register=register)


def main() -> None:
    acc = Accelerator(cpu=True, mixed_precision="bf16")
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    full = [x.flatten().tolist() for x, _ in loader(acc, register=False)]  # the uninterrupted epoch
    data = loader(acc)
    model, optimizer = acc.prepare(model, optimizer)
    with tempfile.TemporaryDirectory() as ckpt:
        it, seen = iter(data), []
        for _ in range(3):
            x, y = next(it)
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
            acc.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            seen.append(x.flatten().tolist())
        acc.save_state(ckpt)
        it.close()
        acc2 = Accelerator(cpu=True, mixed_precision="bf16")
        resumed = loader(acc2)
        acc2.load_state(ckpt)
        rest = [x.flatten().tolist() for x, _ in skip_first_batches(resumed, 3)]
    print(f"{type(data).__name__} in process {os.getpid()}: {len(full)} batches")
    print("resumed after 3 batches:", "exact" if seen + rest == full else "DIFFERENT")


if __name__ == "__main__":
    main()
