"""Argument checks shared by the nodes: each error names the argument and what it accepts."""

from __future__ import annotations

from typing import Any

__all__ = ["check_choice", "check_non_negative_int", "check_positive_int", "check_timeout"]


def check_positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive int, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be a positive int (>= 1), got {value!r}")
    return value


def check_non_negative_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a non-negative int, got {value!r} ({type(value).__name__})")
    if value < 0:
        raise ValueError(f"{name} must be a non-negative int (>= 0), got {value!r}")
    return value


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        accepted = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {accepted}; got {value!r}")
    return str(value)


def check_timeout(name: str, value: Any) -> float | None:
    """``None`` waits forever; otherwise a positive number of seconds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be None (wait forever) or a positive number of seconds, got {value!r}")
    return float(value)
