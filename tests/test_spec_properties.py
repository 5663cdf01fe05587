"""Property-based tests of the spec models: any spec the scheduler accepts is stored and reads
back equal (JSON cannot silently turn a value into null); any it rejects stores nothing."""

from __future__ import annotations

import json
import sqlite3

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from genloop.sdk import GraphError, RunSpec
from genloop.sdk.validation import bad_values
from genloop.workers.ops import default_registry
from genloop.workers.runtime.scheduler import Scheduler
from genloop.workers.stores.sqlite import SqliteStateStore

SPEC = TypeAdapter(RunSpec)

#: Values that a JSON body can carry into a spec, the awkward ones included.
floats = st.floats(allow_nan=True, allow_infinity=True)
texts = st.text(alphabet=st.characters(codec=None), max_size=12)  # lone surrogates included
scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 300), floats, texts)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(texts, inner, max_size=3), max_leaves=6)

generate_params = st.fixed_dictionaries({}, optional={
    "prompt": texts, "n": st.integers(-1, 300), "seed": st.integers(-1, 10),
    "model": st.sampled_from(["tiny", "shapes", "../../"]), "guidance": floats,
    "steps": st.integers(0, 250), "width": st.sampled_from([8, 16, 33, 64]),
})
other_params = st.dictionaries(st.sampled_from(["text", "top_k", "threshold", "prompt",
                                                "candidates", "target", "strategy"]),
                               values, max_size=4)


@st.composite
def graphs(draw) -> dict:
    ids = draw(st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), min_size=1, max_size=5))
    nodes = []
    for i, node_id in enumerate(ids):
        op = draw(st.sampled_from(["generate", "score", "select", "refine", "nope"]))
        node = {"id": node_id, "op": op,
                "params": draw(generate_params if op == "generate" else other_params)}
        if i and draw(st.booleans()):
            node["inputs"] = draw(st.lists(st.sampled_from(ids), max_size=2))
        for field in ("min_backoff", "max_backoff"):
            if draw(st.booleans()):
                node[field] = draw(floats)
        if draw(st.booleans()):
            node["queue"] = draw(st.sampled_from(["gpu", "cpu", "elsewhere"]))
        nodes.append(node)
    return {"kind": "graph", "nodes": nodes}


loops = st.fixed_dictionaries({"kind": st.just("loop"), "prompt": texts}, optional={
    "target": floats, "guidance": floats, "candidates": st.integers(0, 5),
    "rounds": st.integers(0, 4), "evaluator": texts, "keep": st.integers(0, 3),
})


def stored_runs(store: SqliteStateStore) -> int:
    with sqlite3.connect(store.path) as db:
        return int(db.execute("SELECT COUNT(*) FROM runs").fetchone()[0])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(raw=st.one_of(graphs(), loops))
def test_accepted_specs_read_back_and_rejected_ones_store_nothing(tmp_path_factory, raw):
    store = SqliteStateStore(tmp_path_factory.mktemp("props") / "state.db")
    scheduler = Scheduler(store, default_registry, lambda instances, delay: None,
                          queues=["gpu", "cpu"])
    try:
        try:
            spec = SPEC.validate_python(raw)
            run = scheduler.submit(spec)
        except (ValidationError, GraphError):
            assert stored_runs(store) == 0
            return
        stored = store.run_spec(run.id).spec
        # The stored JSON is strict JSON and parses back to the very spec submitted
        text = json.dumps(stored, allow_nan=False)
        assert SPEC.validate_json(text) == spec, (spec, text)
        assert stored_runs(store) == 1
    finally:
        store.close()


@settings(max_examples=300, deadline=None)
@given(value=values)
def test_the_quick_look_for_bad_values_finds_what_the_walk_finds(value):
    # A limit no string reaches takes the walk; none takes the JSON encoder's quick look first
    assert bad_values(value, "v") == bad_values(value, "v", max_string=10**9)
