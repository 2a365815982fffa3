"""What torch's worker processes have of their own, made per worker thread: a copy of the
dataset, a :class:`~torch.utils.data.WorkerInfo` and one ``worker_init_fn`` call."""

from __future__ import annotations

import contextlib
import copy
import functools
import pickle
import threading
import types
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from torch_threadloader.random_state import ItemStreams, WorkerRNG, drawing
from torch_threadloader.skip import note_raised_in
from torch_threadloader.userdata import UserObject
from torch_threadloader.worker_info import make_worker_info, set_worker_info

if TYPE_CHECKING:
    from torch.utils.data._utils.worker import WorkerInfo

__all__ = ["Workers", "rebound"]

_P = ParamSpec("_P")
_V = TypeVar("_V")


class Workers:
    """The ``num_workers`` workers of an epoch (or, with ``persistent_workers=True``, of the
    loader's life): for each, its own copy of the dataset made when the worker starts
    (``worker_copy="shallow"``: ``copy.copy``, the default; ``"deep"``: ``copy.deepcopy``;
    ``"pickle"``: unpickled from the dataset's pickle on the worker's thread), its
    ``WorkerInfo`` (seed ``base_seed + id``, as torch derives it), its random state
    (:class:`~torch_threadloader.random_state.WorkerRNG`: what torch's, Python's and NumPy's
    global random calls act on in its calls, seeded as torch seeds worker ``id``) and one
    ``worker_init_fn(id)`` call, made within that state. A ``worker_init_fn`` that holds the dataset (a bound method of
    it, a ``functools.partial`` with it as an argument or of such a method, nested) is called
    on the worker's copy instead, as torch's pickling gives a worker process its own
    (:func:`rebound`). A dataset that cannot be copied is shared, with one warning (one that
    cannot be deep-copied or pickled gets a shallow copy, with one warning); with ``copy_dataset=False``
    every worker shares it. ``on_copy`` is called with each copy made (an async dataset's
    copies have their ``aclose()`` awaited).
    Thread-safe: each worker starts on its own thread."""

    def __init__(
        self,
        dataset: UserObject,
        num_workers: int,
        base_seed: int,
        worker_init_fn: Callable[[int], object] | None,
        *,
        copy_dataset: bool = True,
        worker_copy: str = "shallow",
        on_copy: Callable[[UserObject], object] | None = None,
        own_rng: bool = True,
    ) -> None:
        self.dataset = dataset
        self.copy_dataset = copy_dataset
        self.worker_copy = worker_copy
        self.on_copy = on_copy
        self.num_workers = num_workers
        self.base_seed = base_seed
        self.worker_init_fn = worker_init_fn
        self.owner = type(dataset).__name__
        self.own_rng = own_rng  # False: the workers draw from the process's shared random state
        self._lock = threading.Lock()
        self._epochs = 0  # epochs that took these workers (persistent workers: more than one)
        self._infos: dict[int, WorkerInfo] = {}
        self._rngs: dict[int, WorkerRNG] = {}
        self._start_locks: dict[int, threading.Lock] = {}
        self._warned: set[str] = set()

    def start(self, worker_id: int) -> UserObject:
        """Make the calling thread worker ``worker_id``: its info is set and, the first time,
        its dataset copy is made and ``worker_init_fn`` runs (once, also when two epochs start
        the same persistent worker at once; the info is shared only after it returned).
        Returns the worker's dataset."""
        with self._lock:
            info = self._infos.get(worker_id)
            start_lock = self._start_locks.setdefault(worker_id, threading.Lock())
        if info is None:
            with start_lock:
                with self._lock:
                    info = self._infos.get(worker_id)
                if info is None:
                    dataset, init = self._copy()
                    rng = self.rng(worker_id)
                    info = make_worker_info(worker_id, self.num_workers, self.base_seed + worker_id, dataset, rng)
                    set_worker_info(info)
                    if init is not None:
                        try:
                            with drawing(rng) if rng is not None else contextlib.nullcontext():
                                init(worker_id)
                        except Exception as exc:
                            note_raised_in(exc, "worker_init_fn", worker_id)
                            raise
                    with self._lock:
                        self._infos[worker_id] = info
                    return info.dataset
        set_worker_info(info)
        return info.dataset

    def rng(self, worker_id: int) -> WorkerRNG | None:
        """Worker ``worker_id``'s random state (made once, seeded as torch seeds the worker);
        ``None`` when the workers share the process's (``own_rng=False``)."""
        if not self.own_rng:
            return None
        with self._lock:
            rng = self._rngs.get(worker_id)
            if rng is None:
                rng = self._rngs[worker_id] = WorkerRNG.for_worker(self.base_seed, worker_id, self.owner)
            return rng

    def epoch_streams(self) -> ItemStreams | None:
        """The item streams of the next epoch that takes these workers (counted: persistent
        workers keep their base seed, and each epoch draws anew); ``None`` with ``own_rng=False``."""
        if not self.own_rng:
            return None
        with self._lock:
            epoch, self._epochs = self._epochs, self._epochs + 1
        return ItemStreams(self.base_seed, epoch, self.owner)

    def started_datasets(self) -> dict[int, UserObject]:
        """The dataset copies of the workers started so far, by worker id."""
        with self._lock:
            return {w: info.dataset for w, info in self._infos.items()}

    def info(self, worker_id: int) -> WorkerInfo:
        """The worker's info, starting it on the calling thread the first time (async)."""
        with self._lock:
            info = self._infos.get(worker_id)
        if info is None:
            self.start(worker_id)
            with self._lock:
                info = self._infos[worker_id]
        return info

    def _copy(self) -> tuple[UserObject, Callable[[int], object] | None]:
        """A new worker's dataset and its ``worker_init_fn``, rebound onto that dataset."""
        init = self.worker_init_fn
        if not self.copy_dataset:
            return self.dataset, init
        copies: dict[int, object] = {}
        made: UserObject = self.dataset
        if self.worker_copy == "deep":
            try:
                made = copy.deepcopy(self.dataset, copies)
            except Exception as exc:
                copies = {}
                self._warn_once("deep", f"cannot be deep-copied ({exc!r}); each worker thread gets a shallow copy")
        elif self.worker_copy == "pickle":
            try:
                made = pickle.loads(pickle.dumps(self.dataset, pickle.HIGHEST_PROTOCOL))
                copies[id(self.dataset)] = made
            except Exception as exc:
                self._warn_once("pickle", f"cannot be pickled ({exc!r}); each worker thread gets a shallow copy")
        if not copies:
            try:
                made = copy.copy(self.dataset)
            except Exception as exc:
                self._warn_once(
                    "shallow",
                    f"cannot be copied ({exc!r}); the worker threads share it instead of each having its own "
                    "copy as torch's worker processes do",
                )
                return self.dataset, init
        copies[id(self.dataset)] = made
        if self.on_copy is not None:
            self.on_copy(made)
        return made, None if init is None else rebound(init, copies)

    def _warn_once(self, kind: str, what: str) -> None:
        with self._lock:
            warn = kind not in self._warned
            self._warned.add(kind)
        if warn:
            warnings.warn(f"the dataset {type(self.dataset).__name__} {what}", RuntimeWarning, stacklevel=4)


def rebound(fn: Callable[_P, _V], copies: Mapping[int, object]) -> Callable[_P, _V]:
    """``fn`` with each object it holds that has a copy in ``copies`` (by ``id``) replaced by
    that copy, as pickling the dataset and ``fn`` together into a worker process maps them:
    the ``__self__`` of a bound method, and the function, arguments and keywords of a
    ``functools.partial`` (recursively, so a partial of a bound method too). Anything else
    (a plain function, a closure, a callable object) is ``fn`` itself."""
    if isinstance(fn, types.MethodType):
        target = copies.get(id(fn.__self__))
        return fn if target is None else types.MethodType(fn.__func__, target)
    if type(fn) is functools.partial:
        func = rebound(fn.func, copies)
        args = tuple(_swapped(a, copies) for a in fn.args)
        keywords = {k: _swapped(v, copies) for k, v in fn.keywords.items()}
        same = func is fn.func and all(a is b for a, b in zip(args, fn.args, strict=True))
        if same and all(keywords[k] is v for k, v in fn.keywords.items()):
            return fn
        return functools.partial(func, *args, **keywords)
    return fn


def _swapped(value: object, copies: Mapping[int, object]) -> object:
    if isinstance(value, types.MethodType) or type(value) is functools.partial:
        return rebound(value, copies)
    return copies.get(id(value), value)
