"""Run the Triton kernels on CPU tensors through Triton's interpreter.

TRITON_INTERPRET must be set before the kernel modules are imported (Triton picks the interpreter
when ``@triton.jit`` runs), so it is set here, at conftest import. ``setdefault`` lets a GPU
machine run the same tests compiled: ``TRITON_INTERPRET=0 pytest tests/kernels``.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch


@pytest.fixture(scope="session")
def device() -> torch.device:
    """Where the kernel tests put their tensors: CPU under the interpreter, else CUDA."""
    pytest.importorskip("triton")
    from genloop.kernels.int8_attention import RUNS_IN_INTERPRETER

    if RUNS_IN_INTERPRETER:
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    pytest.skip("kernels were imported without TRITON_INTERPRET=1 and there is no GPU")


@pytest.fixture
def force(device: torch.device) -> bool:
    """``force=True`` for the dispatchers when the tensors are on CPU (interpreter mode)."""
    return device.type == "cpu"
