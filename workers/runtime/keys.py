"""Result keys: what makes two executions the same execution.

key = sha256(op name, op version, canonical params, input item refs, model identity[, namespace])

A run's graph may name a namespace (a gateway puts its tenant there): results are then shared
only between runs of that namespace, so one tenant's cache hit never tells it what another asked.

Canonical params are the validated params model dumped to JSON with defaults filled in, so
``{"n": 1}`` and ``{}`` give the same key. ``shard_size`` only decides how candidates are split
into messages, never what a shard produces, so it is left out. A param added after results
were stored (``reuse``) is left out at its default, so those results keep their keys.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from ..stores.records import ItemRef

#: Params that change how work is split, not what an execution produces.
_SPLIT_ONLY = frozenset({"shard_size"})
#: Params added after results were stored without them, and their defaults.
_ADDED_LATER = {"reuse": "off"}


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def result_key(
    op: str, version: str, params: dict[str, Any], inputs: Sequence[ItemRef], identity: str,
    namespace: str | None = None,
) -> str:
    payload = {
        "op": op,
        "version": version,
        "params": {k: v for k, v in params.items()
                   if k not in _SPLIT_ONLY and (k not in _ADDED_LATER or v != _ADDED_LATER[k])},
        "inputs": [f"{ref.key}#{ref.index}" for ref in inputs],
        "identity": identity,
    }
    if namespace:
        payload["namespace"] = namespace
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def spec_hash(spec: dict[str, Any]) -> str:
    # A spec without labels or webhook keeps the hash it had before they existed; its lane and
    # retention are left out (a gateway fills in the tenant's, and neither changes the images)
    spec = {k: v for k, v in spec.items()
            if k not in ("priority", "retention") and (k not in ("labels", "webhook") or v)
            and (k not in _ADDED_LATER or v != _ADDED_LATER[k])}
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()
