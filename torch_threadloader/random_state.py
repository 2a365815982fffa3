"""Process-global random state, owned per worker: what a torch worker process has of its own,
given to worker threads.

torch's ``DataLoader`` runs a worker in a process of its own, so ``torch.manual_seed``, every
draw made without ``generator=`` (torchvision's random transforms), Python's ``random`` and
NumPy's ``np.random`` act on that worker's state, seeded by torch as worker ``i``. Threads share
one process, so this module gives each loader worker a :class:`WorkerRNG` (torch's CPU
generator, a ``random.Random``, a NumPy ``RandomState``, each seeded as torch seeds worker
``i``) and, within :class:`drawing` (a worker's calls), sends the process-global calls to it:

- torch: ``torch.manual_seed``, ``seed``, ``initial_seed``, ``get_rng_state``,
  ``set_rng_state`` (so ``torch.random.fork_rng``) are wrapped where torch binds them
  (``torch`` and ``torch.random``); random ops called without ``generator=`` (or with
  ``torch.default_generator``) on CPU get the worker's generator from a
  ``torch.overrides.TorchFunctionMode`` that torch keeps per thread;
- Python's ``random`` and NumPy's legacy ``np.random`` functions are wrapped in their modules.

Outside a :class:`drawing` block every wrapped call is the original, with the same results
(:func:`install` wraps once, at import of the package). What cannot be sent to the worker's
state is named once per call and dataset class in a :class:`WorkerRandomStateWarning`: a random
op with no ``generator`` argument (``dropout``), one on an accelerator tensor, and
``torch.manual_seed`` does not reseed accelerator generators from a worker. Not reached: names
bound before this package was imported (``from random import shuffle``), methods called on
``torch.default_generator`` or ``np.random.mtrand._rand`` themselves.
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import inspect
import random
import threading
import types
import warnings
from collections.abc import Awaitable, Callable, Generator, Iterable
from typing import Concatenate, Generic, ParamSpec, TypeAlias, TypeVar

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torch.utils.data._utils import worker as torch_worker

from torch_threadloader.userdata import Index, UserObject

__all__ = [
    "ItemStreams",
    "WorkerRNG",
    "WorkerRandomStateWarning",
    "current_rng",
    "Drawn",
    "drawing",
    "install",
    "sample_seed",
]


# torch's own functions, untyped in its stubs: the types they have.
_generate_state: Callable[[int, int], list[int]] = torch_worker._generate_state
# What TorchFunctionMode.__enter__ / __exit__ call, without their two Python frames.
_push: Callable[[TorchFunctionMode], None] = torch._C._push_on_torch_function_stack
_pop: Callable[[], TorchFunctionMode] = torch._C._pop_torch_function_stack
_modes_below: Callable[[], int] = torch._C._len_torch_function_stack
_compiling: Callable[[], bool] = torch.compiler.is_compiling

_P = ParamSpec("_P")
_R = TypeVar("_R")
_T = TypeVar("_T")
#: A torch function a mode sees (``torch.rand``, an aten op), called with the user's arguments.
_TorchFunction: TypeAlias = Callable[..., object]


class WorkerRandomStateWarning(RuntimeWarning):
    """A random call inside a worker that draws from the process's state, not the worker's."""


def sample_seed(seed: int, epoch: int, index: Index) -> int:
    """The 64-bit BLAKE2b hash of ``(seed, epoch, index)``: nearby triples give unrelated seeds.
    An index that is not an int is hashed by its ``repr``."""
    key = int(index) if isinstance(index, int | np.integer) else repr(index)
    digest = hashlib.blake2b(f"{int(seed)},{int(epoch)},{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class ItemStreams:
    """Each item's own random state, for items of a worker that run at once or in an order set
    by timing (``item_concurrency > 1``, ``defer_stragglers``, async datasets): item ``i``
    draws from ``sample_seed(base_seed, epoch, i)``, the stream ``per_sample_rng`` gives it
    (``epoch``: the epochs persistent workers have run before), whichever worker or thread
    loads it and whenever."""

    __slots__ = ("base_seed", "epoch", "owner")

    def __init__(self, base_seed: int, epoch: int = 0, owner: str = "") -> None:
        self.base_seed = base_seed
        self.epoch = epoch
        self.owner = owner

    def __call__(self, index: Index) -> WorkerRNG:
        """Item ``index``'s state; its seed is hashed on first use (an item that never draws
        pays for no hash)."""
        return WorkerRNG.for_item(self.base_seed, self.epoch, index, self.owner)


class WorkerRNG:
    """The random state one worker (or one sample) owns, with the fields of torch's
    thread-worker RNG container (``WorkerInfo.rng``): ``torch_generator`` (a CPU
    ``torch.Generator`` seeded with ``seed``; inside the worker's calls it *is* torch's global
    generator), ``random_generator`` (``random.Random(seed)``: Python's global ``random``
    there), ``numpy_state`` (``np.random.RandomState(numpy_seed)``: NumPy's global ``np.random``
    there) and ``numpy_generator`` (``np.random.default_rng(seed % 2**63)``, a new-style
    generator of its own). ``owner`` names the dataset class in warnings.

    Each is made on first access, once (under a lock): a worker that never draws pays nothing.
    """

    __slots__ = (
        "_key",
        "_lock",
        "_numpy",
        "_numpy_seed",
        "_numpy_state",
        "_random",
        "_seed",
        "_torch",
        "owner",
        "sample",
    )

    def __init__(self, seed: int, *, numpy_seed: list[int] | None = None, owner: str = "") -> None:
        self._seed = seed
        self._numpy_seed = numpy_seed
        self._key: tuple[int, int, Index] | None = None  # an item's: (seed, epoch, index), hashed on first use
        self.owner = owner
        self.sample = False  # one sample's (for_sample), not a worker's
        self._lock = threading.Lock()
        self._random: random.Random | None = None
        self._torch: torch.Generator | None = None
        self._numpy: np.random.Generator | None = None
        self._numpy_state: np.random.RandomState | None = None

    @classmethod
    def for_worker(cls, base_seed: int, worker_id: int, owner: str = "") -> WorkerRNG:
        """Worker ``worker_id``'s state, seeded as torch's ``_worker_loop`` seeds its process:
        torch and ``random`` with ``base_seed + worker_id``, NumPy with torch's
        ``_generate_state(base_seed, worker_id)``."""
        return cls(base_seed + worker_id, numpy_seed=_generate_state(base_seed, worker_id), owner=owner)

    @classmethod
    def for_sample(cls, generator: torch.Generator, owner: str = "") -> WorkerRNG:
        """A sample's state around ``generator`` (its torch generator, the others seeded from
        ``generator.initial_seed()``)."""
        rng = cls(generator.initial_seed(), owner=owner)
        rng._torch = generator
        rng.sample = True
        return rng

    @classmethod
    def for_item(cls, seed: int, epoch: int, index: Index, owner: str = "") -> WorkerRNG:
        """Item ``index``'s state: seeded with ``sample_seed(seed, epoch, index)``, hashed on
        first use."""
        rng = cls(0, owner=owner)
        rng.sample = True
        rng._key = (seed, epoch, index)
        return rng

    @classmethod
    def for_seed(cls, seed: int, owner: str = "") -> WorkerRNG:
        """A sample's state seeded with ``seed`` (its torch generator made on first draw)."""
        rng = cls(seed, owner=owner)
        rng.sample = True
        return rng

    def _seed_now(self) -> int:
        """Under ``_lock``: the seed, an item's hashed now if it was not yet."""
        key = self._key
        if key is not None:
            self._seed = sample_seed(*key)
            self._key = None
        return self._seed

    @property
    def seed(self) -> int:
        """The seed of torch's and Python's generators."""
        with self._lock:
            return self._seed_now()

    @property
    def numpy_seed(self) -> list[int]:
        """The seed of NumPy's ``RandomState``: torch's words for a worker, else the seed's two 32-bit halves."""
        with self._lock:
            return self._numpy_seed_now()

    def _numpy_seed_now(self) -> list[int]:
        if self._numpy_seed is None:
            seed = self._seed_now()
            self._numpy_seed = [seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF]
        return self._numpy_seed

    @property
    def torch_generator(self) -> torch.Generator:
        with self._lock:
            if self._torch is None:
                self._torch = torch.Generator().manual_seed(self._seed_now())
            return self._torch

    @property
    def random_generator(self) -> random.Random:
        with self._lock:
            if self._random is None:
                self._random = random.Random(self._seed_now())
            return self._random

    @property
    def numpy_generator(self) -> np.random.Generator:
        with self._lock:
            if self._numpy is None:
                self._numpy = np.random.default_rng(self._seed_now() % 2**63)
            return self._numpy

    @property
    def numpy_state(self) -> np.random.RandomState:
        with self._lock:
            if self._numpy_state is None:
                self._numpy_state = np.random.RandomState(self._numpy_seed_now())
            return self._numpy_state

    def __repr__(self) -> str:
        return f"WorkerRNG(seed={self.seed})"


_current: contextvars.ContextVar[WorkerRNG | None] = contextvars.ContextVar("threadloader_rng", default=None)
_local = threading.local()  # .pushed: this thread has the draws mode on its torch-function stack


def current_rng() -> WorkerRNG | None:
    """The state the calling thread's (or task's) global random calls act on, else ``None``."""
    return _current.get()


def _push_draws() -> bool:
    """Put the draws mode on this thread's torch-function stack, unless it is there: True
    when it was pushed here (then :func:`_pop_draws` takes it off)."""
    if getattr(_local, "pushed", False):
        return False
    _push(_DRAWS)
    _local.pushed = True
    return True


def _pop_draws(pushed: bool) -> None:
    if pushed:
        _local.pushed = False
        _pop()


class drawing:
    """Within the block, on the calling thread, the process-global random calls act on
    ``rng``; the state before is set back after (blocks nest). Other threads are not affected."""

    __slots__ = ("_pushed", "_token", "rng")

    def __init__(self, rng: WorkerRNG) -> None:
        self.rng = rng
        self._pushed = False

    def __enter__(self) -> WorkerRNG:
        self._token = _current.set(self.rng)
        self._pushed = _push_draws()
        return self.rng

    def __exit__(self, *exc: object) -> None:
        pushed, self._pushed = self._pushed, False
        _pop_draws(pushed)
        _current.reset(self._token)


class Drawn(Generic[_T]):
    """``await Drawn(awaitable, rng)``: awaits ``awaitable`` with the global random calls of
    each of its steps (from one await to the next) acting on ``rng``. The context variable is
    set once, in the awaiting task's own context (which other tasks do not see); torch's mode
    stack is the loop thread's, so the draws mode is pushed for each step and popped before
    the step yields, when other tasks run. Results, exceptions and cancellation pass through
    unchanged."""

    __slots__ = ("_awaitable", "_rng")

    def __init__(self, awaitable: Awaitable[_T], rng: WorkerRNG) -> None:
        self._awaitable = awaitable
        self._rng = rng

    @property
    def awaited(self) -> Awaitable[_T]:
        """The awaitable it steps (a stall report follows it: see ``datapipes.dispatch.stall``)."""
        return self._awaitable

    def __await__(self) -> Generator[object, object, _T]:
        steps = self._awaitable.__await__()
        sent: object = None
        thrown: BaseException | None = None
        token = _current.set(self._rng)
        try:
            while True:
                pushed = _push_draws()
                try:
                    if thrown is None:
                        yielded = steps.send(sent)
                    else:
                        error, thrown = thrown, None
                        yielded = steps.throw(error)
                except StopIteration as stop:
                    value: _T = stop.value
                    return value
                finally:
                    _pop_draws(pushed)
                try:
                    sent = yield yielded
                except GeneratorExit:
                    steps.close()
                    raise
                except BaseException as exc:  # a cancellation, thrown in by the task
                    thrown = exc
        finally:
            _reset(token)


def _reset(token: contextvars.Token[WorkerRNG | None]) -> None:
    try:
        _current.reset(token)
    except ValueError:  # closed from another context (collected): that one never had it set
        pass


# -- torch's random ops: which draw, and whether they take a generator -------------------------

_PLAIN, _TAKES_GENERATOR, _SHARED = 0, 1, 2
_kinds: dict[_TorchFunction, int] = {}
#: Python-level torch functions that draw inside, out of a mode's sight, with no ``generator``.
_PYTHON_DRAWERS = frozenset(
    (
        "dropout",
        "dropout1d",
        "dropout2d",
        "dropout3d",
        "alpha_dropout",
        "feature_alpha_dropout",
        "rrelu",
        "rrelu_",
        "gumbel_softmax",
    )
)
_DEFAULT = torch.default_generator
_warned: set[tuple[str, str]] = set()
_warn_lock = threading.Lock()


def _classify(func: _TorchFunction) -> int:
    name = getattr(func, "__name__", None)
    if not isinstance(name, str):
        kind = _PLAIN
    elif isinstance(func, types.FunctionType):
        kind = _python_kind(func, name)
    else:
        kind = _aten_kind(name)
    _kinds[func] = kind
    return kind


def _python_kind(func: types.FunctionType, name: str) -> int:
    try:
        parameters = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return _PLAIN
    if "generator" in parameters:
        return _TAKES_GENERATOR
    return _SHARED if name in _PYTHON_DRAWERS else _PLAIN


def _aten_kind(name: str) -> int:
    try:
        packet = getattr(torch.ops.aten, name)
        overloads = [getattr(packet, overload) for overload in packet.overloads()]
    except (AttributeError, RuntimeError):
        return _PLAIN
    if not any(torch.Tag.nondeterministic_seeded in op.tags for op in overloads):
        return _PLAIN
    takes = any(arg.name == "generator" for op in overloads for arg in op._schema.arguments)
    return _TAKES_GENERATOR if takes else _SHARED


class _Draws(TorchFunctionMode):
    """Gives the current :class:`WorkerRNG`'s generator to random ops on CPU called without
    one; passes every other call (and every call outside a worker's state) through."""

    def __torch_function__(
        self,
        func: _TorchFunction,
        types: Iterable[type],
        args: tuple[UserObject, ...] = (),
        kwargs: dict[str, UserObject] | None = None,
    ) -> object:
        kind = _kinds.get(func)
        if kind is None:
            kind = _classify(func)
        if kind != _PLAIN:
            rng = _current.get()
            if rng is not None:
                return _draw(kind, rng, func, args, kwargs or {})
        # Every torch call in a worker passes here: the common case is one lookup and the call.
        return func(*args, **kwargs) if kwargs else func(*args)


#: The one draws mode: it holds no state (the current state is the context variable's), so
#: every thread's stack may hold it.
_DRAWS = _Draws()


def _draw(
    kind: int, rng: WorkerRNG, func: _TorchFunction, args: tuple[UserObject, ...], kwargs: dict[str, UserObject]
) -> object:
    given = kwargs.get("generator")
    if kind == _SHARED:
        if given is None and _draws_now(func, args, kwargs):
            _warn_once(func, rng, "has no generator argument, so it draws from the process's generator")
        return func(*args, **kwargs)
    if given is not None and given is not _DEFAULT:
        return func(*args, **kwargs)
    if not _on_cpu(args, kwargs):
        _warn_once(func, rng, "draws on a device other than the CPU, from that device's process-wide generator")
        return func(*args, **kwargs)
    try:
        return func(*args, **{**kwargs, "generator": rng.torch_generator})
    except TypeError as exc:
        if "generator" not in str(exc):
            raise
    _kinds[func] = _SHARED  # its Python binding takes no generator, whatever aten's schema says
    return _draw(_SHARED, rng, func, args, kwargs)


def _draws_now(func: _TorchFunction, args: tuple[UserObject, ...], kwargs: dict[str, UserObject]) -> bool:
    """False only when a Python dropout-like call says it will not draw (``training=False``)."""
    if not isinstance(func, types.FunctionType):
        return True
    try:
        bound = inspect.signature(func).bind(*args, **kwargs)
    except TypeError:
        return True
    bound.apply_defaults()
    return bool(bound.arguments.get("training", True))


def _on_cpu(args: tuple[UserObject, ...], kwargs: dict[str, UserObject]) -> bool:
    for value in args:
        if isinstance(value, torch.Tensor):
            return value.device.type == "cpu"
    device = kwargs.get("device")
    if device is not None:
        return torch.device(device).type == "cpu"
    # No other mode on this thread (ours is off during its handler): no torch.set_default_device.
    return not _modes_below() or torch.get_default_device().type == "cpu"


def _warn_once(func: _TorchFunction, rng: WorkerRNG, why: str) -> None:
    name = f"{getattr(func, '__module__', None) or 'torch'}.{getattr(func, '__qualname__', func)}"
    with _warn_lock:
        if (name, rng.owner) in _warned:
            return
        _warned.add((name, rng.owner))
    warnings.warn(
        f"{name}, called in a loader worker of {rng.owner or 'the dataset'}, {why}: its draws are shared "
        "with every thread of the process (a worker process would have its own)",
        WorkerRandomStateWarning,
        stacklevel=4,
    )


# -- the module-level functions ----------------------------------------------------------------

_TORCH_FUNCTIONS: dict[str, Callable[..., object]] = {  # on the generator (first argument)
    "manual_seed": lambda g, seed: g.manual_seed(int(seed)),
    "seed": lambda g: g.seed(),
    "initial_seed": lambda g: g.initial_seed(),
    "get_rng_state": lambda g: g.get_state(),
    "set_rng_state": lambda g, state: g.set_state(state),
}
_NUMPY_ALIASES = {"ranf": "random_sample", "sample": "random_sample"}
_install_lock = threading.Lock()


def _hooked(original: Callable[_P, _R], in_worker: Callable[Concatenate[WorkerRNG, _P], _R]) -> Callable[_P, _R]:
    @functools.wraps(original)
    def hooked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        # torch.compile traces the original (it knows random.random, torch.manual_seed, ...):
        # checked first, so that it never traces the context variable.
        if _compiling():
            return original(*args, **kwargs)
        rng = _current.get()
        if rng is None:
            return original(*args, **kwargs)
        return in_worker(rng, *args, **kwargs)

    vars(hooked)["_threadloader_original"] = original  # marks it installed, also across a reload
    return hooked


def _torch_hook(name: str) -> Callable[..., object]:
    on_generator = _TORCH_FUNCTIONS[name]
    original: Callable[..., object] = getattr(torch.random, name)
    return _hooked(original, lambda rng, *a, **k: on_generator(rng.torch_generator, *a, **k))


def _python_hook(name: str) -> Callable[..., object]:
    original: Callable[..., object] = getattr(random, name)

    @functools.wraps(original)
    def hooked(*args: object, **kwargs: object) -> object:
        if _compiling():  # torch.compile models the module's own generator, reached as random._inst
            return getattr(random._inst, name)(*args, **kwargs)
        rng = _current.get()
        if rng is None:
            return original(*args, **kwargs)
        return getattr(rng.random_generator, name)(*args, **kwargs)

    vars(hooked)["_threadloader_original"] = original  # marks it installed, also across a reload
    return hooked


def _numpy_hook(name: str) -> Callable[..., object]:
    target = _NUMPY_ALIASES.get(name, name)
    original: Callable[..., object] = getattr(np.random, name)
    return _hooked(original, lambda rng, *a, **k: getattr(rng.numpy_state, target)(*a, **k))


def _numpy_names() -> list[str]:
    legacy = np.random.mtrand._rand
    names = []
    for name in np.random.mtrand.__all__:
        value = getattr(np.random, name, None)
        bound = getattr(value, "__self__", None) is legacy
        if (bound or name in ("seed", *_NUMPY_ALIASES)) and hasattr(
            np.random.RandomState, _NUMPY_ALIASES.get(name, name)
        ):
            names.append(name)
    return names


def install() -> None:
    """Wrap torch's, Python's and NumPy's process-global random functions so that they act on
    the current :class:`WorkerRNG` inside a :class:`drawing` block (idempotent)."""
    with _install_lock:
        if getattr(torch.random.manual_seed, "_threadloader_original", None) is not None:
            return
        for name in _TORCH_FUNCTIONS:
            hook = _torch_hook(name)
            setattr(torch.random, name, hook)
            setattr(torch, name, hook)
        for name in random.__all__:
            if getattr(getattr(random, name), "__self__", None) is getattr(random, "_inst", None):
                setattr(random, name, _python_hook(name))
        for name in _numpy_names():
            setattr(np.random, name, _numpy_hook(name))
