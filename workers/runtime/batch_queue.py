"""The lifecycle every batched resource shares: a pending queue served by one thread.

The generation engine's :class:`~genloop.workers.engine.batching.Batcher` and the evaluators'
:class:`~genloop.evaluators.batcher.ScoreBatcher` differ in what they merge and how long a batch
may wait for more; they agree on the rest, which lives here once:

* requests are queued under one condition variable, and the serving thread starts on the first
  (a process that never generates starts no thread);
* the thread takes the oldest request of the interactive lane (:meth:`BatchQueue._is_batch`
  tells the lanes apart; see :data:`BATCH_TURN` for batch work's share), waits while
  :meth:`BatchQueue._wait_left` says so (a ``submit`` or ``close`` wakes it early, and an
  interactive request that came meanwhile heads the batch instead), takes
  :meth:`BatchQueue._choose`'s batch out of the queue and runs it with :meth:`BatchQueue._run`,
  outside the lock;
* :meth:`BatchQueue.close` stops taking batches, joins the thread (the running batch is left to
  stop on its own) and fails whatever is still queued with a :class:`Transient` error, so a
  retry elsewhere picks it up. It also runs at interpreter exit: a daemon thread killed inside a
  torch op there aborts the process ("terminate called without an active exception");
* :meth:`BatchQueue.hand_back` (a draining worker, :func:`hand_back_all` for every queue of the
  process) withdraws the queued requests none of whose items has started and fails them with
  :class:`HandedBack`, so their instances go to another worker at once; what has started runs
  on.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections.abc import Iterable
from typing import Generic, TypeVar

from genloop.sdk.errors import Transient

T = TypeVar("T")

#: The queues of this process that have served something (:func:`hand_back_all`).
_live: weakref.WeakSet[BatchQueue] = weakref.WeakSet()


class HandedBack(Transient):
    """A queued request this process gave back before it started (it is draining): its
    instance is re-sent for another worker, no attempt spent (see ``Executor.drain``). A
    :class:`Transient` to anything that does not know it."""

#: Batch work's share while both lanes wait: every ``BATCH_TURN``-th batch is headed by the
#: oldest batch request, so an agent's interactive requests overtake a campaign's queued ones
#: without starving them (batch keeps at least 1 batch in ``BATCH_TURN``).
BATCH_TURN = 4


class BatchQueue(Generic[T]):
    """Pending items of type ``T`` and the thread that serves them; subclasses say how."""

    #: Names the resource in errors and in the thread's name.
    what = "batch queue"

    def __init__(self) -> None:
        #: torch intra-op threads the serving thread runs with (``None``: the process's
        #: default); see :mod:`..models.threads`.
        self.torch_threads: int | None = None
        self._pending: list[T] = []
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._interactive_turns = 0  # batches headed by interactive work while batch waited
        #: Requests (:meth:`_request`) with an item taken into a batch: not handed back.
        self._started: weakref.WeakSet = weakref.WeakSet()

    @property
    def closed(self) -> bool:
        """Set by :meth:`close`; a running batch should stop at its next chance."""
        return self._closed

    def _enqueue(self, items: Iterable[T]) -> None:
        """Queue ``items`` (call with ``self._cond`` held) and wake the serving thread."""
        if self._closed:
            raise RuntimeError(f"the {self.what} is closed")
        self._pending.extend(items)
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, daemon=True,
                                            name=f"genloop-{self.what.replace(' ', '-')}")
            self._thread.start()
            atexit.register(_close_at_exit, weakref.ref(self))
            _live.add(self)
        self._cond.notify_all()

    def hand_back(self) -> int:
        """Withdraw the queued requests none of whose items has started and fail them with
        :class:`HandedBack`; how many requests. A request with an item in a batch already
        (a job spread over batches) runs to its end."""
        with self._cond:
            back = [i for i in self._pending if self._request(i) not in self._started]
            gone = {id(item) for item in back}
            self._pending = [i for i in self._pending if id(i) not in gone]
        error = HandedBack(f"handed back by a draining worker's {self.what}")
        for item in back:
            self._fail(item, error)
        return len({id(self._request(item)) for item in back})

    def close(self, timeout: float = 30.0) -> None:
        """Stop taking batches, join the thread, fail what is still queued."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        with self._cond:
            pending, self._pending = self._pending, []
        for item in pending:
            self._fail(item, Transient(f"the worker's {self.what} was closed"))

    # -- what a subclass decides ---------------------------------------------------------------
    def _wait_left(self, head: T) -> float:
        """Seconds the batch headed by ``head`` should still wait for more (<= 0: run now).
        Called with the lock held, again after every wake-up."""
        return 0.0

    def _is_batch(self, item: T) -> bool:
        """Whether ``item`` is in the batch lane (campaigns); everything else is interactive."""
        return False

    def _request(self, item: T) -> object:
        """The request ``item`` is part of (one submit; the item itself by default)."""
        return item

    def _choose(self, head: T) -> list[T]:
        """The batch headed by ``head``, from ``self._pending`` (lock held); may be empty."""
        return [head]

    def _run(self, batch: list[T]) -> None:
        """Run one batch (lock not held); failures must be reported per item, not raised."""
        raise NotImplementedError

    def _fail(self, item: T, exc: BaseException) -> None:
        raise NotImplementedError

    # -- the serving thread --------------------------------------------------------------------
    def _head(self) -> T:
        """The request the next batch is built around (lock held, something pending)."""
        interactive = next((i for i in self._pending if not self._is_batch(i)), None)
        batch = next((i for i in self._pending if self._is_batch(i)), None)
        if batch is not None and (interactive is None
                                  or self._interactive_turns >= BATCH_TURN - 1):
            return batch
        assert interactive is not None  # something is pending
        return interactive

    def _take(self) -> list[T] | None:
        with self._cond:
            while True:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return None
                head = self._head()
                if (left := self._wait_left(head)) <= 0:
                    break
                self._cond.wait(left)
            batch = self._choose(head)
            taken = {id(item) for item in batch}
            self._pending = [item for item in self._pending if id(item) not in taken]
            self._started.update(self._request(item) for item in batch)
            if self._is_batch(head):
                self._interactive_turns = 0
            elif any(self._is_batch(item) for item in self._pending):
                self._interactive_turns += 1
        return batch

    def _serve(self) -> None:
        if self.torch_threads is not None:
            import torch

            torch.set_num_threads(self.torch_threads)  # this thread's own (OpenMP)
        while (batch := self._take()) is not None:
            if batch:
                self._run(batch)


def hand_back_all() -> int:
    """:meth:`BatchQueue.hand_back` on every queue of this process (the engine's, the
    scorer's, a custom op's); how many requests were handed back."""
    return sum(queue.hand_back() for queue in list(_live))


def _close_at_exit(ref: weakref.ref) -> None:
    queue = ref()
    if queue is not None:
        queue.close()
