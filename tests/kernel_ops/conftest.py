"""Run the Triton kernels compiled on a GPU, or through Triton's interpreter on a CPU machine.

TRITON_INTERPRET must be set before the kernel modules are imported (Triton picks the interpreter
when ``@triton.jit`` runs), so it is chosen here, at conftest import. The interpreter is opt-in:
it is switched on only when the caller left TRITON_INTERPRET unset *and* there is no CUDA device
(CPU CI), so a GPU run never inherits it and tests the compiled kernels. An explicit value wins
either way (``TRITON_INTERPRET=0`` on a GPU, ``=1`` to debug there).
"""

from __future__ import annotations

import os

import pytest
import torch

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"


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
    """``force=True`` for the dispatchers: run the kernels on CPU tensors under the interpreter,
    and on a GPU also on the small shapes where dispatch would otherwise pick SDPA for speed."""
    return True
