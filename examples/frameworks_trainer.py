"""Hugging Face Trainer from ThreadLoaders: a tiny GPT-2 built from a config (no download),
trained, then resumed from a mid-epoch checkpoint on the same batches.

Offline, on CPU: python examples/frameworks_trainer.py
"""

from __future__ import annotations

import tempfile
from typing import Any

import torch
import tqdm
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

from torch_threadloader.integrations.transformers import ThreadLoaderTrainer

tqdm.tqdm.monitor_interval = 0


class Tokens(torch.utils.data.Dataset[dict[str, Any]]):
    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> dict[str, Any]:
        ids = (torch.arange(8) + i) % 64
        return {"input_ids": ids, "labels": ids}


class Recording(ThreadLoaderTrainer):
    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if model.training:
            self.seen.append(inputs["input_ids"][:, 0].tolist())
        return super().compute_loss(model, inputs, *args, **kwargs)


def trainer(out: str) -> Recording:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=8, n_embd=16, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0)
    args = TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=4,
        num_train_epochs=1,
        save_strategy="steps",
        save_steps=3,
        report_to="none",
        use_cpu=True,
        dataloader_num_workers=2,
        disable_tqdm=True,
        seed=0,
    )
    t = Recording(model=GPT2LMHeadModel(config), args=args, train_dataset=Tokens())
    t.seen = []
    return t


def main() -> None:
    with tempfile.TemporaryDirectory() as out:
        full = trainer(out)
        full.train()
        resumed = trainer(out)
        resumed.train(resume_from_checkpoint=f"{out}/checkpoint-3")
    print(f"trained {len(full.seen)} steps from {type(full.train_threadloader).__name__}")
    print("resumed from checkpoint-3:", "exact" if resumed.seen == full.seen[3:] else "DIFFERENT")


if __name__ == "__main__":
    main()
