"""The integrations' public names, and what importing them costs a base install."""

from __future__ import annotations

import subprocess
import sys

import genloop.integrations as integrations

FRAMEWORKS = ("torch", "langchain_core", "mcp", "agents", "openai", "dramatiq")


def test_all_lists_exactly_the_public_names():
    public = {n for n in vars(integrations) if not n.startswith("_")
              and not isinstance(getattr(integrations, n), type(integrations))}
    assert set(integrations.__all__) == public - {"annotations"}


def test_the_core_and_the_cli_command_import_no_framework_and_no_torch():
    code = (
        "import sys, genloop.integrations, genloop.integrations.cli;"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({FRAMEWORKS!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
