"""A RedisBroker whose idle consumers wake when a message arrives, instead of sleeping.

Dramatiq's Redis consumer polls: a fetch that finds its queue empty is followed by a sleep that
doubles with each empty fetch (5 ms, 10 ms ... up to the worker timeout). On an idle pool a
ready node therefore waited a few milliseconds before its first fetch, which is most of a hop in
a chain (a 100-step chain ran at 4x Celery's time, whose workers block on BRPOP).

Here an empty fetch blocks on the queue's list for up to :data:`IDLE_WAIT` s with ``BLMOVE``
from the list onto itself, which returns the moment an id is pushed, and fetches again. Moving
the list's last id to its front leaves a list of one (the idle case) as it was; with more ids
pushed between the fetch and the BLMOVE, the newest overtakes them by one place, as close as a
non-destructive blocking read of a Redis list comes (Dramatiq guarantees no order between
messages anyway). Dramatiq's own sleep is capped at :data:`MAX_SLEEP_MS`, and happens only after
a whole idle wait found nothing. A busy pool never blocks: its fetches find messages, and the
enqueue path is Dramatiq's, unchanged, so a full queue costs no Redis command more per message.

Delay queues wait the same way: with Dramatiq's sleep capped, their consumers otherwise spun
(about 280 empty fetches a second each, two queues' worth per process).

With model-aware routing (:mod:`.routing`) a fetch from a model's queue first asks the
process's :attr:`WakingRedisBroker.gate`; declined, the consumer waits ``DECLINE_WAIT`` and
returns empty.

Dramatiq offers no hook for the wait itself: this overrides the broker's ``consume`` (to cap the
sleep) and ``do_fetch`` (a command its ``__getattr__`` dispatches to its Lua script).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from dramatiq.broker import Consumer
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import dq_name

from ..stores.redis_keys import PoolKeys

#: Longest block on an empty queue, seconds: the consumer thread's acks and shutdown checks
#: wait this long at most while idle (Dramatiq's own idle sleep reaches 1 s too).
IDLE_WAIT = 1.0
#: Cap on Dramatiq's sleep after an empty fetch, milliseconds.
MAX_SLEEP_MS = 5
#: Seconds a consumer waits after the gate declined its queue before it asks again.
DECLINE_WAIT = 0.2


class WakingRedisBroker(RedisBroker):
    """:class:`~dramatiq.brokers.redis.RedisBroker` with consumers that block while idle.

    ``empty_fetches`` counts fetches that came back empty after the idle wait, each one
    followed by Dramatiq's (capped) sleep: a chain on an idle pool makes none per hop.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.empty_fetches = 0
        #: Whether this process may fetch from a queue now (model-aware routing,
        #: :class:`~.routing.AffinityGate`); ``None``: always.
        self.gate: Callable[[str], bool] | None = None

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000) -> Consumer:
        return super().consume(queue_name, prefetch, timeout=min(timeout, MAX_SLEEP_MS))

    def do_fetch(self, queue_name: str, prefetch: int) -> list[bytes]:
        fetch = super().__getattr__("do_fetch")
        # A delay queue's messages are held until their eta, then sent on: never gated.
        gate = self.gate if queue_name != dq_name(queue_name) else None
        if gate is not None and not gate(queue_name):
            time.sleep(DECLINE_WAIT)
            return []
        messages = fetch(queue_name, prefetch)
        if messages:
            return messages
        queue = PoolKeys.dramatiq_queue(self.namespace, queue_name)
        if (self.client.blmove(queue, queue, IDLE_WAIT, "RIGHT", "LEFT") is not None
                and (gate is None or gate(queue_name))):
            messages = fetch(queue_name, prefetch)
        if not messages and queue_name != dq_name(queue_name):
            self.empty_fetches += 1
        return messages
