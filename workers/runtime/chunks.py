"""Several instances of one run in one message, so that a large release pays for fewer messages.

Each message costs an enqueue, a fetch and an ack in the broker, and a pass through every
middleware in the worker: for a no-op node on Redis that was as much as genloop's own two store
steps, and a released 10,000-item map sent 10,000 messages. So instances of one run and queue
that are released together travel in chunks of up to :data:`MAX_CHUNK`, while a release still
goes out as at least :data:`MIN_MESSAGES` messages (or one per instance, if it has fewer): a
small release keeps one message per instance, so slow ops still spread over every thread, and
only releases large enough to keep the threads busy anyway are chunked.

A chunk's instances run one after another on one worker thread, each with its own record,
result key, lease and retries: a failed one is recorded and re-sent alone with its backoff, as
deferred work is (:meth:`~.executor.Executor.run_chunk`), and never makes the others run again.
A chunk holds one slot of a fair queue, so a tenant's turn there is a chunk.

A small release that the caller marks ``together`` goes as one message whatever its size: a
pool sends an interactive run's generate instances so when they hold at most
:data:`TOGETHER_IMAGES` images (a loop's round). Generate work is deferred to the engine, so a
chunk's instances land in one worker's engine at once and run as one batch. Sent a message
each, a round's eight images reached a holder busy with a campaign two or three at a time (it
takes a model's work only while less than a batch waits in its engine, :mod:`..pool.routing`),
and each group waited for the batch-lane batch then running.

A message's arguments are ``(run id, instance id)`` for one instance and
``(run id, [instance id, ...])`` for a chunk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..stores.records import InstanceRecord

#: The most instances one message carries.
MAX_CHUNK = 16
#: A release of at least this many instances goes out as at least this many messages.
MIN_MESSAGES = 16
#: The most images a ``together`` release keeps in one message: a loop's round (8 by default)
#: and up to twice that; a wider one spreads over workers as any release does.
TOGETHER_IMAGES = 16

Chunk = Sequence[InstanceRecord]
#: Whether a release whose first instance this is may go as one message (see above).
Together = Callable[[InstanceRecord], bool]


def chunk_size(n: int) -> int:
    """Instances per message for a release of ``n`` instances of one run and queue."""
    return min(MAX_CHUNK, max(1, n // MIN_MESSAGES))


def chunked(instances: Sequence[InstanceRecord],
            together: Together | None = None) -> list[list[InstanceRecord]]:
    """``instances`` as chunks of one run and queue each, in their order within each group; a
    group whose first instance ``together`` picks goes as one chunk if it is small enough
    (see the module's docstring)."""
    groups: dict[tuple[str, str], list[InstanceRecord]] = {}
    for inst in instances:
        groups.setdefault((inst.run_id, inst.queue), []).append(inst)
    out: list[list[InstanceRecord]] = []
    for group in groups.values():
        size = chunk_size(len(group))
        if together is not None and _small(group) and together(group[0]):
            size = len(group)
        out.extend(group[i:i + size] for i in range(0, len(group), size))
    return out


def _small(group: Chunk) -> bool:
    return (len(group) <= MAX_CHUNK
            and sum(inst.expected_items for inst in group) <= TOGETHER_IMAGES)


def chunk_name(run_id: str, instance_ids: Sequence[str]) -> str:
    """A message's name among those waiting or in flight (a fair queue's slot): its run and
    instances, one or a chunk's."""
    return f"{run_id}|{','.join(instance_ids)}"


def message_args(chunk: Chunk) -> tuple[str, str | list[str]]:
    """The message arguments that name ``chunk``'s instances."""
    ids = [inst.instance_id for inst in chunk]
    return chunk[0].run_id, ids[0] if len(ids) == 1 else ids


def instances_of(args: Sequence[object]) -> tuple[str, list[str]]:
    """A message's run id and instance ids, from its arguments (:func:`message_args`)."""
    run_id, ids = args
    if isinstance(ids, str):
        return str(run_id), [ids]
    if not isinstance(ids, list | tuple):
        raise TypeError(f"a message's instance ids are a string or a list, not {ids!r}")
    return str(run_id), [str(i) for i in ids]
