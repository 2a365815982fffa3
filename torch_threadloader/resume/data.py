"""A state's plain data: the format tag, position ranges, copies of user states.

The loader's own state is plain Python data (``int``, ``bool``, ``str``, ``bytes``, lists,
dicts), so ``torch.save`` / ``torch.load(weights_only=True)`` round-trip it; a user object's
own ``state_dict()`` is kept as it is given, copied (:func:`snapshot`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TypeAlias, TypeVar, cast, overload

import torch

from datapipes._progress import encode_ranges
from datapipes._rng import state_bytes, state_tensor

__all__ = [
    "FORMAT",
    "OwnState",
    "RngState",
    "as_tensor_state",
    "encode_ranges",
    "is_stateful",
    "plain",
    "snapshot",
]

FORMAT = "torch_threadloader/state-1"

#: A user object's own ``state_dict()`` (a sampler's, a dataset copy's), kept as it was given
#: (copied by :func:`snapshot`) and handed back to its ``load_state_dict()``: never read here.
OwnState: TypeAlias = object
S = TypeVar("S")
#: A generator's state in a state: ``bytes`` (:func:`plain`), or the ``uint8`` tensor itself.
RngState: TypeAlias = bytes | torch.Tensor


@overload
def plain(obj: torch.Tensor) -> bytes: ...
@overload
def plain(obj: object) -> object: ...
def plain(obj: object) -> object:
    """The loader's own state data with tensors (generator states, ``uint8`` tensors) as
    ``bytes`` and tuples as lists: data ``torch.load(weights_only=True)`` loads. Not for a
    user object's own state, which is kept as it is given (:func:`snapshot`)."""
    if isinstance(obj, torch.Tensor):
        return state_bytes(obj)
    if isinstance(obj, Mapping):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v) for v in obj]
    return obj


def snapshot(state: S, owner: object) -> S:
    """A user object's own ``state_dict()`` (``owner``'s: a sampler's, a dataset's) as it is
    now: a copy, as crossing to another process would make, so that the object changing its
    state later changes no state already taken. Its values keep their types (tensors stay
    tensors, for its ``load_state_dict()``); containers and tensors are copied directly,
    immutable values kept, anything else deep-copied. ``TypeError`` naming ``owner`` for a
    value that cannot be copied."""
    try:
        return cast(S, _copied(state))  # a copy of the same type
    except Exception as exc:
        raise TypeError(
            f"{type(owner).__name__}.state_dict() returned a state that cannot be copied ({exc}); a state must be "
            "data (numbers, strings, bytes, tensors, lists, dicts), as torch.save and worker processes need"
        ) from exc


def _copied(value: object) -> object:
    if value is None or isinstance(value, int | float | str | bytes | bool):
        return value
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if type(value) is dict:
        return {k: _copied(v) for k, v in value.items()}
    if type(value) is list:
        return [_copied(v) for v in value]
    if type(value) is tuple:
        return tuple(_copied(v) for v in value)
    return copy.deepcopy(value)


def as_tensor_state(value: RngState) -> torch.Tensor:
    """A generator state saved as ``bytes`` (by :func:`plain`) back as a ``uint8`` tensor."""
    return state_tensor(value)


def is_stateful(obj: object) -> bool:
    """torch's ``Stateful`` protocol: ``state_dict()`` and ``load_state_dict()``."""
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))
