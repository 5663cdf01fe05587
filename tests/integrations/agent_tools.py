"""Constants and helpers the integration tests share (a module of its own: test files cannot
import from ``conftest``, whose name the suite's other conftest files share)."""

from __future__ import annotations

import importlib.util
import sqlite3
import sys
from contextlib import closing
from pathlib import Path
from types import ModuleType

from genloop.integrations import Catalog

#: The test catalog: tiny models only, so every call takes seconds on a CPU.
CATALOG = Catalog(models=("tiny",), evaluators=("clip",))
#: Small, fast arguments for each tool that starts a run.
GENERATE = {"prompt": "a red circle", "n": 2, "top_k": 1, "steps": 2, "wait_seconds": 120}
LOOP = {"prompt": "a red circle", "rounds": 2, "candidates": 2, "steps": 2, "wait_seconds": 120}
#: The tools, in the order every framework lists them.
CATALOG_TOOLS = ("generate_images", "run_loop", "get_run", "get_result", "cancel_run",
                 "refine_run")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


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
