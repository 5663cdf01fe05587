"""The one error the kernels raise themselves.

Kernel launchers check their inputs before launching, because a Triton kernel given the wrong
shape or dtype does not fail: it reads out of bounds or writes garbage. The dispatching
functions in :mod:`genloop.kernels.dispatch` never raise it for shapes a kernel does not take;
they fall back to PyTorch instead.
"""

from __future__ import annotations

from genloop.sdk.errors import GenloopError


class KernelInputError(GenloopError, ValueError):
    """The tensors given to a kernel launcher are not ones it takes; the message says what is."""
