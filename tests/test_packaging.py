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


@pytest.mark.parametrize("package", ["genloop.sdk", "genloop.workers", "genloop.workers.stores",
                                     "genloop.workers.artifacts", "genloop.workers.ops"])
def test_all_lists_exactly_the_public_names(package):
    module = importlib.import_module(package)
    public = {
        name for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, type(sys))
    }
    assert set(module.__all__) == public
    for name in module.__all__:
        assert hasattr(module, name)
