"""Queue waits for the metrics: how long each message sat in its queue before a worker took it."""

from __future__ import annotations

import time

from dramatiq.common import q_name
from dramatiq.middleware import Middleware

from ..metrics.prometheus import Metrics


class QueueWait(Middleware):
    """Observes, per queue, the time from a message's enqueue (or the end of its delay, for a
    retry's backoff or a lease poll) to the moment a worker starts on it."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def before_process_message(self, broker, message):
        ready_ms = max(message.message_timestamp, int(message.options.get("eta", 0)))
        self.metrics.queue_waited(q_name(message.queue_name), time.time() - ready_ms / 1000)
