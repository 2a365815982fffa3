"""Skipping bad samples: ``ThreadLoader(on_error="skip" | callable, max_errors=...)``.

A map-style sample whose ``__getitem__`` raises (an ``Exception``; Ctrl-C and ``SystemExit``
always propagate) is, when the policy says skip, recorded and replaced in its batch by the
next good sample of the same batch (its positions after it, wrapping around): the batch keeps
its size and the epoch its number of batches, so under DDP every rank steps as often. The
replacement is a repeat of a sample of that batch: a choice that needs no sample from any
other batch, so the batches stay the same whatever the workers, the timing or a resume.
Nothing is lost silently: every skip is a record in ``loader.errors()`` and a count in
``loader.stats()``; past ``max_errors`` in an epoch (a count, or a fraction of the epoch's
samples) the batch raises :class:`TooManyErrors`. A skip costs the same in every epoch: the
records of the epoch are kept whole (they are part of the state, and ``max_errors`` counts
them), those of earlier epochs only up to :data:`PAST_RECORDS_KEPT`, the newest.
"""

from __future__ import annotations

import reprlib
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import TypeAlias, TypeVar

from datapipes.errors import _rebuild
from torch_threadloader.userdata import Index, Sample

__all__ = [
    "ErrorLog",
    "ErrorPolicy",
    "ErrorRecord",
    "Failed",
    "OnError",
    "PAST_RECORDS_KEPT",
    "TooManyErrors",
    "attempt",
    "current_position",
    "error_text",
    "forget_used",
    "mark_stage",
    "note_collate",
    "note_raised_in",
    "set_position",
    "stage_of",
    "used_indices",
]

#: How many records of the epochs before the current one ``ThreadLoader.errors()`` keeps (the
#: newest); the current epoch's are all kept.
PAST_RECORDS_KEPT = 10_000

_STAGE = "_threadloader_stage"
_NOTED = "_threadloader_noted"
_arg_repr = reprlib.Repr()
_arg_repr.maxstring = 60
_arg_repr.maxother = 60
_arg_repr.maxlist = 16
_arg_repr.maxtuple = 16
_position = threading.local()

#: ``on_error`` as given: ``"raise"``, ``"skip"``, or the user's callable ``(index, exception) -> skip?``.
OnError: TypeAlias = str | Callable[[Index, BaseException], bool]
#: One skipped sample (``ThreadLoader.errors()``): ``index`` (an int or str as it is, else its
#: ``repr``), ``stage``, ``type``, ``message``, ``attempts``, ``batch`` (its position, or None) and ``epoch``.
ErrorRecord: TypeAlias = dict[str, int | str | None]
_T = TypeVar("_T")
_R = TypeVar("_R")


def set_position(position: int | None) -> None:
    """The position (in the epoch's order) of the batch this thread is loading, or None."""
    _position.value = position


def used_indices() -> list[Index] | None:
    """The indices of the batch this thread settled last, a skipped slot's replaced by the
    index whose sample fills it (for ``return_indices``)."""
    return getattr(_position, "used", None)


def forget_used() -> None:
    """No batch settled on this thread yet (see :func:`used_indices`)."""
    _position.used = None


def current_position() -> int | None:
    """The position this thread's batch has (see :func:`set_position`), else None."""
    return getattr(_position, "value", None)


def stage_of(exc: BaseException) -> str:
    """The stage an exception was raised in (``stage()`` marks it), else ``"fetch"``."""
    return str(getattr(exc, _STAGE, "fetch"))


def mark_stage(exc: BaseException, name: str) -> None:
    """Mark ``exc`` as raised in stage ``name`` (the innermost stage wins)."""
    if not hasattr(exc, _STAGE):
        try:
            setattr(exc, _STAGE, name)
        except (AttributeError, TypeError):
            pass


def note_raised_in(exc: BaseException, stage: str, arg: object = None, *, called: bool = True) -> None:
    """Note on ``exc`` the user call it was raised in: ``stage(arg)`` (``__getitem__(5)``,
    ``worker_init_fn(1)``) or, with ``called=False``, ``stage`` and ``arg`` as they are
    (``collate_fn``, "for the batch of indices [4, 5]"). Once per exception: the innermost
    call that notes it wins (an error passing through an outer stage keeps its own)."""
    if getattr(exc, _NOTED, False):
        return
    try:
        setattr(exc, _NOTED, True)
    except (AttributeError, TypeError):  # an exception type without a __dict__
        pass
    where = f"{stage}({_arg_repr.repr(arg)})" if called else f"{stage}, {arg}"
    exc.add_note(f"[torch_threadloader] raised in {where}")


def note_collate(exc: BaseException, indices: object) -> None:
    """Note on ``exc`` that ``collate_fn`` raised it, for the batch of ``indices``."""
    note_raised_in(exc, "collate_fn", f"for the batch of indices {_arg_repr.repr(indices)}", called=False)


def error_text(exc: BaseException) -> str:
    """``str(exc)``, or, when that raises, a text saying so (as ``traceback`` prints it):
    reporting an error must never fail."""
    try:
        return str(exc)
    except Exception as failure:
        return f"<exception str() failed: {type(failure).__name__}>"


class TooManyErrors(RuntimeError):
    """More samples failed in an epoch than ``max_errors`` allows. ``errors`` holds the
    records (see ``ThreadLoader.errors()``) of the epoch's skipped samples. Built from its
    message alone, ``errors`` is empty; it survives ``pickle`` and ``copy`` with them."""

    def __init__(self, count: int | str, limit: int | None = None, errors: list[ErrorRecord] | None = None) -> None:
        if isinstance(count, str):  # the message alone
            self.errors: list[ErrorRecord] = list(errors or [])
            super().__init__(count)
            return
        errors = errors if errors is not None else []
        self.errors = errors
        last = errors[-1] if errors else {}
        super().__init__(
            f"{count} samples failed this epoch, more than max_errors allows ({limit}); the last: index "
            f"{last.get('index')!r}: {last.get('type')}: {last.get('message')}"
        )

    def __reduce__(self) -> tuple[Callable[..., BaseException], tuple[object, ...]]:
        return _rebuild, (type(self), str(self), self.__dict__)


class Failed:
    """An item's exception, kept in its slot until the batch is settled."""

    __slots__ = ("exc",)

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


def attempt(fn: Callable[[_T], _R], item: _T) -> _R | Failed:
    """``fn(item)``, or :class:`Failed` with its ``Exception``."""
    try:
        return fn(item)
    except Exception as exc:
        return Failed(exc)


def _check_settings(on_error: object, max_errors: object) -> None:
    if not (on_error in ("raise", "skip") or callable(on_error)):
        raise ValueError(f"on_error must be 'raise', 'skip' or a callable (index, exception) -> bool, got {on_error!r}")
    if max_errors is not None:
        if isinstance(max_errors, bool) or not isinstance(max_errors, int | float) or max_errors < 0:
            raise ValueError(
                f"max_errors must be a count (int >= 0) or a fraction (0 <= float < 1), got {max_errors!r}"
            )
        if isinstance(max_errors, float) and max_errors >= 1:
            raise ValueError(f"max_errors as a fraction of the epoch must be below 1, got {max_errors!r}")


class ErrorLog:
    """A loader's record of skipped samples over its epochs: the newest epoch's records whole,
    the earlier epochs' newest :data:`PAST_RECORDS_KEPT`, and the count of every skip. Each
    epoch records into its own :class:`ErrorPolicy` (:meth:`new_epoch`), so two live epochs
    of one loader count and label only their own skips. Thread-safe: one ``lock`` for the log
    and its epochs' policies; each skip costs the same whatever came before it."""

    def __init__(
        self,
        on_error: OnError,
        max_errors: int | float | None,
    ) -> None:
        _check_settings(on_error, max_errors)
        self.on_error = on_error
        self.max_errors = max_errors
        self.lock = threading.Lock()
        self._past: deque[ErrorRecord] = deque(maxlen=PAST_RECORDS_KEPT)  # guarded by lock
        self._total = 0  # every skip recorded so far; guarded by lock
        self._epochs = 0  # guarded by lock
        self._newest: ErrorPolicy | None = None  # the newest epoch's policy; guarded by lock

    @property
    def skips(self) -> bool:
        return self.on_error != "raise"

    def new_epoch(self, epoch_samples: int | None, carried: Sequence[ErrorRecord] = ()) -> ErrorPolicy:
        """An epoch starts: its policy; ``carried`` are the records of the epoch it resumes."""
        with self.lock:
            self._epochs += 1
            if self._newest is not None:
                self._past.extend(self._newest._current)  # each record moves once (later ones: recorded())
            policy = ErrorPolicy(
                self.on_error,
                self.max_errors,
                log=self,
                epoch=self._epochs,
                epoch_samples=epoch_samples,
                carried=carried,
            )
            self._total += len(carried)
            self._newest = policy
        return policy

    def recorded(self, policy: ErrorPolicy, records: list[ErrorRecord]) -> None:
        """Under ``lock``: ``policy``'s epoch recorded ``records`` (an older live epoch's go
        straight to the past)."""
        self._total += len(records)
        if policy is not self._newest:
            self._past.extend(records)

    def records(self) -> list[ErrorRecord]:
        """The records kept, oldest first (copies): the earlier epochs' newest, then the newest epoch's."""
        with self.lock:
            current = self._newest._current if self._newest is not None else []
            return [dict(r) for r in self._past] + [dict(r) for r in current]

    @property
    def total(self) -> int:
        """How many samples were skipped in all (those whose records were let go included)."""
        with self.lock:
            return self._total

    @property
    def epochs(self) -> int:
        """How many epochs the log has counted (started)."""
        with self.lock:
            return self._epochs


class ErrorPolicy:
    """What one epoch does with a failing sample, and its records: raise it, or record and
    skip it, and past ``max_errors`` in the epoch raise :class:`TooManyErrors`. Made by the
    loader's :class:`ErrorLog` for each epoch (its records go to the log too), or on its own
    (a worker process's epoch, whose records are sent to the loader: :meth:`drain`).
    Thread-safe: workers record under ``lock`` (the log's, when it has one)."""

    def __init__(
        self,
        on_error: OnError,
        max_errors: int | float | None,
        *,
        log: ErrorLog | None = None,
        epoch: int = 0,
        epoch_samples: int | None = None,
        carried: Sequence[ErrorRecord] = (),
    ) -> None:
        _check_settings(on_error, max_errors)
        self.on_error = on_error
        self.max_errors = max_errors
        self._log = log
        self.lock = log.lock if log is not None else threading.Lock()
        # This epoch's, those of the epoch it resumes (``carried``) first; guarded by lock.
        self._current: list[ErrorRecord] = [{**record, "epoch": epoch} for record in carried]
        self.epoch = epoch
        self.epoch_samples = epoch_samples

    @property
    def skips(self) -> bool:
        return self.on_error != "raise"

    def limit(self) -> int | None:
        if self.max_errors is None:
            return None
        if isinstance(self.max_errors, float):
            return int(self.max_errors * (self.epoch_samples or 0))
        return self.max_errors

    def this_epoch(self) -> list[ErrorRecord]:
        with self.lock:
            return list(self._current)

    def failed(self, index: Index, exc: Exception, position: int | None = None) -> None:
        """Sample ``index`` (of the batch at ``position``, default: this thread's) raised
        ``exc``: record it (skip) or raise it."""
        if self.on_error == "raise":
            raise exc
        if callable(self.on_error) and not self.on_error(index, exc):
            raise exc
        record: ErrorRecord = {
            "index": index if isinstance(index, int | str) else repr(index),
            "stage": stage_of(exc),
            "type": type(exc).__name__,
            "message": error_text(exc)[:500],
            "attempts": int(getattr(exc, "attempts", 1) or 1),
            "batch": current_position() if position is None else position,
        }
        too_many = self.add([record])
        if too_many is not None:
            raise too_many from exc

    def add(self, records: Sequence[ErrorRecord]) -> TooManyErrors | None:
        """Record skipped samples in this epoch (also those a worker process skipped); the
        error to raise when the epoch's count is now past ``max_errors``, else None."""
        limit = self.limit()
        with self.lock:
            current = self._current
            new = [{**record, "epoch": self.epoch} for record in records]
            current.extend(new)
            if self._log is not None:
                self._log.recorded(self, new)
            if limit is None or len(current) <= limit:
                return None
            mine = list(current)
        return TooManyErrors(len(mine), limit, mine)

    def drain(self) -> list[ErrorRecord]:
        """Every record so far, taken out (a worker process's, sent to the loader's process)."""
        with self.lock:
            records, self._current = self._current, []
        return records

    def fill(self, indices: Sequence[Index], values: list[_T], failed: list[int]) -> list[_T]:
        """Each failed slot takes the value of the next good slot after it (wrapping); the
        slot's index in ``self.used`` (per thread) becomes that slot's."""
        used = list(indices)
        _position.used = used
        if not failed:
            return values
        bad = set(failed)
        n = len(values)
        if len(bad) == n:
            raise RuntimeError(
                f"every sample of the batch failed (indices {list(indices)!r}); nothing to fill it with: "
                "see loader.errors()"
            )
        for j in failed:
            k = (j + 1) % n
            while k in bad:
                k = (k + 1) % n
            values[j] = values[k]
            used[j] = indices[k]
        return values

    def settle(
        self, indices: Sequence[Index], outcomes: list[Sample | Failed], position: int | None = None
    ) -> list[Sample | Failed]:
        """Outcomes of a batch's items (values, or :class:`Failed`), failures recorded and filled."""
        failed = []
        for j, outcome in enumerate(outcomes):
            if isinstance(outcome, Failed):
                self.failed(indices[j], outcome.exc, position)
                failed.append(j)
        return self.fill(indices, outcomes, failed)
