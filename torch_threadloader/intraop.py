"""One torch intra-op thread per loader worker thread, as torch gives its worker processes."""

from __future__ import annotations

import threading

import torch

__all__ = ["use_one_intraop_thread"]

_lock = threading.Lock()
_OPENMP = "OpenMP" in torch.__config__.parallel_info()


def use_one_intraop_thread(default: int) -> None:
    """Run the calling thread's parallel torch ops (``torch.stack`` in ``default_collate``,
    resize kernels, ...) on one thread, as torch's ``DataLoader`` does in each worker process.

    With OpenMP, ``torch.set_num_threads`` sets the calling thread's team size, and as a side
    effect the default that threads initialising OpenMP later start from. That default is set
    back to ``default`` (the creating thread's count) from a short-lived helper thread, whose
    own team size does not matter, so no other thread is changed. Without OpenMP (torch's
    native pool is shared by all threads) nothing is changed.
    """
    if not _OPENMP:
        return
    with _lock:
        torch.get_num_threads()  # this thread's lazy OpenMP init happens now, not later
        torch.set_num_threads(1)
        restorer = threading.Thread(target=torch.set_num_threads, args=(default,), name="threadloader-intraop-restore")
        restorer.start()
        restorer.join()
