"""Training goes on past corrupt samples: ``on_error="skip"``, ``max_errors`` and ``errors()``.

python examples/skip_bad_samples.py
"""

from __future__ import annotations

from torch.utils.data import Dataset

from torch_threadloader import ThreadLoader


class SomeCorrupt(Dataset[int]):
    """1 sample in 50 raises, as a truncated file would."""

    def __len__(self) -> int:
        return 500

    def __getitem__(self, i: int) -> int:
        if i % 50 == 13:
            raise ValueError(f"sample {i}: truncated file")
        return i


def main() -> None:
    loader = ThreadLoader(SomeCorrupt(), batch_size=16, num_workers=4, on_error="skip", max_errors=0.05)
    sizes = [len(batch) for batch in loader]
    full = sum(size == 16 for size in sizes[:-1])
    print(
        f"{len(sizes)} batches: {full} of 16 and the last of {sizes[-1]}, as without the bad samples "
        "(each is replaced by another sample of its batch)"
    )
    for record in loader.errors():
        print(f"skipped index {record['index']} in batch {record['batch']}: {record['type']}: {record['message']}")
    print(f"{len(loader.errors())} samples skipped and recorded")
    loader.close()


if __name__ == "__main__":
    main()
