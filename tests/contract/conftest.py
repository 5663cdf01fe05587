"""The state store contract runs against every implementation; add new stores to STORES."""

from __future__ import annotations

import pytest

from genloop.workers.stores import SqliteStateStore


def _sqlite(tmp_path):
    return SqliteStateStore(tmp_path / "state.db")


STORES = {"sqlite": _sqlite}


@pytest.fixture(params=sorted(STORES))
def store(request, tmp_path):
    s = STORES[request.param](tmp_path)
    yield s
    s.close()
