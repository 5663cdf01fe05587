"""An idle consumer of the pool's broker is woken by a message, not by the end of a sleep."""

from __future__ import annotations

import threading
import time
import uuid

import dramatiq
import pytest
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import dq_name
from redis_util import redis_url

from genloop.workers.pool.waking_broker import IDLE_WAIT, WakingRedisBroker


@pytest.fixture(params=[WakingRedisBroker, RedisBroker], ids=["waking", "dramatiq"])
def broker(request):
    namespace = f"test-{uuid.uuid4().hex[:8]}"
    broker = request.param(url=redis_url(), namespace=namespace)
    broker.declare_queue("cpu")
    yield broker
    for key in broker.client.scan_iter(f"{namespace}*"):
        broker.client.delete(key)
    broker.close()


def _send_later(broker, seconds: float) -> list[float]:
    sent: list[float] = []

    def send() -> None:
        time.sleep(seconds)
        sent.append(time.monotonic())
        broker.enqueue(dramatiq.Message(queue_name="cpu", actor_name="a", args=(), kwargs={},
                                        options={}))

    threading.Thread(target=send, daemon=True).start()
    return sent


def test_an_idle_consumer_takes_a_message_the_moment_it_is_sent(broker):
    # Given an idle consumer (its queue empty for a while: Dramatiq's sleeps have grown)
    consumer = broker.consume("cpu", prefetch=1, timeout=1000)
    sent = _send_later(broker, 0.6)
    # When a message is sent, and the consumer is asked for messages until it has it
    idle_returns, message = 0, None
    while message is None:
        message = next(consumer)
        idle_returns += message is None
    taken = time.monotonic()
    # Then (waking) it blocked on the queue: no idle return, no sleep, taken at once
    if isinstance(broker, WakingRedisBroker):
        assert idle_returns == 0 and broker.empty_fetches == 0
        # A wake, not a sleep's end (IDLE_WAIT is 1 s); 35-55 ms seen on a loaded 2-core box
        assert taken - sent[0] < 0.3
    else:  # Dramatiq's own consumer polls: empty fetches, each followed by a growing sleep
        assert idle_returns >= 5


def test_a_waking_consumer_still_returns_while_nothing_comes():
    # Its thread handles acks and shutdown between calls, so an idle wait must end
    namespace = f"test-{uuid.uuid4().hex[:8]}"
    broker = WakingRedisBroker(url=redis_url(), namespace=namespace)
    broker.declare_queue("cpu")
    try:
        consumer = broker.consume("cpu", prefetch=1, timeout=1000)
        started = time.monotonic()
        assert next(consumer) is None
        # (the upper bound is loose: on a loaded 2-core machine the return itself can lag)
        assert IDLE_WAIT <= time.monotonic() - started < IDLE_WAIT + 5
        assert broker.empty_fetches == 1
    finally:
        broker.close()


def test_an_idle_delay_queue_consumer_waits_instead_of_spinning():
    namespace = f"test-{uuid.uuid4().hex[:8]}"
    broker = WakingRedisBroker(url=redis_url(), namespace=namespace)
    broker.declare_queue("cpu")
    try:
        consumer = broker.consume(dq_name("cpu"), prefetch=1, timeout=1000)
        returns, started = 0, time.monotonic()
        while time.monotonic() - started < 1.5:
            assert next(consumer) is None
            returns += 1
        assert returns <= 3  # a return an IDLE_WAIT, not one every 5 ms
    finally:
        broker.close()
