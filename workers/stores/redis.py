"""Redis state store for the worker pool: every worker process on every host shares it.

The hot path is one server-side script per step (``scripts/*.lua``, see ``redis_scripts.py``):
starting an instance, and completing it together with its node when the node has one instance
(its outputs, its children's counters, the run's end), with no lock and one round trip each; a
new run is one script too. The rest (completing a node of many instances, expanding released
children, failures, retries, cancel) is a run transaction: it holds a per-run lock (``SET NX
PX`` with a random token) while it reads, and buffers its writes into one commit script that
applies them only if the lock is still its own, and drops the lock. Writes therefore land all
together or not at all, and two workers completing the last two parents of a child at the same
instant take turns: the second one sees the first one's counters. The scripts wait while an
exclusive transaction holds the lock; a ``shared`` one (a node's completion) lets them start and
end instances, since those parts cannot touch the records it writes.

Events are a Redis list per run: an event's id is its position, so ids increase without gaps and
a follower resumes with ``LRANGE`` after the last id it saw. (A Stream's ids are timestamps,
which the SQLite store and the HTTP ``Last-Event-ID`` would have to translate.)

Redis errors are translated to :class:`~genloop.sdk.errors.StoreError` where they enter.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from redis.exceptions import NoScriptError

from genloop.sdk.errors import NotFound, StoreError
from genloop.sdk.models import Event

from . import redis_scripts
from .base import (
    DEFAULT_RETENTION,
    READ_BATCH,
    IdempotencyConflict,
    RunTx,
    StateStore,
    creation_events,
)
from .records import (
    EventRecord,
    InstanceRecord,
    NodeRecord,
    ResultRecord,
    RunRecord,
    RunSpecRecord,
    Storage,
)
from .redis_index import members_before
from .redis_keys import PoolKeys
from .redis_text import text, texts
from .redis_tx import (
    InstanceRow,
    RedisTx,
    Writes,
    event_json,
    translate_redis_errors,
    write_instances,
)
from .run_ends import EndWatch
from .steps import Finish, Finished, FinishOutcome, Start, Started

__all__ = ["RedisStateStore", "translate_redis_errors"]

# Compare-and-act on a lease: only its holder may extend or drop it.
_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then " \
         "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then " \
           "return redis.call('del', KEYS[1]) else return 0 end"
_TAKE = "local v = redis.call('get', KEYS[1]) " \
        "if v == false or v == ARGV[1] then " \
        "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end return 0"

#: How long one run transaction may hold its lock; transactions take milliseconds.
_TX_LOCK_MS = 30_000


def _until_not_busy(call: Callable[[], Any]) -> Any:
    """Run a transition script until no run transaction holds the run's lock (milliseconds)."""
    delay = 0.0005
    while True:
        out = call()
        if out[0] != b"busy":
            return out
        time.sleep(delay)
        delay = min(delay * 2, 0.01)


class RedisStateStore(StateStore):
    """State store on Redis. ``prefix`` namespaces the keys (several pools on one Redis)."""

    def __init__(self, url: str = "redis://127.0.0.1:6379/0", *, prefix: str = "genloop",
                 client: redis.Redis | None = None,
                 retention: float = DEFAULT_RETENTION) -> None:
        self.client = client or redis.Redis.from_url(url)
        self.keys = PoolKeys(prefix)
        self.retention = retention
        self._expire_run = self.client.register_script(redis_scripts.EXPIRE_RUN)
        self._delete_results = self.client.register_script(redis_scripts.DELETE_RESULTS)
        self._renew = self.client.register_script(_RENEW)
        self._release = self.client.register_script(_RELEASE)
        self._take = self.client.register_script(_TAKE)
        self._start = self.client.register_script(redis_scripts.START)
        self._finish = self.client.register_script(redis_scripts.FINISH)
        self._commit_script = self.client.register_script(redis_scripts.COMMIT)
        self._create = self.client.register_script(redis_scripts.CREATE)

    @contextmanager
    def watch_end(self, run_id: str) -> Iterator[EndWatch]:
        """A subscription to the run's ``ended`` channel, which the commit (or the ``FINISH``
        script) that ends the run publishes to."""
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(self.keys.ended(run_id))
            # Read the confirmation: from here on no end published is missed by this watch.
            pubsub.get_message(ignore_subscribe_messages=False, timeout=5.0)
            yield _PubSubWatch(pubsub)
        except redis.RedisError as exc:
            raise StoreError(f"redis: {exc}") from exc
        finally:
            pubsub.close()

    # -- runs -------------------------------------------------------------------------------
    @translate_redis_errors
    def create_run(self, run, spec, nodes, instances):
        k, writes = self.keys, Writes()
        writes.set(k.run(run.id), run.model_dump_json())
        writes.set(k.spec(run.id), spec.model_dump_json())
        writes.zadd(k.run_index, {run.id: run.created_at})
        if nodes:
            writes.hset(k.nodes(run.id), mapping={n.node_id: n.model_dump_json() for n in nodes})
        write_instances(writes, k, [InstanceRow.of(i) for i in instances])
        if instances:
            writes.hset(k.outbox, mapping={
                f"{run.id}|{i.instance_id}": time.time() for i in instances})
        writes.rpush(k.events(run.id), *map(event_json, creation_events(run, nodes)))
        idem = [k.idem(run.idempotency_key)] if run.idempotency_key is not None else []
        holder = self._create(keys=idem, args=[run.id, json.dumps(writes.commands)]).decode()
        if holder == run.id:
            return run, True
        found = self.get_run(holder)
        if found.spec_hash != run.spec_hash:
            raise IdempotencyConflict(found.id)
        return found, False

    @translate_redis_errors
    def get_run(self, run_id: str) -> RunRecord:
        raw = self.client.get(self.keys.run(run_id))
        if raw is None:
            raise NotFound(f"no run {run_id!r}")
        return RunRecord.model_validate_json(raw)

    @translate_redis_errors
    def runs_before(self, before: tuple[float, str] | None, limit: int) -> list[RunRecord]:
        ids = [run_id for run_id, _ in members_before(self.client, self.keys.run_index, before,
                                                      limit)]
        raws = self.client.mget([self.keys.run(i) for i in ids]) if ids else []
        return [RunRecord.model_validate_json(raw) for raw in raws if raw is not None]

    @translate_redis_errors
    def run_spec(self, run_id: str) -> RunSpecRecord:
        raw = self.client.get(self.keys.spec(run_id))
        if raw is None:
            raise NotFound(f"no run {run_id!r}")
        return RunSpecRecord.model_validate_json(raw)

    @translate_redis_errors
    def nodes(self, run_id: str) -> list[NodeRecord]:
        return [NodeRecord.model_validate_json(v)
                for v in self.client.hgetall(self.keys.nodes(run_id)).values()]

    @translate_redis_errors
    def instances(self, run_id: str) -> list[InstanceRecord]:
        insts = [InstanceRecord.model_validate_json(v)
                 for v in self.client.hgetall(self.keys.instances(run_id)).values()]
        return sorted(insts, key=lambda i: (i.node_id, i.seq))

    @translate_redis_errors
    def instance(self, run_id: str, instance_id: str) -> InstanceRecord:
        raw = self.client.hget(self.keys.instances(run_id), instance_id)
        if raw is None:
            raise NotFound(f"no instance {instance_id!r} in run {run_id!r}")
        return InstanceRecord.model_validate_json(raw)

    @translate_redis_errors
    def node(self, run_id: str, node_id: str) -> NodeRecord:
        raw = self.client.hget(self.keys.nodes(run_id), node_id)
        if raw is None:
            raise NotFound(f"no node {node_id!r} in run {run_id!r}")
        return NodeRecord.model_validate_json(raw)

    @translate_redis_errors
    def ended_counts(self, run_id: str) -> dict[str, int]:
        """The run's ended nodes' output counts (see :meth:`RunTx.count_ended`)."""
        counts = self.client.hgetall(self.keys.ended_counts(run_id))
        return {text(node): int(items) for node, items in counts.items()}

    @translate_redis_errors
    def node_instances(self, run_id: str, node_id: str) -> list[InstanceRecord]:
        """A node's instances, in ``seq`` order."""
        ids = list(texts(self.client.zrange(self.keys.node_instances(run_id, node_id), 0, -1)))
        raws = self.client.hmget(self.keys.instances(run_id), ids) if ids else []
        return [InstanceRecord.model_validate_json(raw) for raw in raws if raw is not None]

    @contextmanager
    def transaction(self, run_id: str, *, shared: bool = False) -> Iterator[RunTx]:
        # The token's first letter tells the transition scripts whether they must wait.
        lock, token = self.keys.lock(run_id), ("s:" if shared else "x:") + uuid.uuid4().hex
        self._acquire(lock, token)
        committed = False
        try:
            tx = RedisTx(self, run_id)
            yield tx
            self._commit(tx, lock, token)
            committed = True
        finally:
            if not committed:
                try:
                    self._release(keys=[lock], args=[token])
                except redis.RedisError:
                    pass  # the lock expires by itself

    @translate_redis_errors
    def _acquire(self, lock: str, token: str) -> None:
        delay = 0.0005
        while not self.client.set(lock, token, nx=True, px=_TX_LOCK_MS):
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    @translate_redis_errors
    def _commit(self, tx: RedisTx, lock: str, token: str) -> None:
        """Apply the buffered writes and drop the lock in one script, only if the lock is still
        this transaction's: one round trip instead of WATCH, GET, MULTI/EXEC and a release."""
        if not self._commit_script(keys=[lock], args=[token, json.dumps(tx.writes())]):
            raise StoreError("run lock expired before the transaction committed")

    # -- hot transitions as scripts (see redis_scripts) --------------------------------------
    @translate_redis_errors
    def start_instances(self, starts: Sequence[Start]) -> list[tuple[Started, float]]:
        """Each start in one script (``start.lua``), all in one round trip."""
        outs = self._pipelined([self._start_call(s) for s in starts])
        return [(Started(outcome.decode()), max(int(ms), 0) / 1000.0) for outcome, ms in outs]

    @translate_redis_errors
    def finish_instances(self, finishes: Sequence[Finish]) -> list[FinishOutcome]:
        """Each finish in one script (``finish.lua``), all in one round trip."""
        outs = self._pipelined([self._finish_call(f) for f in finishes])
        return [FinishOutcome(Finished.COMPLETED, run_ended=bool(n),
                              ready=[c.decode() for c in ready])
                if step == b"completed" else FinishOutcome(Finished(step.decode()), int(n))
                for step, n, *ready in outs]

    def _pipelined(self, calls: list[tuple[Any, list, list]]) -> list[Any]:
        """Run ``(script, keys, args)`` calls, several in one pipeline of EVALSHAs (not the
        pipeline's own script loading, which asks SCRIPT EXISTS every time); one that found no
        script (a restarted Redis) or a run transaction holding the lock (``busy``) runs again
        alone, until it goes through."""
        if len(calls) == 1:
            script, keys, args = calls[0]
            return [_until_not_busy(lambda: script(keys=keys, args=args))]
        with self.client.pipeline(transaction=False) as pipe:
            for script, keys, args in calls:
                pipe.evalsha(script.sha, len(keys), *keys, *args)
            outs = pipe.execute(raise_on_error=False)
        for out in outs:
            if isinstance(out, Exception) and not isinstance(out, NoScriptError):
                raise out
        return [out if not isinstance(out, NoScriptError) and out[0] != b"busy"
                else _until_not_busy(functools.partial(script, keys=keys, args=args))
                for out, (script, keys, args) in zip(outs, calls, strict=True)]

    def _start_call(self, s: Start) -> tuple[Any, list, list]:
        k, r, now = self.keys, s.running.run_id, time.time()
        return (self._start,
                [k.claim(s.key), k.result(s.key), k.instances(r), k.nodes(r), k.run(r),
                 k.events(r), k.live, k.lock(r), k.results_until],
                [s.owner, int(s.ttl * 1000), s.running.instance_id, s.running.model_dump_json(),
                 s.running.node_id, event_json(s.started), event_json(s.run_running),
                 f"{r}|{s.running.instance_id}", now, now + self.retention, s.key])

    def _finish_call(self, f: Finish) -> tuple[Any, list, list]:
        k, r, done, result, lease = self.keys, f.done.run_id, f.done, f.result, f.lease
        more = [] if f.completion is None else [
            "1", f.completion.outputs_json, event_json(f.completion.node_event),
            event_json(f.completion.run_event),
            str(f.completion.output_count), *f.completion.children]
        return (self._finish,
                [k.instances(r), k.nodes(r), k.events(r), k.live, k.lock(r),
                 k.result(result.key if result else ""), k.outbox,
                 k.claim(lease[0] if lease else ""), k.run(r),
                 k.node_instances(r, done.node_id), k.ended_runs, k.ended_counts(r)],
                [done.instance_id, done.model_dump_json(), done.node_id, event_json(f.event),
                 result.model_dump_json() if result else "", f"{r}|{done.instance_id}",
                 time.time(), f"{r}|@", lease[1] if lease else "", *more])

    # -- results ----------------------------------------------------------------------------
    @translate_redis_errors
    def get_result(self, key: str) -> ResultRecord | None:
        raw = self.client.get(self.keys.result(key))
        return ResultRecord.model_validate_json(raw) if raw is not None else None

    @translate_redis_errors
    def get_results(self, keys: Sequence[str]) -> dict[str, ResultRecord]:
        out = {}
        for lo in range(0, len(keys), READ_BATCH):
            part = keys[lo:lo + READ_BATCH]
            for key, raw in zip(part, self.client.mget([self.keys.result(k) for k in part]),
                                strict=True):
                if raw is not None:
                    out[key] = ResultRecord.model_validate_json(raw)
        return out

    @translate_redis_errors
    def put_result(self, result: ResultRecord) -> ResultRecord:
        if self.client.set(self.keys.result(result.key), result.model_dump_json(), nx=True):
            return result
        return self.get_result(result.key)  # type: ignore[return-value]

    # -- claims -----------------------------------------------------------------------------
    @translate_redis_errors
    def claim(self, key: str, owner: str, ttl: float) -> bool:
        return bool(self.client.set(self.keys.claim(key), owner, nx=True, px=int(ttl * 1000)))

    @translate_redis_errors
    def renew(self, key: str, owner: str, ttl: float) -> bool:
        return bool(self._renew(keys=[self.keys.claim(key)], args=[owner, int(ttl * 1000)]))

    @translate_redis_errors
    def release(self, key: str, owner: str) -> None:
        self._release(keys=[self.keys.claim(key)], args=[owner])

    @translate_redis_errors
    def lease_remaining(self, key: str) -> float:
        ms = self.client.pttl(self.keys.claim(key))
        # PTTL says 0 for a claim with under a millisecond left, which still refuses a claim:
        # a lease is over only once its key is gone (-2)
        return 0.001 if ms == 0 else max(ms, 0) / 1000.0

    @translate_redis_errors
    def try_lock(self, name: str, owner: str, ttl: float) -> bool:
        return bool(self._take(keys=[self.keys.named_lock(name)], args=[owner, int(ttl * 1000)]))

    # -- outbox -----------------------------------------------------------------------------
    @translate_redis_errors
    def outbox(self, older_than: float = 0.0, limit: int = 1000) -> list[tuple[str, str]]:
        cutoff = time.time() - older_than
        entries = []
        for field, at in self.client.hscan_iter(self.keys.outbox, count=1000):
            if float(at) <= cutoff:
                run_id, instance_id = field.decode().split("|", 1)
                entries.append((run_id, instance_id))
                if len(entries) >= limit:
                    break
        return entries

    @translate_redis_errors
    def clear_outbox(self, entries: Sequence[tuple[str, str]]) -> None:
        if entries:
            self.client.hdel(self.keys.outbox, *(f"{r}|{i}" for r, i in entries))

    @translate_redis_errors
    def stale_instances(self, older_than: float, limit: int = 1000) -> list[tuple[str, str]]:
        members = self.client.zrangebyscore(self.keys.live, 0, time.time() - older_than,
                                            start=0, num=limit)
        pairs = (text(m).split("|", 1) for m in members)
        return [(run_id, instance_id) for run_id, instance_id in pairs]

    @translate_redis_errors
    def touch(self, entries: Sequence[tuple[str, str]]) -> None:
        if entries:
            # XX: only entries still live; a finished instance must not come back.
            self.client.zadd(self.keys.live, {f"{r}|{i}": time.time() for r, i in entries},
                             xx=True)

    @translate_redis_errors
    def quarantine(self, run_id: str, instance_id: str, reason: str) -> None:
        member = f"{run_id}|{instance_id}"
        with self.client.pipeline(transaction=True) as pipe:
            pipe.zrem(self.keys.live, member)
            pipe.hdel(self.keys.outbox, member)
            pipe.hset(self.keys.quarantine, member, reason)
            pipe.rpush(self.keys.events(run_id), event_json(EventRecord(
                type="instance.quarantined", time=time.time(), instance_id=instance_id,
                error=reason)))
            pipe.execute()

    # -- events -----------------------------------------------------------------------------
    @translate_redis_errors
    def append_event(self, run_id: str, event: EventRecord) -> int:
        return int(self.client.rpush(self.keys.events(run_id), event_json(event)))

    @translate_redis_errors
    def events(self, run_id: str, after: int = 0, limit: int = 500) -> list[Event]:
        raws = self.client.lrange(self.keys.events(run_id), after, after + limit - 1)
        return [
            Event(id=after + i + 1, run_id=run_id,
                  **EventRecord.model_validate_json(raw).model_dump())
            for i, raw in enumerate(raws)
        ]

    # -- retention (see genloop.workers.stores.retention) ------------------------------------------
    @translate_redis_errors
    def ended_runs(self, limit: int) -> list[str]:
        return list(texts(self.client.zrange(self.keys.ended_runs, 0, limit - 1)))

    @translate_redis_errors
    def schedule_expiry(self, run_id: str, expires_at: float | None,
                        result_keys: Sequence[str]) -> None:
        k = self.keys
        with self.client.pipeline(transaction=True) as pipe:
            if expires_at is not None:
                pipe.zadd(k.expiry, {run_id: expires_at})
                for i in range(0, len(result_keys), READ_BATCH):
                    pipe.zadd(k.results_until,
                              dict.fromkeys(result_keys[i:i + READ_BATCH], expires_at), gt=True)
            else:
                pipe.zrem(k.expiry, run_id)
            pipe.zrem(k.ended_runs, run_id)
            pipe.execute()

    @translate_redis_errors
    def expire_runs(self, now: float, limit: int) -> list[str]:
        k = self.keys
        due = list(texts(self.client.zrangebyscore(k.expiry, "-inf", now, 0, limit)))
        return [r for r in due if self._expire_run(
            keys=[k.run(r), k.spec(r), k.nodes(r), k.instances(r), k.events(r), k.run_index,
                  k.expiry, k.pinned, k.ended_runs, k.ended_counts(r)],
            args=[r, k.node_instances(r), k.idem()])]

    @translate_redis_errors
    def due_results(self, now: float, limit: int) -> list[str]:
        return list(texts(
            self.client.zrangebyscore(self.keys.results_until, "-inf", now, 0, limit)))

    @translate_redis_errors
    def delete_results(self, keys: Sequence[str], now: float) -> int:
        k = self.keys
        return sum(int(self._delete_results(keys=[k.results_until],
                                            args=[now, k.result(), *keys[i:i + READ_BATCH]]))
                   for i in range(0, len(keys), READ_BATCH))

    def reference_docs(self) -> Iterator[str]:
        for pattern in (self.keys.result("*"), self.keys.spec("*")):
            batch: list[bytes] = []
            for name in self.client.scan_iter(match=pattern, count=READ_BATCH):
                batch.append(name)
                if len(batch) == READ_BATCH:
                    yield from texts(self.client.mget(batch))
                    batch = []
            if batch:
                yield from texts(self.client.mget(batch))

    @translate_redis_errors
    def storage(self) -> Storage:
        k = self.keys
        with self.client.pipeline(transaction=False) as pipe:
            for name in (k.run_index, k.expiry, k.results_until):
                pipe.zcard(name)
            pipe.scard(k.pinned)
            pipe.info("memory")
            runs, expiring, results, pinned, memory = pipe.execute()
        return Storage(runs=runs, expiring=expiring, pinned=pinned, results_expiring=results,
                       bytes=int(memory["used_memory"]))

    @translate_redis_errors
    def pinned_runs(self) -> list[str]:
        return list(texts(self.client.smembers(self.keys.pinned)))

    def close(self) -> None:
        self.client.close()


class _PubSubWatch(EndWatch):
    def __init__(self, pubsub: redis.client.PubSub) -> None:
        self._pubsub = pubsub

    def wait(self, timeout: float) -> bool:
        try:
            return self._pubsub.get_message(timeout=timeout) is not None
        except redis.RedisError as exc:
            raise StoreError(f"redis: {exc}") from exc
