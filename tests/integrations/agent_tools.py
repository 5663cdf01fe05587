"""Constants and helpers the integration tests share (a module of its own: test files cannot
import from ``conftest``, whose name the suite's other conftest files share)."""

from __future__ import annotations

import base64
import functools
import importlib.util
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from types import ModuleType
from typing import Any

from genloop.integrations import Catalog, ToolResult

#: The test catalog: tiny models only, so every call takes seconds on a CPU.
CATALOG = Catalog(models=("tiny",), evaluators=("clip",))
#: Small, fast arguments for each tool that starts a run.
GENERATE = {"prompt": "a red circle", "n": 2, "top_k": 1, "steps": 2, "wait_seconds": 120}
LOOP = {"prompt": "a red circle", "rounds": 2, "candidates": 2, "steps": 2, "wait_seconds": 120}
#: The tools, in the order every framework lists them.
CATALOG_TOOLS = ("generate_images", "run_loop", "get_run", "get_result", "cancel_run",
                 "refine_run")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


#: What ``genloop mcp --local`` offers: the catalog of a fresh back end, with genloop's own
#: names only (this test process's registries also hold what other tests registered).
_SERVED = """
import sys, tempfile
from genloop.integrations import Catalog
from genloop.sdk import Client
with Client.local(home=tempfile.mkdtemp()) as client:
    sys.stdout.write(Catalog.served(client.schema()).model_dump_json())
"""


@functools.cache
def shipped_served_catalog() -> Catalog:
    """The catalog ``genloop mcp --local`` serves, built in a process of its own."""
    out = subprocess.run([sys.executable, "-c", _SERVED], capture_output=True, text=True,
                         timeout=120, check=True)
    return Catalog.model_validate_json(out.stdout)


def load_example(name: str) -> ModuleType:
    """An example script as a module, to call its functions with the tests' client."""
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), EXAMPLES / name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # pydantic resolves the example's annotations through it
    spec.loader.exec_module(module)
    return module


def run_count(client) -> int:
    """How many runs the embedded store holds (to show a refused call created nothing)."""
    path = client.backend.runtime.home / "state.db"
    with closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]


class ProgressLog:
    """An MCP progress callback that keeps each notification with the seconds since the log was
    made (just before the call is sent)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.seen: list[tuple[float, float, str | None]] = []

    async def __call__(self, value: float, total: float | None, message: str | None) -> None:
        self.seen.append((time.monotonic() - self.start, value, message))

    def assert_one_per_event(self) -> None:
        """No message twice (round 2 once repeated each line per candidate job), every value
        above the one before, the first before any work started."""
        values, messages = [v for _, v, _ in self.seen], [m for _, _, m in self.seen]
        assert len(set(messages)) == len(messages), messages
        assert all(a < b for a, b in zip(values, values[1:], strict=False)), values
        assert messages[0].startswith("run ") and messages[0].endswith(" submitted")


def assert_labelled_loop_result(result: Any) -> ToolResult:
    """An MCP ``run_loop`` result that ended: its structuredContent, and each PNG after the
    line naming its label and artifact key, in the order of the structured images."""
    assert not result.is_error, result.content[0].text
    found = ToolResult.model_validate(result.structured_content)
    assert found.done and found.status == "succeeded" and found.refine is None
    assert [r.round for r in found.rounds] == list(range(1, len(found.rounds) + 1))
    assert found.best.label == "best" and found.best.artifact == found.images[0].artifact
    blocks = result.content
    labels = [blocks[i - 1].text for i, c in enumerate(blocks) if c.type == "image"]
    assert labels == [f"{im.label}: {im.artifact}" for im in found.images]
    assert all(base64.b64decode(c.data).startswith(b"\x89PNG")
               for c in blocks if c.type == "image")
    return found
