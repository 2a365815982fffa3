"""The stacks of the threads that hold work, and the stage a stack shows (read, never stopped)."""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
import traceback
import types

from torch_threadloader.userdata import Index

__all__ = ["FREE_THREADED", "NOT_READ", "batch_indices", "other_threads", "stack_lines", "stage_of", "thread_frames"]

#: The calls a stage is named after: the dataset's, as torch's fetchers make them.
_DATASET_CALLS = frozenset({"__getitem__", "__getitems__", "__iter__", "__next__"})
#: Frames of these packages are the loader's own, never the stage (its remote datasets are datasets).
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_OWN = (os.path.join(os.path.dirname(_PACKAGE), "datapipes") + os.sep, _PACKAGE + os.sep)
_DATASETS = os.path.join(_PACKAGE, "remote") + os.sep


FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def _own(filename: str) -> bool:
    return filename.startswith(_OWN) and not filename.startswith(_DATASETS)


def thread_frames(names: set[str]) -> dict[str, types.FrameType]:
    """The current frame of each live thread named in ``names`` (a thread that ended, or one
    of another name, is left out)."""
    frames = sys._current_frames()
    try:
        return {
            thread.name: frames[thread.ident]
            for thread in threading.enumerate()
            if thread.name in names and thread.ident is not None and thread.ident in frames
        }
    finally:
        del frames  # it holds this very frame: a cycle that would keep the caller's objects until a gc


def other_threads() -> tuple[tuple[str, str | None, tuple[str, ...]], ...]:
    """Every live thread but the caller, as ``(name, stage, stack lines)`` (a worker process's
    answer to its parent's request)."""
    me = threading.get_ident()
    frames = sys._current_frames()
    try:
        return tuple(
            (thread.name, stage_of(frames[thread.ident]), stack_lines(frames[thread.ident]))
            for thread in threading.enumerate()
            if thread.ident is not None and thread.ident != me and thread.ident in frames
        )
    finally:
        del frames  # it holds this very frame (see thread_frames)


#: What a report says of a stack on a free-threaded build: walking another thread's frames while
#: it runs (``f_back``, ``f_lineno``) is a data race there, which may crash the process.
NOT_READ = "(stacks are not read on a free-threaded build: another thread's frames may change while read)"


def stack_lines(frame: types.FrameType) -> tuple[str, ...]:
    """``frame``'s stack, outermost call first, as ``traceback`` prints it (lines not looked up:
    no file is read); on a free-threaded build, :data:`NOT_READ`."""
    if FREE_THREADED:
        return (NOT_READ,)
    return tuple(
        traceback.format_list(traceback.StackSummary.extract(traceback.walk_stack(frame), lookup_lines=False)[::-1])
    )


def stage_of(frame: types.FrameType | None) -> str | None:
    """The stage a stack is in: the innermost dataset call (``Dataset.__getitem__(5)``), else a
    collate function, else the innermost call the loader made into other code (a generator of
    the dataset's: ``Stream._generate``), else None (the loader's own code)."""
    if FREE_THREADED:  # see NOT_READ
        return None
    collate = entered = None
    while frame is not None:
        code = frame.f_code
        own = _own(code.co_filename)
        if code.co_name in _DATASET_CALLS and not own:
            return f"{code.co_qualname}({_first_argument(frame)})"
        if collate is None and "collate" in code.co_name:
            collate = "collate"
        caller = frame.f_back
        if entered is None and not own and caller is not None and _own(caller.f_code.co_filename):
            entered = code.co_qualname
        frame = caller
    return collate or entered


def batch_indices(frame: types.FrameType | None) -> tuple[Index, ...] | None:
    """The sample indices of the batch a stack loads: the ``indices`` argument (a list or
    tuple) of the innermost call of the loader's own that takes one (a fetcher's load of a
    batch), else None (and None on a free-threaded build: see :data:`NOT_READ`). A diagnostic
    read of another thread's frames, as :func:`stage_of`'s."""
    if FREE_THREADED:
        return None
    while frame is not None:
        code = frame.f_code
        names = code.co_varnames[: code.co_argcount]
        if "indices" in names[:2] and _own(code.co_filename):
            value = frame.f_locals.get("indices")
            if isinstance(value, (list, tuple)):
                return tuple(value)
        frame = frame.f_back
    return None


def _first_argument(frame: types.FrameType) -> str:
    """The first argument after ``self`` of a method's frame (its index), shortened; a
    diagnostic read of another thread's frame (not on a free-threaded build, where that thread
    may change it while it is read: "")."""
    code = frame.f_code
    if code.co_argcount < 2 or FREE_THREADED:
        return ""
    value = frame.f_locals.get(code.co_varnames[1])
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
