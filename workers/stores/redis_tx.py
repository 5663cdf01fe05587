"""The Redis store's run transaction: reads under the run lock, writes buffered for one commit
script (see ``redis.py`` for the locking and ``redis_scripts.COMMIT``). Key names are in
``redis_keys.py``."""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import redis

from genloop.sdk.errors import StoreError

from .base import RunTx
from .records import EventRecord, InstanceRecord, NodeRecord, RunRecord
from .redis_keys import PoolKeys

if TYPE_CHECKING:
    from .redis import RedisStateStore


T = TypeVar("T")


def translate_redis_errors(fn: Callable[..., T]) -> Callable[..., T]:
    """Re-raise redis-py's errors as :class:`StoreError`, where they enter genloop."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except redis.RedisError as exc:
            raise StoreError(f"redis: {type(exc).__name__}: {exc}") from exc

    return wrapper


@dataclass(frozen=True)
class InstanceRow:
    """An instance as a commit writes it: its JSON and what its indexes need, taken when it
    was written (a caller may change the record afterwards)."""

    run_id: str
    instance_id: str
    node_id: str
    seq: int
    terminal: bool
    doc: str

    @classmethod
    def of(cls, inst: InstanceRecord) -> InstanceRow:
        return cls(inst.run_id, inst.instance_id, inst.node_id, inst.seq, inst.status.terminal,
                   inst.model_dump_json())

    def record(self) -> InstanceRecord:
        return InstanceRecord.model_validate_json(self.doc)


def write_instances(writes: Writes, k: PoolKeys, rows: Sequence[InstanceRow]) -> None:
    """Instance records, their nodes' indexes and the live set: a few commands, however many
    instances (one HSET and one ZADD per node, not three commands each)."""
    if not rows:
        return
    by_run: dict[str, dict[str, str]] = defaultdict(dict)
    by_node: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    live: dict[str, float] = {}
    ended: list[str] = []
    now = time.time()
    for row in rows:
        by_run[row.run_id][row.instance_id] = row.doc
        by_node[row.run_id, row.node_id][row.instance_id] = row.seq
        member = f"{row.run_id}|{row.instance_id}"
        if row.terminal:
            ended.append(member)
        else:
            live[member] = now
    for run_id, docs in by_run.items():
        writes.hset(k.instances(run_id), mapping=docs)
    for (run_id, node_id), seqs in by_node.items():
        writes.zadd(k.node_instances(run_id, node_id), seqs)
    if live:
        writes.zadd(k.live, live)
    if ended:
        writes.zrem(k.live, *ended)


def event_json(event: EventRecord) -> str:
    return event.model_dump_json(exclude_none=True)


class Writes:
    """Writes buffered as plain commands (``commands``, JSON-ready) for one script that applies
    them all (``redis_scripts.COMMIT`` or ``CREATE``)."""

    _CHUNK = 500  # pairs per command: Lua's unpack() takes a few thousand arguments at most

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def _pairs(self, command: str, name: str, pairs: list[tuple[Any, Any]]) -> None:
        for i in range(0, len(pairs), self._CHUNK):
            self.commands.append([command, name, *(str(x) for kv in pairs[i:i + self._CHUNK]
                                                   for x in kv)])

    def hset(self, name: str, key: str | None = None, value: Any = None,
             mapping: dict[str, Any] | None = None) -> None:
        pairs = list((mapping or {}).items()) + ([(key, value)] if key is not None else [])
        self._pairs("HSET", name, pairs)

    def zadd(self, name: str, mapping: dict[str, float]) -> None:
        self._pairs("ZADD", name, [(sc, m) for m, sc in mapping.items()])

    def zrem(self, name: str, *members: str) -> None:
        for i in range(0, len(members), self._CHUNK):
            self.commands.append(["ZREM", name, *members[i:i + self._CHUNK]])

    def set(self, name: str, value: str) -> None:
        self.commands.append(["SET", name, value])

    def rpush(self, name: str, *values: str) -> None:
        for i in range(0, len(values), self._CHUNK):
            self.commands.append(["RPUSH", name, *values[i:i + self._CHUNK]])

    def release(self, key: str, owner: str) -> None:
        self.commands.append(["_release", key, owner])

    def publish(self, channel: str, message: str) -> None:
        self.commands.append(["PUBLISH", channel, message])


class RedisTx(RunTx):
    """Reads go to Redis (under the run lock) through the store, so redis-py's errors arrive
    as :class:`StoreError`; writes go to a buffer that one script commits (:meth:`writes`).
    Records written earlier in the transaction are kept aside as the JSON written, and read
    back from it, so the transaction reads its own writes as SQLite's does, and a caller
    changing a record it read or wrote changes nothing else. (Deep copies instead cost a
    released 10,000-item map seconds: every instance was copied when written, and again when
    its node completed.)"""

    def __init__(self, store: RedisStateStore, run_id: str) -> None:
        self._k, self._run_id = store.keys, run_id
        self._buffer = Writes()
        self._store = store
        self._run: str | None = None
        self._nodes: dict[str, str] = {}
        self._instances: dict[str, InstanceRow] = {}
        self._counts: dict[str, int] = {}

    def writes(self) -> list[list[str]]:
        """Everything this transaction wrote, as commands for the commit script. Instances go
        last, batched (a released map node writes thousands)."""
        batch = Writes()
        write_instances(batch, self._k, list(self._instances.values()))
        return self._buffer.commands + batch.commands

    def run(self) -> RunRecord:
        if self._run is not None:
            return RunRecord.model_validate_json(self._run)
        return self._store.get_run(self._run_id)

    def put_run(self, run: RunRecord) -> None:
        self._run = run.model_dump_json()
        self._buffer.set(self._k.run(run.id), self._run)
        if run.status.terminal:  # wake the run's watches (run_ends.py), in the same commit
            self._buffer.publish(self._k.ended(run.id), "ended")
        if run.finished_at is not None:  # the retention pass schedules its expiry
            self._buffer.zadd(self._k.ended_runs, {run.id: run.finished_at})

    def pin(self, pinned: bool) -> None:
        self._buffer.commands.append(["SADD" if pinned else "SREM", self._k.pinned, self._run_id])

    def ended_counts(self) -> dict[str, int]:
        return self._store.ended_counts(self._run_id) | self._counts

    def count_ended(self, node_id: str, items: int) -> None:
        self._counts[node_id] = items
        self._buffer.hset(self._k.ended_counts(self._run_id), node_id, items)

    def node(self, node_id: str) -> NodeRecord:
        if node_id in self._nodes:
            return NodeRecord.model_validate_json(self._nodes[node_id])
        return self._store.node(self._run_id, node_id)

    def put_node(self, node: NodeRecord) -> None:
        doc = self._nodes[node.node_id] = node.model_dump_json()
        self._buffer.hset(self._k.nodes(node.run_id), node.node_id, doc)

    def instance(self, instance_id: str) -> InstanceRecord:
        if instance_id in self._instances:
            return self._instances[instance_id].record()
        return self._store.instance(self._run_id, instance_id)

    def instances(self, node_id: str) -> list[InstanceRecord]:
        stored = self._store.node_instances(self._run_id, node_id)  # parsed afresh
        mine = {i: row for i, row in self._instances.items() if row.node_id == node_id}
        out = [mine.pop(inst.instance_id).record() if inst.instance_id in mine else inst
               for inst in stored] + [row.record() for row in mine.values()]
        return sorted(out, key=lambda i: i.seq)

    def put_instance(self, instance: InstanceRecord) -> None:
        self._instances[instance.instance_id] = InstanceRow.of(instance)

    def add_outbox(self, instance_ids: Sequence[str]) -> None:
        if instance_ids:
            now = time.time()
            self._buffer.hset(self._k.outbox, mapping={f"{self._run_id}|{i}": now
                                                       for i in instance_ids})

    def event(self, event: EventRecord) -> None:
        self._buffer.rpush(self._k.events(self._run_id), event_json(event))

    def release(self, key: str, owner: str) -> None:
        self._buffer.release(self._k.claim(key), owner)
