"""Cross-request scoring: score requests of many nodes and runs merged per evaluator.

The generation engine's rules, for judges: score ops :meth:`ScoreBatcher.submit` their images
and prompt and return (the future resolves later; no worker thread waits). One thread per
batcher takes the oldest request, waits up to ``window`` seconds for more requests to the same
evaluator (until ``max_images`` are waiting), and scores them with one
:meth:`~genloop.evaluators.base.Evaluator.score_many` call: a CLIP-family judge encodes all the
images in one pass and each distinct prompt once, through its shared prompt cache, whichever
run asked. A call that runs out of device memory is split in halves and retried, and the
evaluator's cap drops to the largest size that then fitted. ``check()`` of a request runs just
before its batch and may raise (its run was cancelled): that request fails alone, as does a
request whose own images are bad (it is scored alone after its batch fails).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from PIL import Image

from genloop.sdk.errors import Transient

from .base import Evaluator

log = logging.getLogger(__name__)


@dataclass(eq=False)
class ScoreRequest:
    """One score op's images and prompt; ``future`` resolves to their :class:`Scores`."""

    evaluator: Evaluator
    images: Sequence[Image.Image]
    text: str
    check: Callable[[], None] | None = None
    enqueued: float = field(default_factory=time.monotonic)
    future: Future = field(default_factory=Future)


class ScoreBatcher:
    """Queue of score requests and the thread that scores them in merged calls."""

    def __init__(self, *, window: float = 0.02, max_images: int = 64) -> None:
        if max_images < 1 or window < 0:
            raise ValueError("max_images must be >= 1 and window >= 0")
        self.window, self.max_images = window, max_images
        self._caps: dict[int, int] = {}  # id(evaluator) -> images per call after an OOM
        self._pending: list[ScoreRequest] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        #: The batch log: per call, (evaluator identity, images, requests), and its seconds.
        self.batches: list[tuple[str, int, int]] = []
        self.seconds: list[float] = []

    def submit(self, evaluator: Evaluator, images: Sequence[Image.Image], text: str,
               check: Callable[[], None] | None = None) -> Future:
        request = ScoreRequest(evaluator, list(images), text, check)
        with self._cond:
            if self._closed:
                raise RuntimeError("the score batcher is closed")
            self._pending.append(request)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True,
                                                name="genloop-scorer")
                self._thread.start()
                atexit.register(_close_at_exit, weakref.ref(self))
            self._cond.notify_all()
        return request.future

    def close(self, timeout: float = 30.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        for request in self._pending:
            _fail(request, Transient("the worker's score batcher was closed"))
        self._pending = []

    def _limit(self, evaluator: Evaluator) -> int:
        return self._caps.get(id(evaluator), self.max_images)

    def _next(self) -> list[ScoreRequest] | None:
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            judge = self._pending[0].evaluator
            limit = self._limit(judge)
            deadline = self._pending[0].enqueued + self.window
            while not self._closed:
                waiting = sum(len(r.images) for r in self._pending if r.evaluator is judge)
                left = deadline - time.monotonic()
                if waiting >= limit or left <= 0:
                    break
                self._cond.wait(left)
            batch, size = [], 0
            for r in self._pending:
                if r.evaluator is judge and (not batch or size + len(r.images) <= limit):
                    batch.append(r)
                    size += len(r.images)
            taken = {id(r) for r in batch}
            self._pending = [r for r in self._pending if id(r) not in taken]
        return batch

    def _loop(self) -> None:
        while (batch := self._next()) is not None:
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
                self._run(live)

    def _run(self, batch: list[ScoreRequest]) -> None:
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
            self._run(batch[:half])
            self._run(batch[half:])
            return
        except Exception as exc:  # noqa: BLE001  (one bad request must not fail the others)
            if len(batch) == 1:
                _fail(batch[0], exc)
                return
            for request in batch:
                self._run([request])
            return
        self.seconds.append(time.perf_counter() - began)
        for request, result in zip(batch, scores, strict=True):
            if not request.future.done():
                request.future.set_result(result)


def _fail(request: ScoreRequest, exc: BaseException) -> None:
    if not request.future.done():
        request.future.set_exception(exc)


def _close_at_exit(ref: weakref.ref) -> None:
    batcher = ref()
    if batcher is not None:
        batcher.close()

