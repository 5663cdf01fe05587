"""Where a Triton kernel launches: on the device of its tensors, not the current one.

Triton launches on the *current* CUDA device and takes the pointers it is given at face value, so
a tensor on ``cuda:1`` launched while ``cuda:0`` is current reads another device's address space
(an illegal access that kills the CUDA context, or garbage). Every launcher runs its launches
inside :func:`on_device` of its input.
"""

from __future__ import annotations

import contextlib

import torch


def on_device(device: torch.device) -> contextlib.AbstractContextManager:
    """Make ``device`` current for the block when it is a CUDA device; otherwise do nothing
    (CPU tensors under Triton's interpreter)."""
    if device.type == "cuda":
        return torch.cuda.device(device)
    return contextlib.nullcontext()
