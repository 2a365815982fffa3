"""Tags on errors: the batch an exception fails (its position, worker or graph state), put on
the exception where it is raised and read where ``next()`` delivers it. A bottom module: the
fetchers, the kinds, the worker processes and resume read and write tags, none through another."""

from __future__ import annotations

from typing import Any

__all__ = ["NO_TAG", "tag_error", "tag_of"]

_TAG = "_threadloader_tag"
#: What :func:`tag_of` returns for an exception without a tag.
NO_TAG = object()


def tag_error(exc: BaseException, tag: Any) -> None:
    """Mark ``exc`` with the tag of the batch it fails (its position, worker or graph state):
    the batch counts as delivered when ``next()`` raises it, as torch goes on after it."""
    try:
        setattr(exc, _TAG, tag)
    except (AttributeError, TypeError):  # an exception type without a __dict__
        pass


def tag_of(exc: BaseException) -> Any:
    """The tag :func:`tag_error` put on ``exc``, else ``NO_TAG``."""
    return getattr(exc, _TAG, NO_TAG)
