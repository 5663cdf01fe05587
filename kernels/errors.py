"""The one error the kernels raise themselves.

Kernel launchers check their inputs before launching, because a Triton kernel given the wrong
shape or dtype does not fail: it reads out of bounds or writes garbage. The dispatching
functions in :mod:`genloop.kernels.dispatch` never raise it for shapes a kernel does not take;
they fall back to PyTorch instead.

The kernels must import on a bare GPU image (torch + Triton, no pydantic), where the GPU check
runs them; there the SDK's error tree is not importable and the error is a plain ``ValueError``.
"""

from __future__ import annotations

try:
    from genloop.sdk.errors import GenloopError

    _BASES: tuple[type[Exception], ...] = (GenloopError, ValueError)
except ImportError:  # the SDK (pydantic) is not installed: kernels alone
    _BASES = (ValueError,)


class KernelInputError(*_BASES):  # type: ignore[misc]
    """The tensors given to a kernel launcher are not ones it takes; the message says what is."""
