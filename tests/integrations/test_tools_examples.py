"""The agent-integration examples run offline, on the tiny models."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = ("--model", "tiny", "--evaluator", "clip", "--steps", "2")
PNG = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.slow


def run_example(name: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_langchain_agent_gets_an_image_from_run_loop(tmp_path):
    pytest.importorskip("langchain_core")
    out = run_example("langchain_agent.py", "--home", str(tmp_path / "home"),
                      "--out", str(tmp_path / "out"), *TINY)

    assert "[run_loop] Run " in out and "Best score per round" in out
    assert "[agent] Done" in out
    images = list((tmp_path / "out").glob("*.png"))
    assert images and all(p.read_bytes().startswith(PNG) for p in images)


def test_openai_agents_tool_invocation(tmp_path):
    pytest.importorskip("agents")
    out = run_example("openai_agents_tool.py", "--home", str(tmp_path / "home"),
                      "--out", str(tmp_path / "out"), *TINY)

    assert '"done":true' in out and "[agent] Done: the best image is" in out
    assert (tmp_path / "out" / "image-0.png").read_bytes().startswith(PNG)


def test_mcp_client_over_stdio_with_genloop_mcp_as_a_subprocess(tmp_path):
    """The end-to-end MCP check: this process is the client, ``genloop mcp`` the server."""
    pytest.importorskip("mcp")
    spec = importlib.util.spec_from_file_location("mcp_client", EXAMPLES / "mcp_client.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)

    names, saved = example.main(str(tmp_path / "home"), tmp_path / "out", "tiny", "clip", 2)

    assert names == ["generate_images", "run_loop", "get_run", "get_result", "cancel_run",
                     "refine_run"]
    assert saved.read_bytes().startswith(PNG)
