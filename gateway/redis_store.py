"""The gateway store in Redis, beside the Redis back end, so any number of gateways share it."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

import redis

from genloop.workers.stores.redis import translate_redis_errors
from genloop.workers.stores.redis_index import members_before
from genloop.workers.stores.redis_keys import GatewayKeys
from genloop.workers.stores.redis_text import optional_text, scored, text, texts

from .limits import TenantLimits
from .store import GatewayStore, KeyInfo, RunSummary, WebhookJob

#: KEYS: the run's artifact set, the tenant's art-refs. ARGV: keys. Counts each key the run did
#: not have yet.
_ADD_ARTIFACTS = """
for i = 1, #ARGV do
  if redis.call('sadd', KEYS[1], ARGV[i]) == 1 then redis.call('hincrby', KEYS[2], ARGV[i], 1) end
end
"""

#: KEYS: the run's artifact set, the tenant's art-refs. Uncounts the run's keys, drops the set.
_DROP_ARTIFACTS = """
for _, key in ipairs(redis.call('smembers', KEYS[1])) do
  if redis.call('hincrby', KEYS[2], key, -1) <= 0 then redis.call('hdel', KEYS[2], key) end
end
redis.call('del', KEYS[1])
"""


class RedisGatewayStore(GatewayStore):
    """Keys under ``prefix``: ``key:<hash>`` (hash), ``keyid:<id>``, ``tenant:<name>``,
    ``run:<id>`` (owner), ``cost:<id>``, ``summary:<id>``, ``session:<hash>`` (a key hash, with
    the session's expiry), and per tenant the sets ``open:``, ``unindexed:`` and ``art:``
    (uploads, and runs' artifacts from before ``art-refs:``), ``art-refs:`` (an artifact key ->
    how many of the tenant's recorded runs made it; ``run-art:<id>`` holds a run's),
    ``runs:`` (run ids by creation time), ``uploads:`` (key -> bytes) with ``upload-usage:``,
    and ``hits:<what>:<tenant>:<window>`` counters."""

    def __init__(self, url: str, prefix: str = "genloop:gw") -> None:
        self.r = redis.Redis.from_url(url, decode_responses=True)
        self.k = GatewayKeys(prefix)
        self._add_artifacts = self.r.register_script(_ADD_ARTIFACTS)
        self._drop_artifacts = self.r.register_script(_DROP_ARTIFACTS)

    @translate_redis_errors
    def _put_key(self, key_hash: str, info: KeyInfo) -> None:
        pipe = self.r.pipeline()
        pipe.set(self.k.key(key_hash), info.model_dump_json())
        pipe.set(self.k.key_id(info.id), key_hash)
        pipe.sadd(self.k.all_keys, key_hash)
        pipe.execute()

    @translate_redis_errors
    def _revoke(self, key_hash: str | None, key_id: str | None) -> KeyInfo | None:
        if not key_hash and key_id is not None:
            key_hash = optional_text(self.r.get(self.k.key_id(key_id)))
        raw = self.r.get(self.k.key(key_hash)) if key_hash else None
        if raw is None or not key_hash:
            return None
        info = KeyInfo.model_validate_json(raw)
        if info.revoked_at is None:
            info.revoked_at = time.time()
            self.r.set(self.k.key(key_hash), info.model_dump_json())
        return info

    @translate_redis_errors
    def keys(self) -> list[KeyInfo]:
        hashes = sorted(texts(self.r.smembers(self.k.all_keys)))
        raws = self.r.mget([self.k.key(h) for h in hashes]) if hashes else []
        infos = [KeyInfo.model_validate_json(raw) for raw in raws if raw]
        return sorted(infos, key=lambda k: k.created_at)

    @translate_redis_errors
    def _tenant_of_hash(self, key_hash: str) -> str | None:
        raw = self.r.get(self.k.key(key_hash))
        if raw is None:
            return None
        info = KeyInfo.model_validate_json(raw)
        return None if info.revoked_at is not None else info.tenant

    @translate_redis_errors
    def _put_session(self, session_hash: str, key_hash: str, expires_at: float) -> None:
        self.r.set(self.k.session(session_hash), key_hash,
                   px=max(1, int((expires_at - time.time()) * 1000)))

    @translate_redis_errors
    def _session_key(self, session_hash: str) -> str | None:
        value = self.r.get(self.k.session(session_hash))
        return None if value is None else str(value)

    @translate_redis_errors
    def _drop_session(self, session_hash: str) -> None:
        self.r.delete(self.k.session(session_hash))

    @translate_redis_errors
    def set_limits(self, tenant: str, limits: TenantLimits) -> None:
        self.r.set(self.k.tenant(tenant), limits.model_dump_json())

    @translate_redis_errors
    def limits(self, tenant: str) -> TenantLimits | None:
        raw = self.r.get(self.k.tenant(tenant))
        return None if raw is None else TenantLimits.model_validate_json(raw)

    @translate_redis_errors
    def add_run(self, run_id: str, tenant: str, idempotency_key: str | None = None,
                cost: float = 0.0, created_at: float | None = None) -> bool:
        if not self.r.set(self.k.run_owner(run_id), tenant, nx=True):
            return False
        pipe = self.r.pipeline()
        pipe.set(self.k.cost(run_id), repr(float(cost)))
        if idempotency_key is not None:
            pipe.set(self.k.idem(idempotency_key), run_id)
            pipe.set(self.k.idem_of(run_id), idempotency_key)
        pipe.sadd(self.k.tenant_set("open", tenant), run_id)
        pipe.zadd(self.k.tenant_set("runs", tenant), {run_id: created_at or time.time()})
        pipe.sadd(self.k.tenant_set("unindexed", tenant), run_id)
        pipe.execute()
        return True

    @translate_redis_errors
    def run_cost(self, run_id: str) -> float:
        value = self.r.get(self.k.cost(run_id))
        return 0.0 if value is None else float(value)

    @translate_redis_errors
    def run_for_key(self, idempotency_key: str) -> str | None:
        value = self.r.get(self.k.idem(idempotency_key))
        return None if value is None else str(value)

    @translate_redis_errors
    def owner(self, run_id: str) -> str | None:
        value = self.r.get(self.k.run_owner(run_id))
        return None if value is None else str(value)

    @translate_redis_errors
    def runs(self, tenant: str, before: float | None = None, limit: int = 50,
             before_id: str | None = None) -> list[tuple[str, float]]:
        key = self.k.tenant_set("runs", tenant)
        if before_id is None:
            top = "+inf" if before is None else f"({before!r}"
            return scored(self.r.zrevrangebyscore(key, top, "-inf", start=0, num=limit,
                                                  withscores=True))
        return members_before(self.r, key, (before if before is not None else float("inf"),
                                            before_id), limit)

    @translate_redis_errors
    def stored_runs(self, tenant: str) -> int:
        return int(self.r.zcard(self.k.tenant_set("runs", tenant)))

    @translate_redis_errors
    def open_runs(self, tenant: str) -> list[str]:
        return sorted(texts(self.r.smembers(self.k.tenant_set("open", tenant))))

    @translate_redis_errors
    def unindexed_runs(self, tenant: str) -> list[str]:
        return sorted(texts(self.r.smembers(self.k.tenant_set("unindexed", tenant))))

    def _drop(self, kind: str, run_id: str) -> None:
        tenant = self.owner(run_id)
        if tenant is not None:
            self.r.srem(self.k.tenant_set(kind, tenant), run_id)

    @translate_redis_errors
    def mark_ended(self, run_id: str) -> None:
        self._drop("open", run_id)

    @translate_redis_errors
    def mark_indexed(self, run_id: str, summary: RunSummary) -> None:
        self.r.set(self.k.summary(run_id), summary.model_dump_json())
        self._drop("unindexed", run_id)

    @translate_redis_errors
    def summary(self, run_id: str) -> RunSummary | None:
        raw = self.r.get(self.k.summary(run_id))
        return None if raw is None else RunSummary.model_validate_json(raw)

    @translate_redis_errors
    def list_earlier_runs(self, created_at: Callable[[str], float | None]) -> int:
        """Owners (``run:<id>``) were recorded before the ``runs:`` index was; a marker key
        says the scan was done, so a gateway opening this store later does not repeat it."""
        if self.r.exists(self.k.listed):
            return 0
        listed = 0
        owner_key = self.k.run_owner("")
        for key in self.r.scan_iter(match=self.k.run_owner("*"), count=1000):
            run_id, tenant = text(key)[len(owner_key):], optional_text(self.r.get(key))
            index = self.k.tenant_set("runs", tenant or "")
            if tenant is None or self.r.zscore(index, run_id) is not None:
                continue
            when = created_at(run_id)
            if when is not None and self.r.zadd(index, {run_id: when}, nx=True):
                listed += 1
        self.r.set(self.k.listed, "1")
        return listed

    @translate_redis_errors
    def forget_at(self, run_id: str, at: float) -> None:
        self.r.zadd(self.k.forgets, {run_id: at})

    @translate_redis_errors
    def due_forgets(self, now: float, limit: int = 100) -> list[str]:
        return [str(m) for m in self.r.zrangebyscore(self.k.forgets, "-inf", now, start=0,
                                                     num=limit)]

    @translate_redis_errors
    def forget_run(self, run_id: str) -> None:
        tenant, idem = self.owner(run_id), optional_text(self.r.get(self.k.idem_of(run_id)))
        if tenant is not None:
            self._drop_artifacts(keys=[self.k.run_artifacts(run_id),
                                       self.k.tenant_set("art-refs", tenant)])
        webhooks = list(texts(self.r.zrange(self.k.webhooks_of(run_id), 0, -1)))
        pipe = self.r.pipeline()
        if tenant is not None:
            for kind in ("open", "unindexed"):
                pipe.srem(self.k.tenant_set(kind, tenant), run_id)
            pipe.zrem(self.k.tenant_set("runs", tenant), run_id)
        if idem is not None and self.r.get(self.k.idem(idem)) == run_id:
            pipe.delete(self.k.idem(idem))
        if webhooks:
            pipe.delete(*(self.k.webhook(w) for w in webhooks))
            pipe.zrem(self.k.webhooks_due, *webhooks)
        pipe.delete(self.k.run_owner(run_id), self.k.cost(run_id), self.k.summary(run_id),
                    self.k.idem_of(run_id), self.k.webhooks_of(run_id))
        pipe.zrem(self.k.forgets, run_id)
        pipe.execute()

    @translate_redis_errors
    def add_artifacts(self, tenant: str, keys: Iterable[str], run_id: str) -> None:
        keys = list(keys)
        if keys:
            self._add_artifacts(keys=[self.k.run_artifacts(run_id),
                                      self.k.tenant_set("art-refs", tenant)], args=keys)

    @translate_redis_errors
    def has_artifact(self, tenant: str, key: str) -> bool:
        pipe = self.r.pipeline(transaction=False)
        pipe.hexists(self.k.tenant_set("art-refs", tenant), key)
        pipe.sismember(self.k.tenant_set("art", tenant), key)
        return any(pipe.execute())

    @translate_redis_errors
    def add_upload(self, tenant: str, key: str, size: int) -> None:
        if self.r.hsetnx(self.k.tenant_set("uploads", tenant), key, size):
            pipe = self.r.pipeline()
            pipe.hincrby(self.k.tenant_set("upload-usage", tenant), "images", 1)
            pipe.hincrby(self.k.tenant_set("upload-usage", tenant), "bytes", size)
            pipe.sadd(self.k.tenant_set("art", tenant), key)
            pipe.execute()

    @translate_redis_errors
    def upload_usage(self, tenant: str) -> tuple[int, int]:
        images, size = self.r.hmget(self.k.tenant_set("upload-usage", tenant), "images", "bytes")
        return int(images or 0), int(size or 0)

    @translate_redis_errors
    def hit(self, tenant: str, what: str, window: float) -> tuple[int, float]:
        now = time.time()
        index = math.floor(now / window)
        start = index * window
        key = self.k.hits(what, tenant, index)
        pipe = self.r.pipeline()
        pipe.incr(key)
        pipe.pexpire(key, int(window * 2000))
        n, _ = pipe.execute()
        return int(n), start + window - now

    @translate_redis_errors
    def put_webhook(self, job: WebhookJob) -> None:
        pipe = self.r.pipeline()
        pipe.set(self.k.webhook(job.webhook_id), job.model_dump_json())
        pipe.zadd(self.k.webhooks_of(job.run_id), {job.webhook_id: 0}, nx=True)
        if job.state == "pending" and job.next_at is not None:
            pipe.zadd(self.k.webhooks_due, {job.webhook_id: job.next_at})
        else:
            pipe.zrem(self.k.webhooks_due, job.webhook_id)
        pipe.execute()

    @translate_redis_errors
    def webhook(self, webhook_id: str) -> WebhookJob | None:
        raw = self.r.get(self.k.webhook(webhook_id))
        return None if raw is None else WebhookJob.model_validate_json(raw)

    @translate_redis_errors
    def due_webhooks(self, now: float, limit: int = 100) -> list[WebhookJob]:
        ids = list(texts(self.r.zrangebyscore(self.k.webhooks_due, "-inf", now, start=0,
                                              num=limit)))
        raws = self.r.mget([self.k.webhook(i) for i in ids]) if ids else []
        return [WebhookJob.model_validate_json(raw) for raw in raws if raw is not None]

    @translate_redis_errors
    def set_webhook_secret(self, tenant: str, secret: str) -> None:
        self.r.set(self.k.webhook_secret(tenant), secret)

    @translate_redis_errors
    def webhook_secret(self, tenant: str) -> str | None:
        value = self.r.get(self.k.webhook_secret(tenant))
        return None if value is None else str(value)

    @translate_redis_errors
    def ping(self) -> None:
        self.r.ping()

    def close(self) -> None:
        self.r.close()
