"""An executor reads its inputs' results: kept ones from memory, the rest in one store call."""

from __future__ import annotations

from genloop.workers.runtime.executor import InputResults
from genloop.workers.stores import SqliteStateStore
from genloop.workers.stores.records import ResultRecord


class CountingStore(SqliteStateStore):
    """A real SQLite store that counts its result reads."""

    def __init__(self, path) -> None:
        super().__init__(path)
        self.reads: list[list[str]] = []

    def get_result(self, key):
        self.reads.append([key])
        return super().get_result(key)

    def get_results(self, keys):
        self.reads.append(list(keys))
        return super().get_results(keys)


def test_a_reducers_inputs_are_read_in_one_call_and_kept_ones_not_at_all(tmp_path):
    store = CountingStore(tmp_path / "state.db")
    for i in range(5):
        store.put_result(ResultRecord(key=f"k{i}", op="op", items=[i], created_at=1.0))
    inputs = InputResults(store, size=3)
    assert inputs.get("k0").items == [0]

    found = inputs.get_many(["k0", "k1", "k2", "k3", "gone"])

    assert {k: r.items for k, r in found.items()} == {f"k{i}": [i] for i in range(4)}
    assert store.reads == [["k0"], ["k1", "k2", "k3", "gone"]]
    # the last ones read are kept, within the size
    assert sorted(inputs.get_many(["k2", "k3"])) == ["k2", "k3"]
    assert len(store.reads) == 2
    store.close()
