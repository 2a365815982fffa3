"""Tags on errors: the batch an exception fails (its position, worker or graph state), put on
the exception where it is raised and read where ``next()`` delivers it. A bottom module: the
fetchers, the kinds, the worker processes and resume read and write tags, none through another;
it imports nothing of the package but the names of the user's objects."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Final, Literal, TypeAlias

from torch_threadloader.userdata import Batch

if TYPE_CHECKING:
    from datapipes import StateDict

__all__ = ["GraphTag", "NO_TAG", "Positions", "Tag", "Tagged", "WorkerTag", "tag_error", "tag_of"]

#: A batch of ``defer_stragglers=True``: the positions of its samples in the epoch's order.
Positions: TypeAlias = tuple[int, ...]
#: An IterableDataset's batch: ``(worker id, its dataset copy's own state after the batch (what
#: its ``state_dict()`` returns; None without one), whether its iterator ended while the batch
#: was made)``; for a dataset without a state, ``(worker id, None, ended, items read from the
#: epoch's start)``.
WorkerTag: TypeAlias = "tuple[int, object, bool] | tuple[int, object, bool, int | None]"
#: A batch of a datapipes graph as the dataset: ``(the graph's state after it, whether it ended)``.
GraphTag: TypeAlias = "tuple[StateDict, bool]"
#: What names a batch: its position in the epoch (map-style, async), its samples' positions, its
#: worker's (IterableDataset) or its graph's state.
Tag: TypeAlias = "int | Positions | WorkerTag | GraphTag"
#: A batch with its tag, as an epoch's graph yields it where the epoch records tags.
Tagged: TypeAlias = "tuple[Tag, Batch]"

_TAG = "_threadloader_tag"


class _NoTag(enum.Enum):
    NO_TAG = "no tag"


#: What :func:`tag_of` returns for an exception without a tag.
NO_TAG: Final = _NoTag.NO_TAG


def tag_error(exc: BaseException, tag: Tag) -> None:
    """Mark ``exc`` with the tag of the batch it fails (its position, worker or graph state):
    the batch counts as delivered when ``next()`` raises it, as torch goes on after it."""
    try:
        setattr(exc, _TAG, tag)
    except (AttributeError, TypeError):  # an exception type without a __dict__
        pass


def tag_of(exc: BaseException) -> Tag | Literal[_NoTag.NO_TAG]:
    """The tag :func:`tag_error` put on ``exc``, else ``NO_TAG``."""
    tag: Tag | Literal[_NoTag.NO_TAG] = getattr(exc, _TAG, NO_TAG)
    return tag
