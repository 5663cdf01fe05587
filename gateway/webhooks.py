"""Webhook deliveries: when a run with a ``webhook`` ends, its summary is POSTed there, signed.

At least once, surviving restarts: a run's job is written to the gateway store when the run is
accepted (:class:`~.store.WebhookJob`), and the deliverer, a thread of each gateway, takes due
jobs from it. A job whose run has not ended is looked at again every ``PENDING_POLL`` seconds;
once it has, the summary goes out with the Standard Webhooks headers (:mod:`genloop.sdk.
webhooks`), signed with the tenant's secret. A 2xx ends the job, 410 Gone stops it; anything
else (an error status, a timeout, a refused connection) is retried after ``backoff x 2^(n-1)``
seconds, n the attempts so far, at most ``MAX_DELAY``, with 20% jitter, until ``GIVE_UP``
after the first attempt: with the default 5 s, 5 s, 10 s, 20 s ... 68 min, then every 2 h, about
25 attempts in a day. Every attempt is a ``webhook.attempt`` event of the run (status, time
taken, the first 200 characters of the answer), so the console's event log shows them. Two
gateways may both send a due job: a receiver drops the duplicate by its ``webhook-id``, which
every attempt and replay of one run's delivery share.

The address is checked at submit and again before each attempt (:mod:`.webhook_addresses`).
Attempts are the tenant's cost: each is counted against its ``webhook_attempts_per_minute``,
and one past it waits for the next minute (it is not an attempt), so no tenant's failing
receivers can have the gateway send more than that.
"""

from __future__ import annotations

import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from genloop.sdk.backend import TERMINAL_EVENTS, Backend
from genloop.sdk.errors import GenloopError
from genloop.sdk.models import Event, RunResult
from genloop.sdk.ops import RefineRequest
from genloop.sdk.webhooks import signed_headers
from genloop.workers.backends.store_backend import StoreBackend
from genloop.workers.stores.records import EventRecord

from .limits import TenantLimits
from .store import GatewayStore, WebhookJob
from .webhook_addresses import AddressPolicy, WebhookRefused

log = logging.getLogger(__name__)

#: How often a job whose run has not ended is looked at, behind the watch of its end.
PENDING_POLL = 1.0
#: Seconds before a failed delivery's first retry (doubling after each), unless configured.
BACKOFF = 5.0
MAX_DELAY = 2 * 3600.0
GIVE_UP = 24 * 3600.0
TIMEOUT = 10.0
EXCERPT = 200


def retry_delay(attempts: int, backoff: float, rng: random.Random) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones."""
    return min(backoff * 2 ** (attempts - 1), MAX_DELAY) * rng.uniform(0.8, 1.2)


def summary(result: RunResult, labels: dict[str, str]) -> dict[str, Any]:
    """What a delivery says: small (no candidates, no embeddings); the rest is a GET away."""
    best = result.best
    return {
        "type": "run.ended", "run_id": result.run_id, "status": result.status.value,
        "labels": labels, "finished_at": result.finished_at,
        "best": None if best is None else {"artifact": best.artifact, "score": best.score,
                                           "prompt": best.prompt},
        "rounds": [{"round": r.round, "best_score": r.best_score} for r in result.rounds],
        "compute": result.compute.model_dump(mode="json"),
        "failures": [{"node_id": f.node_id, "error_type": f.error_type,
                      "message": f.message[:EXCERPT]} for f in result.failures[:5]],
        "failed_items": sum(f.items for f in result.failures),
    }


_ROUND_SCORED = re.compile(r"round-(\d+)/score")


def event_payload(event: Event, wanted: Collection[str],
                  labels: dict[str, str]) -> dict[str, Any] | None:
    """What a delivery of ``event`` says, if it is one of the ``wanted`` kinds: a loop pausing
    for its agent (what it shows, without critiques), or a round of a loop scored."""
    head = {"run_id": event.run_id, "event_id": event.id, "time": event.time, "labels": labels}
    if event.type == "refine.requested" and "refine.requested" in wanted and event.message:
        pause = RefineRequest.model_validate_json(event.message)
        return {"type": "refine.requested", **head, "node_id": pause.node_id,
                "round": pause.round, "candidates": pause.candidates, "timeout": pause.timeout,
                "scored": [{"artifact": c.artifact, "score": c.score, "seed": c.seed,
                            "round": c.round} for c in pause.scored]}
    if (event.type == "node.succeeded" and "round.finished" in wanted and event.node_id
            and (m := _ROUND_SCORED.fullmatch(event.node_id))):
        return {"type": "round.finished", **head, "round": int(m.group(1))}
    return None


class WebhookDeliverer:
    """Sends due jobs on a pool of ``senders`` threads (a slow receiver holds up only its own
    delivery); a job whose run has not ended waits on the back end's end of that run (told, not
    polling) on a pool of ``watchers``, with a poll every ``PENDING_POLL`` s behind it."""

    def __init__(self, store: GatewayStore, backend: Backend, policy: AddressPolicy, *,
                 backoff: float = BACKOFF, poll: float = 0.1, timeout: float = TIMEOUT,
                 senders: int = 16, watchers: int = 64,
                 limits: Callable[[str], TenantLimits] | None = None) -> None:
        self.store, self.backend, self.policy = store, backend, policy
        self.limits = limits or (lambda _tenant: TenantLimits())
        self.backoff, self.poll, self.timeout = backoff, poll, timeout
        self._rng = random.Random()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._busy: set[str] = set()  # run ids in a sender's hands
        self._watched: set[str] = set()  # run ids a watcher waits on
        self._ready: set[str] = set()  # webhook ids a watcher found ready
        self._senders = ThreadPoolExecutor(senders, thread_name_prefix="genloop-webhook-send")
        self._watchers = ThreadPoolExecutor(watchers,
                                            thread_name_prefix="genloop-webhook-watch")
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Deliver from now on (once: later calls do nothing). A gateway starts it with its
        first webhook, or at once when its store holds pending ones (a restart)."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="genloop-webhooks")
                self._thread.start()

    def wake(self) -> None:
        """Look at the due jobs now (a new one was stored)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout + 1)
        self._senders.shutdown(wait=False, cancel_futures=True)
        self._watchers.shutdown(wait=False, cancel_futures=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                self.step(wait=False)
            except Exception:  # a store outage: try again shortly, never die
                log.warning("webhook deliveries: a step failed", exc_info=True)
            self._wake.wait(self.poll)

    def step(self, wait: bool = True) -> int:
        """Hand every due job not already in hand to the senders; how many. ``wait``: return
        once they are done (tests)."""
        taken = []
        jobs = self.store.due_webhooks(time.time())
        with self._lock:
            ready, self._ready = self._ready - {j.webhook_id for j in jobs}, set()
        for webhook_id in ready:  # woken by its run: sent at once unless already tried
            job = self.store.webhook(webhook_id)
            if job is not None and job.state == "pending" and job.attempts == 0:
                jobs.append(job)
        for job in jobs:
            with self._lock:
                if _owner(job) in self._busy:  # a sender has the run: take it next step
                    if job.webhook_id in ready:
                        self._ready.add(job.webhook_id)
                    continue
                self._busy.add(_owner(job))
            taken.append(self._senders.submit(self._guarded, self._one, job))
        if wait:
            for future in taken:
                future.result()
        return len(taken)

    def replay(self, job: WebhookJob) -> WebhookJob:
        """Send ``job`` again now (same ``webhook-id``), whatever became of it."""
        job = job.model_copy(update={"state": "pending", "next_at": time.time(),
                                     "first_attempt_at": None})
        self.store.put_webhook(job)
        self._wake.set()
        return job

    def _guarded(self, fn: Callable[[WebhookJob], None], job: WebhookJob) -> None:
        try:
            fn(job)
        except Exception:
            log.warning("webhook of run %s: a step failed", job.run_id, exc_info=True)
        finally:
            with self._lock:
                self._busy.discard(_owner(job))

    def _one(self, listed: WebhookJob) -> None:
        job = self._still_due(listed)
        if job is None:
            return
        if job.kind != "run.ended":  # an event's delivery: its payload is ready
            self._attempt(job, json.dumps(job.payload).encode())
            return
        info = self.backend.get(job.run_id)
        if job.events:
            job = self._new_events(job, info.labels)
        if not info.status.terminal:
            self.store.put_webhook(job.model_copy(update={"next_at": time.time() + PENDING_POLL}))
            with self._lock:
                if job.run_id in self._watched:
                    return
                self._watched.add(job.run_id)
            self._watchers.submit(self._watch, job)
            return
        self._attempt(job, json.dumps(summary(self.backend.result(job.run_id),
                                              info.labels)).encode())

    def _still_due(self, listed: WebhookJob) -> WebhookJob | None:
        """The job as stored now, if no sender has moved it on since it was listed: a step
        lists the due jobs before it looks at which ones a sender holds, and a sender can make
        a delivery and let go of the job in between (sending it again would be a duplicate)."""
        job = self.store.webhook(listed.webhook_id)
        if (job is None or job.state != "pending" or job.attempts != listed.attempts
                or job.after != listed.after):
            return None
        return job

    def _new_events(self, job: WebhookJob, labels: dict[str, str]) -> WebhookJob:
        """A delivery for each event the run's webhook asked for since ``job.after``, stored
        before ``after`` moves past it (a crash in between sends one twice, same webhook-id)."""
        while batch := self.backend.events(job.run_id, job.after, 500):
            scores: dict[int, float | None] | None = None
            for event in batch:
                if payload := event_payload(event, job.events, labels):
                    if payload["type"] == "round.finished":
                        if scores is None:  # read once a batch: the rounds' best scores
                            scores = {r.round: r.best_score
                                      for r in self.backend.result(job.run_id).rounds}
                        payload["best_score"] = scores.get(payload["round"])
                    self.store.put_webhook(WebhookJob(
                        webhook_id=f"{job.webhook_id}_{event.id}", run_id=job.run_id,
                        tenant=job.tenant, url=job.url, kind=payload["type"], payload=payload,
                        next_at=time.time()))
            job = job.model_copy(update={"after": batch[-1].id})
            self.store.put_webhook(job)
        return job

    def _attempt(self, job: WebhookJob, body: bytes) -> None:
        quota = self.limits(job.tenant).webhook_attempts_per_minute
        count, reset = self.store.hit(job.tenant, "webhook-attempt", 60.0)
        if count > quota:  # the tenant's attempts this minute are spent: not an attempt
            log.info("webhook %s of tenant %s waits %.0f s: %d attempts a minute spent",
                     job.webhook_id, job.tenant, reset, quota)
            self.store.put_webhook(job.model_copy(update={"next_at": time.time() + reset}))
            return
        now = time.time()
        status, excerpt, took = self._send(job, body)
        job = job.model_copy(update={"attempts": job.attempts + 1, "last_status": status,
                                     "first_attempt_at": job.first_attempt_at or now})
        if status is not None and 200 <= status < 300:
            job.state, job.next_at = "delivered", None
        elif status == 410:
            job.state, job.next_at = "stopped", None
        elif time.time() - (job.first_attempt_at or now) >= GIVE_UP:
            job.state, job.next_at = "failed", None
        else:
            job.next_at = time.time() + retry_delay(job.attempts, self.backoff, self._rng)
        self.store.put_webhook(job)
        self._record(job, status, excerpt, took)

    def _watch(self, job: WebhookJob) -> None:
        """Follow the run (the back end is told of each event) until it ends, making its job
        due at once for each event it reports and at the end."""
        try:
            for event in self.backend.follow(job.run_id, job.after):
                if event.type in TERMINAL_EVENTS or event_payload(event, job.events, {}):
                    self._due_now(job.webhook_id)
        except GenloopError:  # gone: the poll takes it from here
            pass
        finally:
            with self._lock:
                self._watched.discard(job.run_id)
            self._due_now(job.webhook_id)

    def _due_now(self, webhook_id: str) -> None:
        """Have the next step take the job (in memory: a watcher never writes the job, which
        a sender may be writing; after a restart the poll finds it)."""
        with self._lock:
            self._ready.add(webhook_id)
        self._wake.set()

    def _send(self, job: WebhookJob, body: bytes) -> tuple[int | None, str, float]:
        """``(status or None, answer excerpt or error, seconds)`` of one attempt."""
        start = time.monotonic()
        secret = self.store.webhook_secret(job.tenant)
        if secret is None:
            return None, "the tenant has no webhook secret", 0.0
        try:
            target = self.policy.check(job.url)  # again: the name may resolve elsewhere now
        except WebhookRefused as exc:
            return None, str(exc)[:EXCERPT], 0.0
        default_port = 443 if target.scheme == "https" else 80
        host = target.host if target.port == default_port else f"{target.host}:{target.port}"
        headers = {"Host": host, "Content-Type": "application/json",
                   "User-Agent": "genloop-webhooks/1",
                   **signed_headers(secret, job.webhook_id, body)}
        extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
        try:
            with httpx.Client(follow_redirects=False, timeout=self.timeout,
                              trust_env=False) as http, \
                    http.stream("POST", target.url, content=body, headers=headers,
                                extensions=extensions) as response:
                first = next(response.iter_bytes(), b"")  # never more than a chunk is read
                return (response.status_code, first[:EXCERPT].decode(errors="replace"),
                        time.monotonic() - start)
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}"[:EXCERPT], time.monotonic() - start

    def _record(self, job: WebhookJob, status: int | None, excerpt: str, took: float) -> None:
        if not isinstance(self.backend, StoreBackend) or not job.run_id:
            return  # a notice has no run to show it; a back end elsewhere keeps its own events
        store = self.backend.store
        message = json.dumps({"url": job.url[:EXCERPT], "webhook_id": job.webhook_id,
                              "state": job.state, "ms": round(took * 1000), "answer": excerpt})
        store.append_event(job.run_id, EventRecord(
            type="webhook.attempt", time=time.time(), attempt=job.attempts,
            status=str(status) if status is not None else "error", message=message))


def _owner(job: WebhookJob) -> str:
    """What one sender at a time has: a run's deliveries, or a notice alone."""
    return job.run_id or job.webhook_id
