"""What handing a tiny batch from a worker thread to the consumer costs.

    python -m benchmarks handoff [--epochs 6] [--smoke]
    python -m benchmarks handoff_rs [--epochs 6]      # CPython >= 3.13 with dataloader-rs, no torch

``ThreadLoader(num_workers=2, persistent_workers=True)`` over the ``overhead`` dataset
(``__getitem__`` returns the index, so an epoch is nothing but hand-overs), batch 1 and 32,
batches as tensors and as plain lists: per batch, the wall time, the process's CPU time (of
which in the kernel) and its voluntary and involuntary context switches (``getrusage``), over
the epochs after the first (which starts the pool). ``--dataloader-rs`` (``handoff_rs``)
measures ``dataloader_rs.PyDataloader``, the Rust-core thread loader, the same way, with list
batches (it needs CPython 3.13 or newer and no torch, so it runs in its own interpreter).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import Timing, close, interleave, time_epoch

SIZES = ((1, 4_096), (32, 65_536))
SMOKE_SIZES = ((1, 64), (32, 256))


def _dataloader_rs(items: int, batch_size: int) -> Iterable[Any]:
    from dataloader_rs import PyDataloader, PyDataset

    class IndexDataset(PyDataset):  # type: ignore[misc]
        def __init__(self, n: int) -> None:
            super().__init__()
            self.n = n

        def __len__(self) -> int:
            return self.n

        def __getitem__(self, index: int) -> int:
            return index

    loader: Iterable[Any] = PyDataloader(IndexDataset(items), batch_size=batch_size, num_workers=2)
    return loader


def _threadloader(items: int, batch_size: int, lists: bool) -> Any:
    from benchmarks.datasets import IndexDataset, as_list
    from torch_threadloader import ThreadLoader

    return ThreadLoader(
        IndexDataset(items),
        batch_size=batch_size,
        num_workers=2,
        collate_fn=as_list if lists else None,
        persistent_workers=True,
    )


def _record(recorder: Recorder, case: str, config: str, timings: list[Timing], **params: Any) -> None:
    per = 1e6 / timings[0].count
    recorder.add(case, config, "wall per batch", [t.wall * per for t in timings], "µs", **params)
    recorder.add(case, config, "CPU per batch", [t.cpu * per for t in timings], "µs", **params)
    recorder.add(case, config, "kernel CPU per batch", [t.kernel * per for t in timings], "µs", **params)
    voluntary = [t.voluntary_switches / t.count for t in timings]
    recorder.add(case, config, "voluntary switches per batch", voluntary, "", **params)
    involuntary = [t.involuntary_switches / t.count for t in timings]
    recorder.add(case, config, "involuntary switches per batch", involuntary, "", **params)


def main(argv: Sequence[str] | None = None, *, suite: str = "handoff") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--dataloader-rs", action="store_true", help="measure dataloader-rs instead of ThreadLoader")
    args = parser.parse_args(argv)
    if args.dataloader_rs and importlib.util.find_spec("dataloader_rs") is None:
        parser.error("dataloader-rs is not installed (pip install dataloader-rs, on CPython >= 3.13)")
    epochs = 2 if args.smoke else args.epochs
    recorder = Recorder(suite, argv)
    kinds = (("lists", True),) if args.dataloader_rs else (("tensors", False), ("lists", True))
    for kind, lists in kinds:
        for batch_size, items in SMOKE_SIZES if args.smoke else SIZES:
            if args.dataloader_rs:
                loader, config = _dataloader_rs(items, batch_size), "dataloader-rs nw=2"
            else:
                loader, config = _threadloader(items, batch_size, lists), "ThreadLoader nw=2"
            try:
                timings = interleave({config: functools.partial(time_epoch, loader)}, epochs - 1, collect=False)[config]
            finally:
                close(loader)
            _record(recorder, f"{kind}, batch {batch_size}", config, timings, items=items, batch_size=batch_size)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
