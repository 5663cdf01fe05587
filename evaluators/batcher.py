"""Cross-request scoring: score requests of many nodes and runs merged per evaluator.

The generation engine's rules, for judges: score ops :meth:`ScoreBatcher.submit` their images
and prompt and return (the future resolves later; no worker thread waits). One thread per
batcher takes the oldest request of the interactive lane (batch work yields to it, keeping
its share: ``batch_queue.BATCH_TURN``), waits up to ``window`` seconds for more requests to the same
evaluator (until ``max_images`` are waiting; not at all for a request that came after a quiet
spell of ``window``, as one loop's rounds do), and scores them with one
:meth:`~genloop.evaluators.base.Evaluator.score_many` call: a CLIP-family judge encodes all the
images in one pass and each distinct prompt once, through its shared prompt cache, whichever
run asked. A call that runs out of device memory is split in halves and retried, and the
evaluator's cap drops to the largest size that then fitted. ``check()`` of a request runs just
before its batch and may raise (its run was cancelled): that request fails alone, as does a
request whose own images are bad (it is scored alone after its batch fails).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from PIL import Image

from genloop.sdk.errors import Transient
from genloop.workers.runtime.batch_queue import BatchQueue

from .base import Evaluator

log = logging.getLogger(__name__)


@dataclass(eq=False)
class ScoreRequest:
    """One score op's images and prompt; ``future`` resolves to their :class:`Scores`."""

    evaluator: Evaluator
    images: Sequence[Image.Image]
    text: str
    check: Callable[[], None] | None = None
    #: The run's lane: ``batch`` requests yield to ``interactive`` ones (``BATCH_TURN``).
    priority: str = "interactive"
    enqueued: float = 0.0  #: when it came, by its batcher's clock
    #: No request to the same evaluator came in the ``window`` before this one: it is scored
    #: at once (see :meth:`ScoreBatcher._wait_left`).
    after_quiet: bool = False
    future: Future = field(default_factory=Future)


class ScoreBatcher(BatchQueue[ScoreRequest]):
    """Queue of score requests and the thread that scores them in merged calls."""

    what = "score batcher"

    def __init__(self, *, window: float = 0.02, max_images: int = 64,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: what arrivals and waits are timed by (a test moves one by hand to make a
        quiet spell without sleeping through it)."""
        if max_images < 1 or window < 0:
            raise ValueError("max_images must be >= 1 and window >= 0")
        super().__init__()
        self.window, self.max_images, self._clock = window, max_images, clock
        self._caps: dict[int, int] = {}  # id(evaluator) -> images per call after an OOM
        self._arrivals: dict[int, float] = {}  # id(evaluator) -> its latest request's arrival
        #: The batch log: per call, (evaluator identity, images, requests), and its seconds.
        self.batches: list[tuple[str, int, int]] = []
        self.seconds: list[float] = []

    def submit(self, evaluator: Evaluator, images: Sequence[Image.Image], text: str,
               check: Callable[[], None] | None = None,
               priority: str = "interactive") -> Future:
        request = ScoreRequest(evaluator, list(images), text, check, priority, self._clock())
        with self._cond:
            last = self._arrivals.get(id(evaluator))
            self._arrivals[id(evaluator)] = request.enqueued
            request.after_quiet = last is not None and request.enqueued - last > self.window
            self._enqueue([request])
        return request.future

    def _limit(self, evaluator: Evaluator) -> int:
        return self._caps.get(id(evaluator), self.max_images)

    def _wait_left(self, head: ScoreRequest) -> float:
        """A request after a quiet spell (one loop's round: its score is on the loop's critical
        path) is scored at once; waiting would bet on company that has not been coming. While
        requests keep coming, each waits up to ``window`` for more."""
        if head.after_quiet:
            return 0.0
        judge = head.evaluator
        waiting = sum(len(r.images) for r in self._pending
                      if r.evaluator is judge and r.priority == head.priority)
        if waiting >= self._limit(judge):
            return 0.0
        return head.enqueued + self.window - self._clock()

    def _is_batch(self, item: ScoreRequest) -> bool:
        return item.priority == "batch"

    def _choose(self, head: ScoreRequest) -> list[ScoreRequest]:
        """Requests of the head's judge and lane (a call's time grows with its images)."""
        judge, limit = head.evaluator, self._limit(head.evaluator)
        batch: list[ScoreRequest] = []
        size = 0
        for r in self._pending:
            if r.evaluator is judge and r.priority == head.priority and (
                    not batch or size + len(r.images) <= limit):
                batch.append(r)
                size += len(r.images)
        return batch

    def _fail(self, item: ScoreRequest, exc: BaseException) -> None:
        _fail(item, exc)

    def _run(self, batch: list[ScoreRequest]) -> None:
        live = []
        for request in batch:
            try:
                if request.check is not None:
                    request.check()
            except Exception as exc:  # noqa: BLE001  (cancelled: this request only)
                _fail(request, exc)
            else:
                live.append(request)
        if live:
            self._score(live)

    def _score(self, batch: list[ScoreRequest]) -> None:
        judge = batch[0].evaluator
        self.batches.append((judge.identity, sum(len(r.images) for r in batch), len(batch)))
        began = time.perf_counter()
        try:
            scores = judge.score_many([(r.images, r.text) for r in batch])
        except Transient as exc:
            if len(batch) == 1 or "memory" not in str(exc):
                for request in batch:
                    _fail(request, exc)
                return
            half = len(batch) // 2
            self._caps[id(judge)] = max(1, sum(len(r.images) for r in batch[:half]))
            log.warning("%s ran out of memory on %d requests; splitting", judge.identity,
                        len(batch))
            self._score(batch[:half])
            self._score(batch[half:])
            return
        except Exception as exc:  # noqa: BLE001  (one bad request must not fail the others)
            if len(batch) == 1:
                _fail(batch[0], exc)
                return
            for request in batch:
                self._score([request])
            return
        self.seconds.append(time.perf_counter() - began)
        for request, result in zip(batch, scores, strict=True):
            if not request.future.done():
                request.future.set_result(result)


def _fail(request: ScoreRequest, exc: BaseException) -> None:
    if not request.future.done():
        request.future.set_exception(exc)

