"""Batches a consumer holds ahead: Lightning's prefetching fetcher, found from ``iter()``'s callers."""

from __future__ import annotations

import sys
import types
import weakref

__all__ = ["find_prefetching_fetcher", "held_by"]


def find_prefetching_fetcher() -> weakref.ref[object] | None:
    """Lightning's ``_PrefetchDataFetcher`` whose ``iter()`` is calling us, if one is.

    For a loader without a length, Lightning's fetcher asks for one batch more than the step
    it trains (to know whether it is the last); a checkpoint taken then must not count the
    batch it holds. An epoch of ``torch_threadloader.integrations`` that fetches ahead (its class
    sets ``holds_batches_ahead``, with ``batches`` and ``length = None``) is found the same way. The fetcher's ``batches`` list says how many it holds when the state is
    taken. Found once per epoch by looking up the caller's frames (no per-batch cost)."""
    frame: types.FrameType | None = sys._getframe(1)
    for _ in range(24):
        if frame is None:
            return None
        # Only a Lightning frame's locals are read: reading a frame's f_locals keeps a
        # reference to each local on CPython < 3.13 (the caller's loader, say) until it returns.
        module = str(frame.f_globals.get("__name__", ""))
        ours = module.startswith("torch_threadloader.integrations.")
        if (ours or module.split(".")[0] in ("lightning", "pytorch_lightning")) and frame.f_code.co_name == "__iter__":
            owner = frame.f_locals.get("self")
            # An integration's epoch that looks one batch ahead (accelerate's rule) says so.
            if owner is not None and (
                type(owner).__name__ == "_PrefetchDataFetcher"
                or (ours and getattr(owner, "holds_batches_ahead", False))
            ):
                return weakref.ref(owner)
        frame = frame.f_back
    return None


def held_by(fetcher: weakref.ref[object] | None) -> int:
    """How many delivered batches ``fetcher`` holds, not yet handed to the training step."""
    owner = fetcher() if fetcher is not None else None
    if owner is None or getattr(owner, "length", None) is not None:
        return 0
    batches = getattr(owner, "batches", None)
    return len(batches) if isinstance(batches, list) else 0
