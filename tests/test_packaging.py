"""The SDK stays light, and every package's ``__all__`` names what it exports."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


def test_sdk_import_loads_no_heavy_dependency():
    code = (
        "import sys, genloop.sdk; "
        "heavy = [m for m in ('torch', 'diffusers', 'dramatiq', 'transformers', 'open_clip') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("package", [
    "genloop.sdk", "genloop.workers", "genloop.workers.stores", "genloop.workers.artifacts",
    "genloop.workers.ops", "genloop.workers.engine", "genloop.gateway",
    "genloop.workers.middleware", "genloop.evaluators", "genloop.kernels",
])
def test_all_lists_exactly_the_public_names(package):
    """Every public name of the package is in ``__all__``, and every name of ``__all__``
    resolves (some packages load theirs lazily, so importing them stays cheap)."""
    module = importlib.import_module(package)
    public = {
        name for name, value in vars(module).items()
        if not name.startswith("_") and callable(value)
        and getattr(value, "__module__", "").startswith(package)
    }
    assert public <= set(module.__all__), public - set(module.__all__)
    for name in module.__all__:
        assert getattr(module, name) is not None
