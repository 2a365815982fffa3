"""The check the optional counts share (``max_batch_cost``, ``group_window``,
``straggler_window``): None, or a positive int, refused with each setting's own message."""

from __future__ import annotations

__all__ = ["positive_or_none"]


def positive_or_none(value: object, wrong_type: str, too_small: str) -> int | None:
    """``value`` when it is None or an int ``>= 1``; else ``TypeError(wrong_type)`` (not an
    int, or a bool) or ``ValueError(too_small)``, each formatted with ``value`` and ``kind``
    (its type's name)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(wrong_type.format(value=value, kind=type(value).__name__))
    if value < 1:
        raise ValueError(too_small.format(value=value, kind=type(value).__name__))
    return value
