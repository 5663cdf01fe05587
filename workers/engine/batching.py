"""Cross-request batching: candidates of concurrent requests merged into shared pipeline calls.

Ops :meth:`Batcher.submit` a :class:`Job` (one generate shard: prompts, seeds, the settings)
and return; its future resolves later (no thread waits on it, see
``genloop.workers.runtime.deferred``). One executor thread per batcher takes the oldest waiting
candidate, waits up to ``window`` seconds for more candidates with the same :data:`BatchKey`
(model, size, steps, guidance, cache mode, edit kind and strength; prompts, negative prompts, seeds
and init images may differ), and hands up to ``limit(key)`` of them to ``run_batch``. Candidates
that arrive while a batch runs are merged into the next one, so under load the window costs nothing.

A job is in a lane, its run's ``priority``: the thread builds each batch around the oldest
``interactive`` candidate, and around the oldest ``batch`` one only when no interactive one
waits or batch work's turn has come (``batch_queue.BATCH_TURN``), so an agent's loop is not
queued behind a campaign's backlog. A batch holds one lane's candidates. A running batch is
never preempted, so an interactive round that arrives waits for it: while interactive work
came within :data:`INTERACTIVE_RECENT` s, batch-lane batches take a ``BATCH_SPLIT``-th of the
cap, which cuts that wait as much (an agent's loop arrives round by round, with its scoring in
between, when the engine has gone back to batch work).

A job may name its ``group`` (a node of a run) and the group's size (the node's instances):
while a group that has candidates waiting is incomplete, the batch waits for its other members
(up to ``group_wait`` from the group's first arrival, past ``window`` if need be), so a loop
round mapped into one instance per image still reaches the model as one call; but only while
nothing else waits, since the device would idle under other work meanwhile. A full batch
(``limit(key)`` candidates) never waits, and neither does one whose groups have all arrived:
one loop's round used to wait out the window on an idle engine, 50 ms a round. Just before a
batch runs, each job's ``check()`` runs and may raise (its run was cancelled): that job fails
alone.

A job's candidates may be spread over several batches (more than the cap, or an OOM split);
its future resolves when the last one is in. Progress is per job: ``on_step(done, total)`` with
``total = candidates x steps``, never decreasing. An ``on_step`` that raises (cancellation)
fails that job at once; its candidates still in a running batch are finished and dropped, and a
batch whose jobs have all failed is abandoned between steps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from ..runtime.batch_queue import BatchQueue

log = logging.getLogger(__name__)

BatchKey = tuple  # (model, width, height, steps, guidance, cache, kind, strength)

#: Seconds after an interactive candidate arrived during which batch-lane batches are smaller.
INTERACTIVE_RECENT = 10.0
#: Batch-lane batches take ``1 / BATCH_SPLIT`` of the cap while interactive work is recent.
BATCH_SPLIT = 4


@dataclass(eq=False)
class Job:
    """One request: ``len(prompts)`` candidates that share ``key``."""

    key: BatchKey
    prompts: Sequence[str]
    seeds: Sequence[int]
    negative_prompts: Sequence[str | None]
    steps: int
    on_step: Callable[[int, int], None] | None = None
    #: An edit's PIL init images (and masks, to inpaint), one per candidate.
    init_images: Sequence[Any] | None = None
    masks: Sequence[Any] | None = None
    group: Hashable = None
    group_size: int = 1
    check: Callable[[], None] | None = None
    #: False for a warm-up (``ModelRegistry.preload``): no request's work, left out of metrics.
    metered: bool = True
    #: The run's lane: ``batch`` work yields to ``interactive`` (see ``batch_queue.BATCH_TURN``).
    priority: str = "interactive"
    #: Whether candidates may start from a similar prompt's stored latents (``.latent_cache``),
    #: and the namespace whose images alone they may start from.
    reuse: bool = False
    namespace: str | None = None
    future: Future = field(default_factory=Future)
    images: list[Any] = field(init=False)
    #: Per candidate, the ``latent_cache.Start`` it began from (``None``: from noise).
    starts: list[Any] = field(init=False)
    _progress: list[int] = field(init=False)
    _reported: int = field(default=0, init=False)
    _left: int = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.prompts)
        if not n or len(self.seeds) != n or len(self.negative_prompts) != n:
            raise ValueError("a job needs as many seeds and negative prompts as prompts (>= 1)")
        self.images = [None] * n
        self.starts = [None] * n
        self._progress = [0] * n
        self._left = n

    @property
    def failed(self) -> bool:
        return self.future.done() and self.future.exception() is not None

    def step(self, indices: Sequence[int], done: int) -> None:
        """Candidates ``indices`` have ``done`` steps behind them; tell ``on_step``."""
        for i in indices:
            self._progress[i] = done
        reached = sum(self._progress)
        if reached <= self._reported or self.failed:
            return
        self._reported = reached
        if self.on_step is not None:
            try:
                self.on_step(reached, len(self.prompts) * self.steps)
            except Exception as exc:  # noqa: BLE001  (cancellation or a broken callback: this job only)
                self.fail(exc)

    def deliver(self, index: int, image: Any) -> None:
        if self.future.done():
            return
        self.images[index] = image
        self._left -= 1
        if self._left == 0:
            self.future.set_result(self.images)

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


@dataclass(frozen=True)
class Slot:
    """Candidate ``index`` of ``job``; what a batch is made of."""

    job: Job
    index: int
    enqueued: float

    @property
    def prompt(self) -> str:
        return self.job.prompts[self.index]

    @property
    def seed(self) -> int:
        return self.job.seeds[self.index]

    @property
    def negative_prompt(self) -> str | None:
        return self.job.negative_prompts[self.index]

    @property
    def init_image(self) -> Any:
        return None if self.job.init_images is None else self.job.init_images[self.index]

    @property
    def mask(self) -> Any:
        return None if self.job.masks is None else self.job.masks[self.index]


class Batcher(BatchQueue[Slot]):
    """Queue of candidates and the executor thread that runs them in batches."""

    what = "generation engine"

    def __init__(self, run_batch: Callable[[BatchKey, list[Slot]], None], *,
                 window: float = 0.05, max_batch: int | Callable[[BatchKey], int] = 8,
                 group_wait: float = 1.0) -> None:
        """``max_batch``: the most candidates one batch takes, or a function of the batch key
        giving it (the engine's caps by image size and learned from OOMs)."""
        if window < 0 or group_wait < 0 or (isinstance(max_batch, int) and max_batch < 1):
            raise ValueError("max_batch must be >= 1, window and group_wait >= 0")
        super().__init__()
        self.run_batch, self.window, self.max_batch = run_batch, window, max_batch
        self.group_wait = group_wait
        # Incomplete groups: group -> [jobs arrived, first arrival]. Dropped once complete.
        self._groups: dict[Hashable, list] = {}
        #: The batch log, for tests and benchmarks: the size of each batch run, how many of
        #: its candidates came from each job group, and how long it ran (seconds).
        self.batches: list[int] = []
        self.groups: list[dict[Hashable, int]] = []
        self.seconds: list[float] = []
        #: The batch running now: ``(model, images)``, or ``None``.
        self.running: tuple[str, int] | None = None
        #: The most candidates the last batch's kind takes (``None`` before the first): a
        #: pool worker keeps about that many waiting behind the running batch.
        self.last_limit: int | None = None
        self._interactive_at = float("-inf")  # the last interactive candidate's arrival

    def submit(self, job: Job) -> Job:
        now = time.monotonic()
        with self._cond:
            if job.priority != "batch":
                self._interactive_at = now
            self._enqueue(Slot(job, i, now) for i in range(len(job.prompts)))
            if job.group is not None and job.group_size > 1:
                self._arrived(job.group, job.group_size, now)
        return job

    def withdraw(self, job: Job) -> None:
        """Drop ``job``'s candidates that have not started (it was cancelled or failed)."""
        with self._cond:
            self._pending = [s for s in self._pending if s.job is not job]

    def queued_images(self) -> dict[str, int]:
        """Candidates waiting for a batch, per model."""
        with self._cond:
            models = [s.job.key[0] for s in self._pending]
        return {m: models.count(m) for m in dict.fromkeys(models)}

    def _arrived(self, group: Hashable, size: int, now: float) -> None:
        seen = self._groups.setdefault(group, [0, now])
        seen[0] += 1
        if seen[0] >= size:
            del self._groups[group]
        # Groups whose other members never came (stored results, failures) are forgotten.
        stale = now - 10 * self.group_wait - 1.0
        for g in [g for g, (_, first) in self._groups.items() if first < stale]:
            del self._groups[g]

    def limit(self, key: BatchKey) -> int:
        return max(1, self.max_batch(key) if callable(self.max_batch) else self.max_batch)

    def _cap(self, key: BatchKey, lane: str) -> int:
        """The most candidates a batch of ``lane`` takes now (see the module's docstring)."""
        if lane == "batch" and time.monotonic() - self._interactive_at < INTERACTIVE_RECENT:
            return max(1, self.limit(key) // BATCH_SPLIT)
        return self.limit(key)

    def _wait_left(self, head: Slot) -> float:
        key, lane = head.job.key, head.job.priority
        same = [s for s in self._pending if s.job.key == key and s.job.priority == lane]
        if not same or len(same) >= self._cap(key, lane):  # withdrawn while we waited, or full
            return 0.0
        groups = {s.job.group for s in same}
        if None not in groups and not groups & self._groups.keys():
            # Every request here is of a group that has all arrived (a loop's round): the
            # engine is idle, so waiting would only bet on another group coming.
            return 0.0
        deadline = same[0].enqueued + self.window
        if len(same) < len(self._pending):
            # Other work waits (the other lane, other settings): waiting for a group's other
            # members would idle the device under it, and in a pool they may never come here
            # (another worker took them, or they wait on the queue behind this engine's
            # backlog), which cost each loop round beside a campaign a second of nothing.
            return deadline - time.monotonic()
        for group in {s.job.group for s in same} & self._groups.keys():
            deadline = max(deadline, self._groups[group][1] + self.group_wait)
        return deadline - time.monotonic()

    def _is_batch(self, item: Slot) -> bool:
        return item.job.priority == "batch"

    def _request(self, item: Slot) -> Job:
        return item.job

    def _choose(self, head: Slot) -> list[Slot]:
        """Candidates of the head's settings and lane: an interactive batch topped up with
        batch work would take as much longer as it grew where a call's cost grows with its
        size (on a CPU a loop's 8 images topped up to 32 took 4x as long)."""
        key, lane = head.job.key, head.job.priority
        return [s for s in self._pending
                if s.job.key == key and s.job.priority == lane][:self._cap(key, lane)]

    def _fail(self, item: Slot, exc: BaseException) -> None:
        item.job.fail(exc)

    def _run(self, batch: list[Slot]) -> None:
        key = batch[0].job.key
        for job in {id(s.job): s.job for s in batch}.values():
            if job.check is not None and not job.failed:
                try:
                    job.check()
                except Exception as exc:  # noqa: BLE001  (cancelled: this job only)
                    job.fail(exc)
        batch = [s for s in batch if not s.job.future.done()]
        if not batch:
            return
        self.batches.append(len(batch))
        groups: dict[Hashable, int] = {}
        for s in batch:
            groups[s.job.group] = groups.get(s.job.group, 0) + 1
        self.groups.append(groups)
        log.debug("batch of %d at %s", len(batch), key)
        began = time.perf_counter()
        self.running, self.last_limit = (key[0], len(batch)), self.limit(key)
        try:
            self.run_batch(key, batch)
        except Exception as exc:  # the thread must outlive a failed batch
            log.exception("batch of %d at %s failed", len(batch), key)
            for slot in batch:
                slot.job.fail(exc)
        finally:
            self.running = None
        self.seconds.append(time.perf_counter() - began)
