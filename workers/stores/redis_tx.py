"""The Redis store's run transaction: reads under the run lock, writes buffered for one commit
script (see ``redis.py`` for the locking and ``redis_scripts.COMMIT``), and the key layout."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from genloop.sdk.errors import NotFound

from .base import RunTx
from .records import EventRecord, InstanceRecord, NodeRecord, ResultRecord, RunRecord

if TYPE_CHECKING:
    from .redis import RedisStateStore


class Keys:
    def __init__(self, prefix: str) -> None:
        self.p = prefix

    def run(self, r: str) -> str:
        return f"{self.p}:run:{r}"

    def spec(self, r: str) -> str:
        return f"{self.p}:run:{r}:spec"

    def nodes(self, r: str) -> str:
        return f"{self.p}:run:{r}:nodes"

    def instances(self, r: str) -> str:
        return f"{self.p}:run:{r}:instances"

    def node_instances(self, r: str, node_id: str) -> str:
        return f"{self.p}:run:{r}:node:{node_id}"

    def events(self, r: str) -> str:
        return f"{self.p}:run:{r}:events"

    def lock(self, r: str) -> str:
        return f"{self.p}:run:{r}:lock"

    def idem(self, key: str) -> str:
        return f"{self.p}:idem:{key}"

    def result(self, key: str) -> str:
        return f"{self.p}:result:{key}"

    def claim(self, key: str) -> str:
        return f"{self.p}:claim:{key}"

    def named_lock(self, name: str) -> str:
        return f"{self.p}:lock:{name}"

    @property
    def outbox(self) -> str:
        return f"{self.p}:outbox"

    @property
    def quarantine(self) -> str:
        """Unreadable instances taken out of recovery: member -> why."""
        return f"{self.p}:quarantine"

    @property
    def live(self) -> str:
        """Unfinished instances, scored by when they last changed."""
        return f"{self.p}:live"


def write_instance(pipe, k: Keys, inst: InstanceRecord) -> None:
    pipe.hset(k.instances(inst.run_id), inst.instance_id, inst.model_dump_json())
    pipe.zadd(k.node_instances(inst.run_id, inst.node_id), {inst.instance_id: inst.seq})
    member = f"{inst.run_id}|{inst.instance_id}"
    if inst.status.terminal:
        pipe.zrem(k.live, member)
    else:
        pipe.zadd(k.live, {member: time.time()})


def event_json(event: EventRecord) -> str:
    return event.model_dump_json(exclude_none=True)


class _Writes:
    """A transaction's writes, buffered as plain commands for the commit script (the subset of
    redis-py's pipeline interface that the transaction uses)."""

    _CHUNK = 500  # fields per HSET: Lua's unpack() takes a few thousand arguments at most

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def hset(self, name: str, key: str | None = None, value: Any = None,
             mapping: dict[str, Any] | None = None) -> None:
        pairs = list((mapping or {}).items()) + ([(key, value)] if key is not None else [])
        for i in range(0, len(pairs), self._CHUNK):
            self.commands.append(["HSET", name, *(str(x) for kv in pairs[i:i + self._CHUNK]
                                                  for x in kv)])

    def zadd(self, name: str, mapping: dict[str, float]) -> None:
        self.commands.append(["ZADD", name, *(str(x) for m, sc in mapping.items()
                                              for x in (sc, m))])

    def zrem(self, name: str, *members: str) -> None:
        self.commands.append(["ZREM", name, *members])

    def set(self, name: str, value: str, nx: bool = False) -> None:
        self.commands.append(["SET", name, value, *(["NX"] if nx else [])])

    def rpush(self, name: str, *values: str) -> None:
        self.commands.append(["RPUSH", name, *values])

    def release(self, key: str, owner: str) -> None:
        self.commands.append(["_release", key, owner])


class RedisTx(RunTx):
    """Reads go to Redis (under the run lock), writes to a buffer that one script commits.
    Records written earlier in the transaction are kept aside, so the transaction reads its own
    writes as SQLite's does."""

    def __init__(self, store: RedisStateStore, run_id: str) -> None:
        self._r, self._k, self._run_id = store.client, store.keys, run_id
        self._pipe = _Writes()
        self._store = store
        self._run: RunRecord | None = None
        self._nodes: dict[str, NodeRecord] = {}
        self._instances: dict[str, InstanceRecord] = {}

    def run(self) -> RunRecord:
        if self._run is not None:
            return self._run.model_copy(deep=True)
        return self._store.get_run(self._run_id)

    def put_run(self, run: RunRecord) -> None:
        self._run = run.model_copy(deep=True)
        self._pipe.set(self._k.run(run.id), run.model_dump_json())

    def node(self, node_id: str) -> NodeRecord:
        if node_id in self._nodes:
            return self._nodes[node_id].model_copy(deep=True)
        raw = self._r.hget(self._k.nodes(self._run_id), node_id)
        if raw is None:
            raise NotFound(f"no node {node_id!r} in run {self._run_id!r}")
        return NodeRecord.model_validate_json(raw)

    def put_node(self, node: NodeRecord) -> None:
        self._nodes[node.node_id] = node.model_copy(deep=True)
        self._pipe.hset(self._k.nodes(node.run_id), node.node_id, node.model_dump_json())

    def instance(self, instance_id: str) -> InstanceRecord:
        if instance_id in self._instances:
            return self._instances[instance_id].model_copy(deep=True)
        return self._store.instance(self._run_id, instance_id)

    def instances(self, node_id: str) -> list[InstanceRecord]:
        ids = [i.decode() for i in
               self._r.zrange(self._k.node_instances(self._run_id, node_id), 0, -1)]
        ids += [i for i, inst in self._instances.items()
                if inst.node_id == node_id and i not in ids]
        raws = self._r.hmget(self._k.instances(self._run_id), ids) if ids else []
        stored = dict(zip(ids, raws, strict=True))
        out = []
        for i in ids:
            if i in self._instances:
                out.append(self._instances[i].model_copy(deep=True))
            elif stored.get(i) is not None:
                out.append(InstanceRecord.model_validate_json(stored[i]))
        return sorted(out, key=lambda inst: inst.seq)

    def put_instance(self, instance: InstanceRecord) -> None:
        self._instances[instance.instance_id] = instance.model_copy(deep=True)
        write_instance(self._pipe, self._k, instance)

    def add_outbox(self, instance_ids: Sequence[str]) -> None:
        if instance_ids:
            now = time.time()
            self._pipe.hset(self._k.outbox, mapping={f"{self._run_id}|{i}": now
                                                     for i in instance_ids})

    def event(self, event: EventRecord) -> None:
        self._pipe.rpush(self._k.events(self._run_id), event_json(event))

    def put_result(self, result: ResultRecord) -> ResultRecord:
        stored = self._store.get_result(result.key)
        if stored is not None:
            return stored
        self._pipe.set(self._k.result(result.key), result.model_dump_json(), nx=True)
        return result

    def get_result(self, key: str) -> ResultRecord | None:
        return self._store.get_result(key)

    def claim(self, key: str, owner: str, ttl: float) -> float:
        if self._store.claim(key, owner, ttl):
            return 0.0
        return max(self._store.lease_remaining(key), 0.001)

    def release(self, key: str, owner: str) -> None:
        self._pipe.release(self._k.claim(key), owner)
