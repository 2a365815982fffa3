"""What a ThreadLoader switch costs: the same epochs with the switch off and on, interleaved.

    python -m benchmarks option_cost [--option NAME[,NAME]] [--rounds R] [--items N] [--vocab V] [--smoke]

Each option loads the same dataset through two loaders that differ only by the switch, one
whole epoch of each per round in alternating order (the first round dropped), and records
items/s of each and the on/off ratio of each round's pair:

- ``stats`` (``stats_cost``): ``stats=True``, tiny items (``__getitem__`` returns its index) so
  that the bookkeeping is all there is to see; batch 32 with 0 and 2 workers, batch 1, and
  ``item_concurrency=4``; also the cost in µs per item (on minus off). Target: at most 1 µs.
- ``per_sample_rng`` (``worker_state``): items that make the draws of a small v2-style
  augmentation, ``num_workers`` 0 and 2.
- ``worker_copy`` (``worker_state``): the time ``copy.copy`` and ``copy.deepcopy`` take on a
  pure-Python dataset holding a vocabulary of ``--vocab`` words (what each worker pays when it
  starts), and the epoch rate of that dataset with 2 persistent worker threads, shallow vs deep.
  On a GIL build the deep copy buys nothing; it is for free-threaded builds.
- ``own_random_state`` (``random_state_cost``): each worker's own global random state against
  the shared one, ``num_workers=2``, persistent, for the harness's NumPy ``image_augment``, the
  JPEG training pipeline (decode + torchvision v2, JPEGs in memory) and the v2 draws above.
- ``stall_report_after``: the default (300 s: each item timestamped, each ``next()`` without
  workers watched) against ``None``, tiny items as for ``stats``, batch 32 with 0 and 2
  workers; also the cost in µs per item, and the process's CPU time per item and its on/off
  ratio (less moved than wall time by other work on the machine). Target: at most 1% slower.

``stats_cost``, ``worker_state`` and ``random_state_cost`` are this suite with their options.
"""

from __future__ import annotations

import copy
import functools
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset

from benchmarks.datasets import DrawsDataset, IndexDataset, VocabularyDataset
from benchmarks.result import Recorder, suite_parser
from benchmarks.timing import close, interleave, ratios, time_epoch, timed
from torch_threadloader import ThreadLoader

OPTIONS = ("stats", "per_sample_rng", "worker_copy", "own_random_state", "stall_report_after")
#: Items per epoch, per option (``--items`` sets them all).
ITEMS = {
    "stats": 20_000,
    "per_sample_rng": 2_000,
    "worker_copy": 2_000,
    "own_random_state": 1_024,
    "stall_report_after": 20_000,
}


def compare(
    recorder: Recorder,
    case: str,
    make: Callable[[Any], ThreadLoader[Any]],
    settings: tuple[Any, Any],
    items: int,
    rounds: int,
) -> None:
    """Record items/s of ``make(off)`` and ``make(on)`` (``settings``), and their ratio per round."""
    option = case.split(":")[0]
    off, on = (f"{option}={s!r}" if isinstance(s, str) else f"{option}={s}" for s in settings)
    loaders = {setting: make(setting) for setting in settings}
    try:
        runs = {label: (lambda s=s: time_epoch(loaders[s])) for label, s in zip((off, on), settings, strict=True)}
        timings = interleave(runs, rounds, order="alternate")
    finally:
        for loader in loaders.values():
            close(loader)
    rates = {label: [items / t.wall for t in timings[label]] for label in (off, on)}
    for label in (off, on):
        recorder.add(case, label, "items/s", rates[label], "items/s", items=items, rounds=rounds)
    recorder.add(case, f"{on} / {off}", "throughput ratio", ratios(rates[on], rates[off]), "x", items=items)
    if option in ("stats", "stall_report_after"):
        cost = [1e6 / b - 1e6 / a for a, b in zip(rates[off], rates[on], strict=True)]
        recorder.add(case, on, "cost per item", cost, "µs", items=items)
    if option == "stall_report_after":  # the process's CPU time: less moved than wall by a busy machine
        cpu = {label: [t.cpu * 1e6 / items for t in timings[label]] for label in (off, on)}
        for label in (off, on):
            recorder.add(case, label, "CPU per item", cpu[label], "µs", items=items)
        recorder.add(case, f"{on} / {off}", "CPU ratio", ratios(cpu[on], cpu[off]), "x", items=items)


def stats(recorder: Recorder, items: int, rounds: int, vocab: int) -> None:
    for batch_size, workers, ic in ((32, 0, 1), (32, 2, 1), (1, 0, 1), (32, 2, 4)):

        def make(on: bool, bs: int = batch_size, w: int = workers, c: int = ic) -> ThreadLoader[Any]:
            return ThreadLoader(IndexDataset(items), batch_size=bs, num_workers=w, item_concurrency=c, stats=on)

        case = f"stats: batch_size={batch_size}, num_workers={workers}, item_concurrency={ic}"
        compare(recorder, case, make, (False, True), items, rounds)


def stall_report_after(recorder: Recorder, items: int, rounds: int, vocab: int) -> None:
    for workers in (0, 2):

        def make(after: float | None, w: int = workers) -> ThreadLoader[Any]:
            return ThreadLoader(IndexDataset(items), batch_size=32, num_workers=w, stall_report_after=after)

        compare(recorder, f"stall_report_after: batch_size=32, num_workers={workers}", make, (None, 300), items, rounds)


def per_sample_rng(recorder: Recorder, items: int, rounds: int, vocab: int) -> None:
    for workers in (0, 2):

        def make(on: bool, w: int = workers) -> ThreadLoader[Any]:
            return ThreadLoader(
                DrawsDataset(items), batch_size=32, num_workers=w, generator=torch.Generator(), per_sample_rng=on
            )

        compare(recorder, f"per_sample_rng: num_workers={workers}", make, (False, True), items, rounds)


COPIES: dict[str, Callable[[Any], Any]] = {"copy.copy": copy.copy, "copy.deepcopy": copy.deepcopy}


def _copied(fn: Callable[[Any], Any], dataset: Any) -> int:
    fn(dataset)
    return 1


def worker_copy(recorder: Recorder, items: int, rounds: int, vocab: int) -> None:
    ds = VocabularyDataset(items, vocab)
    copies = {how: functools.partial(timed, functools.partial(_copied, fn, ds)) for how, fn in COPIES.items()}
    for how, timings in interleave(copies, rounds, warmup=0, order="alternate").items():
        times = [t.wall * 1e3 for t in timings]
        recorder.add(f"worker_copy: a {vocab}-word vocabulary", how, "time per worker start", times, "ms", vocab=vocab)

    def make(mode: str) -> ThreadLoader[Any]:
        return ThreadLoader(ds, batch_size=32, num_workers=2, worker_copy=mode, persistent_workers=True)

    compare(recorder, "worker_copy: 2 threads, persistent", make, ("shallow", "deep"), items, rounds)


@contextmanager
def _random_state_datasets(items: int) -> Iterator[dict[str, Callable[[], Dataset[Any]]]]:
    from benchmarks.workloads.image_augment import AugmentDataset
    from benchmarks.workloads.jpeg_pipeline import DecodedJpegs, _Transformed, train_transform, write_jpegs

    with tempfile.TemporaryDirectory() as tmp:
        paths = write_jpegs(Path(tmp), min(64, items))
        decoded = DecodedJpegs([paths[i % len(paths)] for i in range(items)])
        yield {
            "image_augment": lambda: AugmentDataset(items),
            "jpeg_pipeline": lambda: _Transformed(decoded, train_transform()),
            "v2 draws": lambda: DrawsDataset(items),
        }


def own_random_state(recorder: Recorder, items: int, rounds: int, vocab: int) -> None:
    with _random_state_datasets(items) as datasets:
        for name, dataset in datasets.items():

            def make(on: bool, dataset: Callable[[], Dataset[Any]] = dataset) -> ThreadLoader[Any]:
                return ThreadLoader(
                    dataset(), batch_size=32, num_workers=2, persistent_workers=True, own_random_state=on
                )

            compare(recorder, f"own_random_state: {name}", make, (False, True), items, rounds)


MEASURE: dict[str, Callable[[Recorder, int, int, int], None]] = {
    "stats": stats,
    "per_sample_rng": per_sample_rng,
    "worker_copy": worker_copy,
    "own_random_state": own_random_state,
    "stall_report_after": stall_report_after,
}


def main(argv: Sequence[str] | None = None, *, suite: str = "option_cost") -> int:
    parser = suite_parser(suite, __doc__)
    parser.add_argument("--option", default=",".join(OPTIONS), help=f"comma-separated: {', '.join(OPTIONS)}")
    parser.add_argument("--rounds", "--repeats", type=int, default=7, dest="rounds")
    parser.add_argument("--items", type=int, default=None, help="items per epoch (default: per option)")
    parser.add_argument("--vocab", type=int, default=20_000, help="words of worker_copy's vocabulary")
    args = parser.parse_args(argv)
    chosen = [o for o in args.option.split(",") if o]
    unknown = sorted(set(chosen) - set(OPTIONS))
    if unknown:
        parser.error(f"--option: unknown {unknown}; choose from {', '.join(OPTIONS)}")
    rounds = 1 if args.smoke else args.rounds
    vocab = 200 if args.smoke else args.vocab
    torch.set_num_threads(1)
    recorder = Recorder(suite, argv)
    for option in chosen:
        items = 96 if args.smoke else args.items or ITEMS[option]
        MEASURE[option](recorder, items, rounds, vocab)
    return recorder.finish(args)


if __name__ == "__main__":
    sys.exit(main())
