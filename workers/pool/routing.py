"""Model-aware routing on a Redis pool: each model's generate work has a queue of its own, and a
worker takes from a model's queue by affinity (claim by affinity; no coordinator).

Why: on one shared ``gpu`` queue every worker takes whatever comes next and loads the model it
names, evicting another: a pool serving several models keeps loading and evicting (10-60 s of
device time each for an SDXL- or Flux-class model), and every worker ends up loading every model.

How:

- A sender (client, gateway, a worker completing a node) puts a ``generate`` instance of model
  ``M`` on the Dramatiq queue :func:`routed_queue` ``("gpu", M)``, ``gpu.m.M``, instead of
  ``gpu``, through a fair queue and window of that queue's own (:mod:`.redis_fair_queue`).
  The instance's own queue stays ``gpu``: the sweeper's backlog and the pool's status count
  by it. The embedded runtime (one process) does not route: its LRU is unchanged.
  ``GENLOOP_ROUTING=off`` in a sender's environment sends as before (the pool benchmark's
  baseline); workers consume both kinds of queue, so a pool may mix senders.
- A worker consumes the routed queue of every model it serves, and before each fetch from one
  asks its :class:`AffinityGate`, which says yes when

  1. the model is **mine** (resident here or running, which covers its load, or claimed by
     this worker) and its engine has room: less than a full batch waits behind the running
     one. A holder keeps its device busy and leaves the rest on the queue, where every server
     of the model can take it;
  2. the model is **cold** (no live worker holds it: resident, running or queued in its
     engine, nor holds its claim) and this worker has nothing in hand, or has but the model's
     oldest message has waited longer than a load of it takes: the worker claims it and
     loads it;
  3. the model is **warm elsewhere**, this worker has nothing in hand, and another copy pays:
     with ``n`` servers of the model (its holders and the claims being loaded), one more
     pays while ``backlog / n`` exceeds a load plus ``backlog / (n + 1)``, the backlog being
     the model's seconds of work (its images waiting, on the queue or held back by the fair
     queue, and in its holders' engines, at the step time they measured; until one has, the
     oldest message's wait stands in). An idle worker serving several models takes the one
     with the most work for each server.

  "Nothing in hand" (idle) also means no work of a model in its memory waits on that model's
  queue or in the fair queue: between two batches a holder's engine is empty for a moment,
  and a copy taken then would evict a model it is still serving.

  A worker with its own model's work in hand never switches on its own accord, so no worker
  alternates loads; an idle one takes a cold model at once. Interactive work overtakes batch
  work in the fair queue (each lane is a flow of its own), on the model's Dramatiq queue (the
  sender puts an interactive run's messages at its front) and in the engine.
- A worker making room for a load evicts the models other live workers hold first
  (:meth:`AffinityGate.held_elsewhere`, read by the engine's residency), so the pool keeps a
  copy of each model it holds: evicting the only one makes its next request a load.
- A **claim** is a Redis key (``SET NX``, :data:`CLAIM_SECONDS`): it covers the time between a
  worker's decision and its presence record (:mod:`.pool_status`, every 2 s) showing the model
  in its engine, where the message it fetched waits for the load.
- A load's length is the mean of the live workers' last loads of the model, or
  :data:`DEFAULT_LOAD_SECONDS` until one has loaded it.

Failure modes:

- A holder dies: its presence goes stale after ``STALE_AFTER`` (6 s) and its claim after its
  TTL; the model is cold then and the next worker takes it. Its messages come back as before
  (the sweeper, lease expiry, Dramatiq's own requeue).
- Presence is up to a beat old: a model evicted a moment ago may look held elsewhere for up to
  2 s; its work waits that long, or a load's length, before a worker takes it as cold.
- A model nobody serves: its queue has no consumer; the run says it waits for a worker serving
  it (``RunInfo.waiting``) and the work is taken when one starts.
- A declined fetch waits ``DECLINE_WAIT`` (0.2 s) before the gate looks again; an empty routed
  queue blocks on arrival as every idle queue does (:mod:`.waking_broker`).
- Redis errors while deciding: the worker takes (today's behaviour); the fetch would meet the
  same outage.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis
from dramatiq import Message

from ..stores.redis_keys import PoolKeys
from ..stores.redis_text import data, scored, texts
from .pool_status import HEARTBEAT, RecentWorkers, mean_step_seconds

if TYPE_CHECKING:
    from genloop.sdk.graph import Node

log = logging.getLogger(__name__)

#: Set to ``off`` in a sender's environment to send generate work to the shared queue.
ENV_ROUTING = "GENLOOP_ROUTING"
#: Between a queue's queue name and its model's token.
SEPARATOR = ".m."
#: Seconds a load is taken to last until some worker has loaded the model.
DEFAULT_LOAD_SECONDS = 5.0
#: Seconds a claim lasts: until the claimant's presence shows the model in its engine.
CLAIM_SECONDS = 2 * HEARTBEAT

_SAFE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def routing_on() -> bool:
    return os.environ.get(ENV_ROUTING, "on").lower() not in ("off", "0", "false", "no")


def routed_queue(queue: str, model: str) -> str:
    """The Dramatiq queue of ``model``'s work on ``queue``: the model's name where Dramatiq
    takes it as a queue name, else a hash of it (a queue name has letters, digits, ``._-``,
    and Dramatiq's own ``.DQ``/``.XQ`` suffixes are kept out)."""
    token = model
    if not _SAFE.fullmatch(model) or model.endswith((".DQ", ".XQ")) or model in ("DQ", "XQ"):
        token = "h" + hashlib.sha256(model.encode()).hexdigest()[:16]
    return f"{queue}{SEPARATOR}{token}"


def routes_key(namespace: str, queue: str) -> str:
    """The set of routed queues senders have used for ``queue`` (the sweeper's backlog counts
    their messages)."""
    return f"{namespace}:genloop-routes:{queue}"


def held_since_key(prefix: str, routed: str) -> str:
    """The sorted set of the messages for ``routed`` that the pool's fair queue holds back
    (:mod:`.redis_fair_queue`, whose script builds the same name), scored by when each began
    to wait. The Dramatiq queue holds no more than the window (the pool's threads), so the
    age of a model's backlog is read here."""
    return f"{prefix}:fair:{routed}:since"


def held_images_key(prefix: str, routed: str) -> str:
    """The count of the images in the messages for ``routed`` that the pool's fair queue
    holds back (the same script keeps it)."""
    return f"{prefix}:fair:{routed}:images"


def claim_key(prefix: str, model: str, slot: int) -> str:
    return f"{prefix}:pool:claim:{model}:{slot}"


class Router:
    """A sender's choice of Dramatiq queue for an instance: its model's for ``generate`` work
    on the generate op's queue, the instance's own otherwise. ``node_of(run_id, node_id)`` is
    an instance's node (whose params an instance's own override)."""

    def __init__(self, client: redis.Redis, namespace: str, generate_queue: str,
                 node_of: Callable[[str, str], Node | None]) -> None:
        self.client, self.namespace = client, namespace
        self.generate_queue, self.node_of = generate_queue, node_of
        self._known: set[str] = set()

    def __call__(self, queue: str, run_id: str, node_id: str, params: dict[str, Any]) -> str:
        if queue != self.generate_queue:
            return queue
        node = self.node_of(run_id, node_id)
        if node is None or node.op != "generate":
            return queue
        model = params.get("model") or node.params.get("model")
        if not isinstance(model, str) or not model:
            return queue
        routed = routed_queue(queue, model)
        if routed not in self._known:  # once a process: the backlog's list of routed queues
            self.client.sadd(routes_key(self.namespace, queue), routed)
            self._known.add(routed)
        return routed

    @staticmethod
    def queues(client: redis.Redis, namespace: str, queue: str) -> list[str]:
        """The routed queues of ``queue`` any sender has used."""
        return sorted(texts(client.smembers(routes_key(namespace, queue))))


class AffinityGate:
    """Whether this worker may fetch from a routed queue now (the rules in the module's
    docstring). ``routes`` maps each routed queue it consumes to its model; ``hands()`` is
    this process's engine state (:meth:`~..models.resources.Resources.state`)."""

    def __init__(self, client: redis.Redis, prefix: str, namespace: str, worker_id: str,
                 routes: dict[str, str], hands: Callable[[], dict[str, Any]]) -> None:
        self.client, self.prefix, self.namespace = client, prefix, namespace
        self.id, self.routes, self.hands = worker_id, routes, hands
        self._live = RecentWorkers(client, prefix)
        self._others_of: tuple[list[Any], list[dict[str, Any]]] = ([], [])
        self._claims: dict[str, float] = {}  # model -> when this worker's claim ends

    def __call__(self, queue_name: str) -> bool:
        model = self.routes.get(queue_name)
        if model is None:
            return True
        state = self.hands()
        try:
            if model in _in_memory(state) or self._claims.get(model, 0.0) > time.time():
                return _has_room(state)
            return self._may_take(queue_name, model, state)
        except redis.RedisError:
            log.warning("routing: deciding on %s failed; taking", queue_name, exc_info=True)
            return True

    def held_elsewhere(self) -> set[str]:
        """The models other live workers hold in memory (resident or running): this worker's
        eviction takes them first (:attr:`..engine.residency.Residency.spare`), keeping a
        model's only copy in the pool. None on a Redis error (plain LRU then)."""
        try:
            return {m for w in self._others() for m in _in_memory(w)}
        except redis.RedisError:
            log.warning("routing: reading the pool's presence failed", exc_info=True)
            return set()

    def _may_take(self, queue_name: str, model: str, state: dict[str, Any]) -> bool:
        queue = PoolKeys.dramatiq_queue(self.namespace, queue_name)
        if not self.client.llen(queue):
            return True  # nothing to take: the fetch waits for arrivals
        others = self._others()
        holders = [w for w in others if model in _held(w)]
        load = _load_seconds(model, [*others, state])
        idle = not _busy(state) and not self._own_work_waits(state)
        if not holders:  # cold: one worker loads it, at once if it is idle
            return (idle or self._oldest_wait(queue_name) > load) and self._claim(model, 1)
        if not idle:
            return False
        backlog = self._backlog_seconds(queue_name, model, holders)
        if backlog is None:  # not measured yet: by how long the work has waited
            wait = max(_queued_seconds(model, holders), self._oldest_wait(queue_name))
            return self._claim(model, int(wait // load))
        # Warm elsewhere: an idle worker serving several models takes a copy of the one with
        # the most work for each server, so copies follow the backlog.
        share = self._per_server(model, backlog, holders)
        if any(self._share(q, m, others) > share for q, m in self.routes.items() if m != model):
            return False
        # The k-th new copy (k from 0) pays while the work each of n = holders + k servers
        # has, backlog / n, exceeds a load plus the work each then has, backlog / (n + 1).
        ratio, n = backlog / load, len(holders)
        return self._claim(model, sum(1 for k in range(len(others) + 1)
                                      if (n + k) * (n + k + 1) < ratio))

    def _own_work_waits(self, state: dict[str, Any]) -> bool:
        """Whether work for a model in this worker's memory waits on its queue or held back
        by the fair queue. Between two batches a holder has nothing in hand for a moment; a
        copy of another model taken then evicted a model it was serving, and on the pool
        benchmark one worker loaded 16 times as two busy models took turns."""
        mine = _in_memory(state)
        queues = [q for q, m in self.routes.items() if m in mine]
        if not queues:
            return False
        with self.client.pipeline(transaction=False) as pipe:
            for q in queues:
                pipe.llen(PoolKeys.dramatiq_queue(self.namespace, q))
                pipe.zcard(held_since_key(self.prefix, q))
            return any(pipe.execute())

    def _backlog_seconds(self, queue_name: str, model: str,
                         holders: list[dict[str, Any]]) -> float | None:
        """Device seconds of the model's work: waiting (held back by the fair queue, or on
        its Dramatiq queue at the held messages' mean images) and in its holders' engines, at
        the step time they measured (:func:`.pool_status.mean_step_seconds`); ``None`` until
        one has."""
        steps = max((w.get("default_steps", {}).get(model, 0) for w in holders), default=0)
        rate = mean_step_seconds(model, holders)
        if rate is None or not steps:
            return None
        queue = PoolKeys.dramatiq_queue(self.namespace, queue_name)
        with self.client.pipeline(transaction=False) as pipe:
            pipe.get(held_images_key(self.prefix, queue_name))
            pipe.zcard(held_since_key(self.prefix, queue_name))
            pipe.llen(queue)
            held_raw, held_messages, sent = pipe.execute()
        held = int(held_raw or 0)
        images = held + sent * (held / held_messages if held_messages else 1)
        return (images * steps * rate
                + sum(_engine_seconds(model, w) for w in holders))

    def _share(self, queue_name: str, model: str, others: list[dict[str, Any]]) -> float:
        """The model's backlog seconds for each of its servers and one more (0 unless work
        for it waits, some live worker holds it and has measured it)."""
        queue = PoolKeys.dramatiq_queue(self.namespace, queue_name)
        holders = [w for w in others if model in _held(w)]
        if not holders or not self.client.llen(queue):
            return 0.0
        backlog = self._backlog_seconds(queue_name, model, holders)
        return 0.0 if backlog is None else self._per_server(model, backlog, holders)

    def _per_server(self, model: str, backlog: float, holders: list[dict[str, Any]]) -> float:
        """The model's backlog seconds over its servers (holders and claims) and one more."""
        return backlog / (len(holders) + self._claimed(model) + 1)

    def _claimed(self, model: str) -> int:
        """The model's claims taken and not yet shown in their claimants' presence (a slot
        each, numbered from 0; at most one per live worker)."""
        slots = len(self._others()) + 1
        return sum(v is not None for v in self.client.mget(
            [claim_key(self.prefix, model, slot) for slot in range(slots)]))

    def _claim(self, model: str, copies: int) -> bool:
        """Take one of the model's first ``copies`` claims, if one is free."""
        for slot in range(copies):
            if self.client.set(claim_key(self.prefix, model, slot), self.id, nx=True,
                               px=int(CLAIM_SECONDS * 1000)):
                self._claims[model] = time.time() + CLAIM_SECONDS
                log.info("routing: this worker takes model %s", model)
                return True
        return False

    def _others(self) -> list[dict[str, Any]]:
        """The other live workers that are not draining, as their presence records say (made
        once per presence read, not on every fetch)."""
        live = self._live()
        read, others = self._others_of
        if live is not read:
            others = [w.model_dump() for w in live if w.id != self.id and not w.draining]
            self._others_of = (live, others)
        return others

    def _oldest_wait(self, queue_name: str) -> float:
        """Seconds the queue's oldest work has waited, on the Dramatiq queue or held back by
        the fair queue (0 if there is none)."""
        queue = PoolKeys.dramatiq_queue(self.namespace, queue_name)
        oldest = self.client.lindex(queue, 0)
        raw = self.client.hget(f"{queue}.msgs", oldest) if oldest is not None else None
        since = [score for _, score in scored(self.client.zrange(
            held_since_key(self.prefix, queue_name), 0, 0, withscores=True))]
        if raw is not None:
            since.append(Message.decode(data(raw)).message_timestamp / 1000)
        return max([0.0, *(time.time() - t for t in since)])  # 0 for a clock ahead


def _in_memory(state: dict[str, Any]) -> set[str]:
    """The models a worker runs without a load: resident, or running (which covers a load)."""
    running = state.get("running")
    return {*state.get("resident", ()), *([running[0]] if running else [])}


def _held(state: dict[str, Any]) -> set[str]:
    """The models a worker's state shows in its hands: resident, running or queued."""
    running = state.get("running")
    return {*state.get("resident", ()), *state.get("queued_images", {}),
            *([running[0]] if running else [])}


def _busy(state: dict[str, Any]) -> bool:
    return bool(state.get("running")) or any(state.get("queued_images", {}).values())


def _has_room(state: dict[str, Any]) -> bool:
    """Whether a worker's engine holds less than a full batch (of the last batch's kind, else
    of the running one's size) waiting; nothing at all, before its first batch. A holder takes
    no more than that (its device stays busy), and the rest waits where every server of the
    model can take it: a holder that took all it could fetch starved the others, since its
    own finished batches let the next messages in and its own threads fetched them first."""
    running, limit = state.get("running"), state.get("batch_limit")
    queued = sum(state.get("queued_images", {}).values())
    return queued < (limit or (running[1] if running else 1))


def _engine_seconds(model: str, state: dict[str, Any]) -> float:
    """Seconds a worker takes to get through the model's images in its engine (0 if it has
    not measured the model)."""
    running = state.get("running")
    images = state.get("queued_images", {}).get(model, 0) + (
        running[1] if running and running[0] == model else 0)
    return (images * state.get("default_steps", {}).get(model, 0)
            * state.get("step_seconds", {}).get(model, 0.0))


def _queued_seconds(model: str, states: list[dict[str, Any]]) -> float:
    """Seconds these workers take, on average, to get through the model's images in their
    engines: how long work handed to them waits."""
    waits = [_engine_seconds(model, state) for state in states]
    return sum(waits) / len(waits) if waits else 0.0


def _load_seconds(model: str, states: list[dict[str, Any]]) -> float:
    """The mean of these workers' last loads of the model (:data:`DEFAULT_LOAD_SECONDS` if
    none has loaded it)."""
    measured = [s["load_seconds"][model] for s in states
                if model in s.get("load_seconds", {})]
    return sum(measured) / len(measured) if measured else DEFAULT_LOAD_SECONDS
