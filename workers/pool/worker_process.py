"""A worker process of the Redis pool, configured from ``GENLOOP_*`` environment variables.

``genloop worker`` puts its options in the environment and execs
``python -m dramatiq genloop.workers.pool.worker_main --processes N --threads M --queues ...``, so
process management, signals and the consumer loop are Dramatiq's own; ``worker_main`` calls
:func:`build`. That is the edge where the pool's objects are made; nothing else in genloop
binds a global broker.

Heartbeats and leases: Dramatiq's RedisBroker requeues the unacked messages of a worker whose
heartbeat is older than ``heartbeat_timeout`` (60 s); genloop does not rely on it. A claimed
instance holds a lease (``GENLOOP_LEASE_TTL``, 15 s, renewed every third of it), and the
sweeper (every ``GENLOOP_SWEEP_EVERY``, 5 s) re-sends instances whose lease has ended or whose
message is gone, so a dead worker's work runs again about 20 s after it died (the table in
``middleware/sweeper.py``). A redelivered message whose key is leased by a live holder backs
off: the worst case is a wasted delivery, never a second execution.

Routing: the process consumes, besides its queues, the queue of each model it serves on the
generate op's queue, and fetches from one only when its :class:`~.routing.AffinityGate` says so
(:mod:`.routing`).

A worker that serves the generate op imports the generation engine (torch, diffusers) on a
thread of its own once it is up: it takes work at once, and work that comes after the import
no longer waits for it (work taken during it still does).

Stopping (SIGTERM): the process hands its waiting work back at once and exits within
``GENLOOP_GRACE`` (``--grace``, 30 s) of the shutdown's start (:mod:`..middleware.drain`).
"""

from __future__ import annotations

import importlib
import logging
import os
import threading

import dramatiq
import redis

from ..artifacts import open_artifact_store
from ..backends.catalogue import publish, publish_seams
from ..metrics.prometheus import serve_metrics
from ..middleware.drain import Drain
from ..models.models_config import ModelsConfig, models_config, refuse
from ..models.resources import Resources
from ..ops import default_registry
from ..stores.redis import RedisStateStore
from ..stores.retention import configured_retention
from .broker import DEFAULT_QUEUES, wire
from .pool_status import Presence
from .routing import AffinityGate, routed_queue
from .waking_broker import WakingRedisBroker

log = logging.getLogger("genloop.worker")

ENV_REDIS = "GENLOOP_REDIS_URL"
ENV_ARTIFACTS = "GENLOOP_ARTIFACTS"
ENV_QUEUES = "GENLOOP_QUEUES"
ENV_IMPORTS = "GENLOOP_IMPORTS"
ENV_PRELOAD = "GENLOOP_PRELOAD"
ENV_PREFIX = "GENLOOP_PREFIX"
ENV_LEASE_TTL = "GENLOOP_LEASE_TTL"
ENV_HEARTBEAT_MS = "GENLOOP_HEARTBEAT_TIMEOUT_MS"
ENV_MAINTENANCE = "GENLOOP_MAINTENANCE_CHANCE"
ENV_SWEEP_EVERY = "GENLOOP_SWEEP_EVERY"
ENV_MODELS = "GENLOOP_MODELS"
ENV_MEMORY_BUDGET = "GENLOOP_MEMORY_BUDGET_GIB"
ENV_METRICS_PORT = "GENLOOP_METRICS_PORT"
ENV_METRICS_HOST = "GENLOOP_METRICS_HOST"
ENV_PROCESSES = "GENLOOP_PROCESSES"
ENV_GRACE = "GENLOOP_GRACE"
#: Seconds a stopping worker's started work may take before it is handed back (``--grace``).
DEFAULT_GRACE = 30.0


def _list(name: str) -> list[str]:
    return [v for v in os.environ.get(name, "").split(",") if v]


def worker_config(path: str | None, budget_gib: float | None) -> ModelsConfig:
    """A worker's models config: its file (``--models``) with the memory budget of
    ``--memory-budget`` where given."""
    config = models_config(path or None)
    if budget_gib is not None:
        config = config.model_copy(update={"memory_budget_gib": budget_gib})
    return config


def refuse_bad_config(resources: Resources) -> None:
    """Refuse to start, naming every problem, rather than fail each request on a model or
    judge that cannot load (each would then fail for a tenant, at the first request)."""
    refuse(resources.config_problems())


def build():
    """Build this process's broker, store, artifacts and actors from the environment."""
    url = os.environ[ENV_REDIS]
    prefix = os.environ.get(ENV_PREFIX, "genloop")
    for module in _list(ENV_IMPORTS):
        importlib.import_module(module)
    client = redis.Redis.from_url(url)
    broker = WakingRedisBroker(
        url=url,
        heartbeat_timeout=int(os.environ.get(ENV_HEARTBEAT_MS, "60000")),
        # Dramatiq counts this per million fetches; its default (1,000) suits production.
        maintenance_chance=int(os.environ.get(ENV_MAINTENANCE, "1000")),
    )
    dramatiq.set_broker(broker)
    artifacts_uri = os.environ[ENV_ARTIFACTS]
    retention = configured_retention()
    publish_seams(client, prefix, artifacts_uri, retention)
    queues = _list(ENV_QUEUES) or list(DEFAULT_QUEUES)
    # A pool serves whatever submits to it (a gateway's tenants included), so its models are
    # always an allow-list: the built-ins, plus the config file's names if there is one.
    budget = os.environ.get(ENV_MEMORY_BUDGET)
    resources = Resources(allowed=worker_config(os.environ.get(ENV_MODELS),
                                                float(budget) if budget else None))
    refuse_bad_config(resources)
    # Each served model's own queue of generate work, taken by affinity (routing).
    generate_queue = default_registry["generate"].queue
    routes = {routed_queue(generate_queue, model): model for model in resources.served_models()
              } if generate_queue in queues else {}
    wiring = wire(
        broker, RedisStateStore(client=client, prefix=prefix, retention=retention),
        open_artifact_store(artifacts_uri),
        default_registry, queues=[*queues, *routes], resources=resources,
        lease_ttl=float(os.environ.get(ENV_LEASE_TTL, "15")),
        sweep_every=float(os.environ.get(ENV_SWEEP_EVERY, "5")),
        shared_fair=prefix,  # tenants take turns across the pool (redis_fair_queue)
    )
    broker.gate = AffinityGate(client, prefix, broker.namespace, wiring.executor.owner, routes,
                               resources.state)
    resources.held_elsewhere = broker.gate.held_elsewhere
    broker.add_middleware(Drain(wiring.executor, float(os.environ.get(ENV_GRACE, DEFAULT_GRACE))))
    broker.add_middleware(Presence(client, prefix, wiring.executor, resources, queues))
    publish(client, default_registry, queues, prefix, models=resources.served_models(),
            evaluators=resources.evaluators.listing(),
            cache_modes=resources.served_cache_modes())
    if os.environ.get(ENV_METRICS_PORT):
        port = serve_metrics(int(os.environ[ENV_METRICS_PORT]),
                             int(os.environ.get(ENV_PROCESSES, "1")),
                             os.environ.get(ENV_METRICS_HOST) or "127.0.0.1")
        log.info("metrics on port %d (/metrics)", port)
    for name in _list(ENV_PRELOAD):
        log.info("preloading model %s", name)
        resources.models.preload(name)
    if routes:
        threading.Thread(target=_import_engine, daemon=True, name="genloop-engine-import").start()
    return wiring


def _import_engine() -> None:
    """Import the generation engine (torch, diffusers) while the worker waits for work, so
    that its first generate does not: that import holds Python's import lock for seconds (more
    on a busy host), and every thread taking a message meanwhile waited on it, holding its
    message and the fair queue's slot (on an 8-worker pool on 2 cores, the first campaign
    messages a fresh worker took waited 5-17 s)."""
    try:
        importlib.import_module("genloop.workers.engine.generate")
    except Exception:  # noqa: BLE001  (the first generate imports it again and reports why)
        log.exception("importing the generation engine failed")
