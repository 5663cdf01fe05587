"""The op catalogue a worker pool publishes, so a client that never imported a custom op's
module (an agent with only the SDK and a Redis client) can still submit graphs that use it.

Workers write each op's routing and retry settings to Redis at boot. A submitting client turns
the entries it has no code for into stand-in specs: enough to plan instances and route them.
A stand-in knows the params' names, which are required and their defaults, so it fills
defaults and shards like the real op; the types are checked by the worker that runs it (a bad
param is a ``Permanent`` error).

Evaluators are published the same way (name -> description and needs, as the worker sees
them): an operator's own judges from the models config, and those a worker's ``--import``
registers, are then names a client or gateway accepts without the judge's module
(:class:`PublishedEvaluators`).
"""

from __future__ import annotations

import json
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, create_model
from pydantic_core import to_jsonable_python

from genloop.evaluators import EvaluatorRegistry
from genloop.sdk.schema import Named

from ..ops.registry import OpRegistry, OpSpec
from ..stores.redis_keys import PoolKeys
from ..stores.redis_text import optional_text, text, texts


def publish_seams(client: redis.Redis, prefix: str, artifacts: str, retention: float) -> None:
    """What a submitting client must agree on with the workers: their artifact store's URI and
    their retention (seconds a finished run is kept)."""
    keys = PoolKeys(prefix)
    client.set(keys.artifacts_config, artifacts)
    client.set(keys.retention_config, repr(retention))


def published_artifacts(client: redis.Redis, prefix: str) -> str | None:
    """The artifact store the pool's workers published, if one has started."""
    return optional_text(client.get(PoolKeys(prefix).artifacts_config)) or None


def published_retention(client: redis.Redis, prefix: str) -> float | None:
    """The retention the pool's workers published, if one has started."""
    value = client.get(PoolKeys(prefix).retention_config)
    return float(value) if value is not None else None


def _fields(model: type[BaseModel]) -> dict[str, dict[str, Any]]:
    out = {}
    for name, field in model.model_fields.items():
        if field.is_required():
            out[name] = {"required": True}
        else:
            default = field.get_default(call_default_factory=True)
            out[name] = {"required": False, "default": to_jsonable_python(default)}
    return out


def _stand_in_params(op: str, fields: dict[str, dict[str, Any]]) -> type[BaseModel]:
    """A params model with the worker's field names and defaults, any types, extras allowed:
    enough to fill defaults and shard like the real op; the worker checks the types."""
    return create_model(  # type: ignore[call-overload]
        f"Remote_{op}_params",
        __config__=ConfigDict(extra="allow"),
        **{
            name: (Any, ... if f["required"] else f.get("default"))
            for name, f in fields.items()
        },
    )


def _remote(params, inputs, ctx):  # pragma: no cover - never called in the client process
    raise RuntimeError("a remote op runs on the workers only")


def publish(client: redis.Redis, registry: OpRegistry, queues: list[str],
            prefix: str = "genloop", models: dict[str, str] | None = None,
            evaluators: dict[str, Named] | None = None,
            cache_modes: dict[str, list[str]] | None = None) -> None:
    """Record this worker's ops, the queues it consumes, its models (name -> description), its
    evaluators (:meth:`~genloop.evaluators.EvaluatorRegistry.listing`) and the cache modes of
    its configured models, for the spec schema a submitting client publishes (and checks)."""
    if queues:
        client.sadd(PoolKeys(prefix).queues, *queues)
    if models:
        # A comprehension, as below: redis-py's mapping type takes no dict[str, str] as it is.
        client.hset(PoolKeys(prefix).models, mapping={
            name: description for name, description in models.items()})
    if evaluators:
        client.hset(PoolKeys(prefix).evaluators, mapping={
            name: named.model_dump_json() for name, named in evaluators.items()})
    if cache_modes:
        client.hset(PoolKeys(prefix).cache_modes, mapping={
            name: json.dumps(modes) for name, modes in cache_modes.items()})
    client.hset(PoolKeys(prefix).ops, mapping={
        name: json.dumps({
            "queue": spec.queue, "version": spec.version, "elementwise": spec.elementwise,
            "max_retries": spec.max_retries, "min_backoff": spec.min_backoff,
            "max_backoff": spec.max_backoff, "fields": _fields(spec.params),
        })
        for name, spec in registry.items()
    })


def published_models(client: redis.Redis, prefix: str = "genloop") -> dict[str, str]:
    return {text(k): text(v) for k, v in client.hgetall(PoolKeys(prefix).models).items()}


class PublishedEvaluators:
    """The evaluator names a submitting client serves: its own registry's and those the pool's
    workers published, the workers' word first (a judge's needs depend on the worker's
    settings). Read from Redis each time it is listed: workers come and go."""

    def __init__(self, client: redis.Redis, local: EvaluatorRegistry,
                 prefix: str = "genloop") -> None:
        self.client, self.local, self.prefix = client, local, prefix

    def listing(self) -> dict[str, Named]:
        published = {text(k): Named.model_validate_json(v)
                     for k, v in self.client.hgetall(PoolKeys(self.prefix).evaluators).items()}
        return {**self.local.listing(), **published}


def published_cache_modes(client: redis.Redis, prefix: str = "genloop"
                          ) -> dict[str, list[str]]:
    """What the pool's workers published of :func:`~..models.capabilities.model_cache_modes`."""
    return {text(k): json.loads(v)
            for k, v in client.hgetall(PoolKeys(prefix).cache_modes).items()}


def published_queues(client: redis.Redis, prefix: str = "genloop") -> set[str]:
    return set(texts(client.smembers(PoolKeys(prefix).queues)))


def with_published(client: redis.Redis, local: OpRegistry, prefix: str = "genloop") -> OpRegistry:
    """``local`` plus stand-ins for the ops only the workers know."""
    merged = OpRegistry()
    for spec in local.values():
        merged.register(spec)
    for key, raw in client.hgetall(PoolKeys(prefix).ops).items():
        name = text(key)
        if name not in merged:
            entry = json.loads(raw)
            params = _stand_in_params(name, entry.pop("fields", {}))
            merged.register(OpSpec(name=name, fn=_remote, params=params, **entry))
    return merged
