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

A message's arguments are ``(run id, instance id)`` for one instance and
``(run id, [instance id, ...])`` for a chunk.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..stores.records import InstanceRecord

#: The most instances one message carries.
MAX_CHUNK = 16
#: A release of at least this many instances goes out as at least this many messages.
MIN_MESSAGES = 16

Chunk = Sequence[InstanceRecord]


def chunk_size(n: int) -> int:
    """Instances per message for a release of ``n`` instances of one run and queue."""
    return min(MAX_CHUNK, max(1, n // MIN_MESSAGES))


def chunked(instances: Sequence[InstanceRecord]) -> list[list[InstanceRecord]]:
    """``instances`` as chunks of one run and queue each, in their order within each group."""
    groups: dict[tuple[str, str], list[InstanceRecord]] = {}
    for inst in instances:
        groups.setdefault((inst.run_id, inst.queue), []).append(inst)
    out: list[list[InstanceRecord]] = []
    for group in groups.values():
        size = chunk_size(len(group))
        out.extend(group[i:i + size] for i in range(0, len(group), size))
    return out


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
