"""Constants and helpers the integration tests share (a module of its own: test files cannot
import from ``conftest``, whose name the suite's other conftest files share)."""

from __future__ import annotations

import sqlite3
from contextlib import closing

from genloop.integrations import Catalog

#: The test catalog: tiny models only, so every call takes seconds on a CPU.
CATALOG = Catalog(models=("tiny",), evaluators=("clip",))
#: Small, fast arguments for each tool that starts a run.
GENERATE = {"prompt": "a red circle", "n": 2, "top_k": 1, "steps": 2, "wait_seconds": 120}
LOOP = {"prompt": "a red circle", "rounds": 2, "candidates": 2, "steps": 2, "wait_seconds": 120}


def run_count(client) -> int:
    """How many runs the embedded store holds (to show a refused call created nothing)."""
    path = client.backend.runtime.home / "state.db"
    with closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
