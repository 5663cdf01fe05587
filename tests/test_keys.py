"""Result keys and spec hashes are stored (a result under its key, a run's idempotency under its
spec's hash), so they are a format: a worker or gateway of another release, or the same one after
an upgrade, must derive the very same strings, or stored results are computed again and a
resubmitted spec is taken for a new one. These pin the derivation to fixed values."""

from __future__ import annotations

from genloop.workers.runtime.keys import result_key, spec_hash
from genloop.workers.stores.records import ItemRef

_INPUTS = [ItemRef(key="k1", index=0), ItemRef(key="k2", index=3)]
_PARAMS = {"prompt": "un chat bleu é", "n": 2, "shard_size": 4, "steps": 0}


def test_a_result_key_is_derived_the_same_in_every_release():
    # Given: params with a non-ASCII prompt, a falsy value, and shard_size (split-only)
    # When / Then: the key is the one every release derived before
    assert result_key("generate", "2", _PARAMS, _INPUTS, "tiny@abc") == (
        "0d7abfc33347b8d558de9469508881af57421d6f77aabffcee605fd446ceda21")
    assert result_key("generate", "2", _PARAMS, _INPUTS, "tiny@abc", namespace="tenant-a") == (
        "9d5f2d3da58ac2f9ec63e34f481e1675d56405ffff16ed70bf07ab274f7953c8")


def test_shard_size_and_the_order_of_params_leave_a_result_key_unchanged():
    key = result_key("generate", "2", _PARAMS, _INPUTS, "tiny@abc")
    reordered = dict(reversed(list(_PARAMS.items())))
    assert result_key("generate", "2", reordered, _INPUTS, "tiny@abc") == key
    assert result_key("generate", "2", {**_PARAMS, "shard_size": 8}, _INPUTS, "tiny@abc") == key
    assert result_key("generate", "2", {**_PARAMS, "steps": 1}, _INPUTS, "tiny@abc") != key


def test_a_spec_hash_is_derived_the_same_in_every_release():
    # Given: a spec with its lane, its retention, empty labels and no webhook (all left out), a
    # falsy seed and a non-ASCII prompt (both kept)
    spec = {"prompt": "é", "seed": 0, "nodes": [{"id": "gen", "op": "generate"}],
            "priority": "batch", "retention": 3600.0, "labels": {}, "webhook": None}
    assert spec_hash(spec) == "1e122279908b765e3e577c7960bff77c3681275941cc41de0f7ed921c47d4619"
    # The lane, the retention and the order of keys change nothing; labels, once given, do
    other = {**spec, "priority": "interactive", "retention": 60.0}
    assert spec_hash(dict(reversed(list(other.items())))) == spec_hash(spec)
    assert spec_hash({**spec, "labels": {"a": "b"}}) == (
        "cfdb225a0298c4477868146812b3abcdd754ac24929b805c427e48baa33af4d2")
    # A Loop's reuse, added later: at "off" the hash stored before it existed; "auto" is another
    assert spec_hash({**spec, "reuse": "off"}) == spec_hash(spec)
    assert spec_hash({**spec, "reuse": "auto"}) != spec_hash(spec)
