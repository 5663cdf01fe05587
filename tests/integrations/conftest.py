"""Tools over the embedded back end with the tiny test model and the tiny CLIP evaluator."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing

import pytest

from genloop.integrations import Catalog, GenloopTools
from genloop.sdk import Client

#: The test catalog: tiny models only, so every call takes seconds on a CPU.
CATALOG = Catalog(models=("tiny",), evaluators=("clip",))
#: Small, fast arguments for each tool that starts a run.
GENERATE = {"prompt": "a red circle", "n": 2, "top_k": 1, "steps": 2, "wait_seconds": 120}
LOOP = {"prompt": "a red circle", "rounds": 2, "candidates": 2, "steps": 2, "wait_seconds": 120}


@pytest.fixture
def tools(client) -> GenloopTools:
    return GenloopTools(client, catalog=CATALOG)


@pytest.fixture(scope="module")
def shared_client(tmp_path_factory, resources) -> Iterator[Client]:
    """One embedded back end for a whole module: repeated calls find their results stored."""
    home = tmp_path_factory.mktemp("integrations") / "home"
    with Client.local(home=home, threads=4, resources=resources, lease_ttl=5.0) as client:
        yield client


@pytest.fixture(scope="module")
def shared_tools(shared_client) -> GenloopTools:
    return GenloopTools(shared_client, catalog=CATALOG)


@pytest.fixture(scope="module")
def finished_run(shared_tools) -> str:
    """The id of a small loop that has finished, for the tools that take a run id."""
    out = shared_tools.call("run_loop", LOOP)
    assert out.done
    return out.run_id


def run_count(client) -> int:
    """How many runs the embedded store holds (to show a refused call created nothing)."""
    path = client.backend.runtime.home / "state.db"
    with closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT COUNT(*) FROM runs").fetchone()[0]
