"""Records the outcome of each failed attempt once Dramatiq's Retries middleware has decided.

Its ``after_process_message`` must run after Retries' one, which marks the message failed when
the error is one of the actor's ``throws`` (Permanent, Cancelled) or the retries are used up,
and otherwise re-enqueues it. Dramatiq calls after-hooks in reverse order, so this middleware is
added *before* Retries in the list.

A :class:`~genloop.sdk.errors.Transient` failure is expected: Dramatiq's worker would log each
one at ERROR with its traceback before Retries re-sends it. :func:`retry_transients` raises it
as Dramatiq's ``Retry`` instead (which the worker does not log), and this middleware logs the
attempt as one WARNING line; the scheduler still records the op's own error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import dramatiq
from dramatiq.middleware import Middleware

from genloop.sdk.errors import Cancelled, Transient

from ..runtime.chunks import instances_of
from ..runtime.scheduler import Scheduler

log = logging.getLogger(__name__)


def attempt_of(message: dramatiq.Message) -> int:
    """1 for the first delivery; Retries counts the re-deliveries in ``options['retries']``."""
    return int(message.options.get("retries", 0)) + 1


def retry_transients(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` for an actor, raising its ``Transient`` errors as ``dramatiq.Retry`` (with the
    op's error as the cause) so that the retry is not logged as an unhandled error."""

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Transient as exc:
            raise dramatiq.Retry(str(exc)) from exc

    return run


def _op_error(exception: BaseException) -> BaseException:
    if isinstance(exception, dramatiq.Retry) and isinstance(exception.__cause__, Transient):
        return exception.__cause__
    return exception


class AttemptOutcomes(Middleware):
    """Turns a failed attempt into a retry event, or into the instance's final failure."""

    def __init__(self, scheduler: Scheduler, actor_prefix: str) -> None:
        self.scheduler = scheduler
        self.actor_prefix = actor_prefix

    def before_process_message(self, broker, message):
        # Retries bumps options["retries"] before this middleware sees a failure (but not for
        # errors the actor throws), so the attempt number is taken before the body runs.
        message.options["genloop_attempt"] = attempt_of(message)

    def after_process_message(self, broker, message, *, result=None, exception=None):
        if exception is None or not message.actor_name.startswith(self.actor_prefix):
            return
        run_id, instance_ids = instances_of(message.args)
        if len(instance_ids) > 1:
            # A chunk records each instance's failure itself (Executor.run_chunk); one that
            # escapes it is the worker's (a time limit, a shutdown): Retries re-sends the chunk,
            # whose ended instances are then skipped, or the sweeper re-sends what is left.
            log.warning("%s: a chunk of %d instances stopped: %s", run_id, len(instance_ids),
                        exception)
            return
        attempt = int(message.options.get("genloop_attempt", 1))
        record_outcome(self.scheduler, run_id, instance_ids[0], attempt, _op_error(exception),
                       final=message.failed)


def record_outcome(scheduler: Scheduler, run_id: str, instance_id: str, attempt: int,
                   exc: BaseException, *, final: bool) -> None:
    """A failed attempt's state change and its one log line: cancelled, failed for good
    (``final``), or retrying (one WARNING with the attempt number, no traceback). Shared by
    messages Dramatiq retries and deferred work the executor retries itself."""
    if isinstance(exc, Cancelled):
        scheduler.cancelled(run_id, instance_id)
    elif final:
        log.info("%s/%s failed for good after %d attempt(s): %s",
                 run_id, instance_id, attempt, exc)
        scheduler.failed(run_id, instance_id, exc, attempts=attempt)
    else:
        log.warning("%s/%s attempt %d failed, retrying: %s: %s", run_id, instance_id,
                    attempt, type(exc).__name__, exc)
        scheduler.retrying(run_id, instance_id, attempt, exc)
