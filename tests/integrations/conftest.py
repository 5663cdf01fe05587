"""Tools over the embedded back end with the tiny test model and the tiny CLIP evaluator."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from agent_tools import CATALOG, LOOP  # noqa: E402

from genloop.integrations import GenloopTools  # noqa: E402
from genloop.sdk import Client  # noqa: E402


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
