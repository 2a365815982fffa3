"""A torch generator's state as plain ``bytes`` in a node's ``state_dict()``, and back."""

from __future__ import annotations

from typing import Any

import torch


def state_bytes(state: torch.Tensor) -> bytes:
    """A generator state (a CPU ``uint8`` tensor) as ``bytes``. No torch op is called: each
    releases the GIL, and a checkpoint taken among busy threads would wait to get it back."""
    if state.dtype == torch.uint8 and state.device.type == "cpu" and not state.requires_grad and state.is_contiguous():
        return state.numpy().tobytes()
    return state.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()


def state_tensor(value: Any) -> torch.Tensor:
    """A state saved by :func:`state_bytes` (or a tensor, kept) as the ``uint8`` tensor
    ``Generator.set_state`` takes."""
    if isinstance(value, torch.Tensor):
        return value
    return torch.frombuffer(bytearray(value), dtype=torch.uint8)
