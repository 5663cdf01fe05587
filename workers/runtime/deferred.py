"""Deferred outputs: how an op waits on a batched resource without holding a worker thread.

The model. A Dramatiq worker thread is for *deciding* (claim, start, hand work over, complete),
never for *waiting*. An op whose work runs on a shared, batched resource (the generation engine,
an evaluator batcher) submits its request there and returns a :class:`Deferred` at once. The
executor then keeps the instance's lease alive, acks the message and frees the thread; when the
request's future resolves, a small completion pool (not the resource's own thread, which goes
straight back to the device) runs ``then`` (PNG encoding, artifact writes) and completes the
instance through the same scheduler transaction as a synchronous op. So:

* hundreds of instances in flight in one process, with a handful of worker threads, all feed
  the same batch: the batch size is bounded by the engine's cap, not by the thread count;
* a GPU worker's engine always has the next batch queued while the current one runs;
* claims, leases, one execution per key, progress events and cancellation are unchanged: the
  lease is held (and renewed) until the completion is stored, progress comes from the engine's
  step callbacks, and cancellation is checked by the engine when the request's batch forms and
  between steps;
* retries: the message is already acked, so the executor applies the node's retry policy itself
  (Dramatiq's ``retries`` count is carried in the re-sent message, so Retries and
  :class:`~genloop.workers.middleware.attempts.AttemptOutcomes` agree on attempt numbers);
* a process that dies with deferred work: its leases run out, and the sweeper of a live
  process (:mod:`~genloop.workers.middleware.sweeper`) re-sends the running instance whose lease
  has ended, within a lease ttl plus a sweep tick; it then runs like a redelivered message.
  Deferred work sends nothing to the broker while it waits. (A delayed "watch" message would
  not help: Dramatiq prefetches delayed messages into the memory of a live consumer, most often
  the very process that dies.)

Dramatiq's own ``AsyncIO`` middleware was the other candidate; its worker thread still blocks on
each coroutine's result, so it would not lift the thread bound on batch size.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Deferred:
    """Returned by an op body: its output is ``then(future.result())``, computed later.

    ``then`` runs in the executor's completion pool and may raise like an op body does
    (:class:`~genloop.sdk.errors.Permanent`, :class:`~genloop.sdk.errors.Transient`,
    :class:`~genloop.sdk.errors.Cancelled`); so may the future.
    """

    future: Future
    then: Callable[[Any], Any] = _same
