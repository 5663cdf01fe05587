"""The hot transitions of a node instance, as every store takes them: a :class:`Start` and a
:class:`Finish` step, and what each came to (:class:`Started`, :class:`FinishOutcome`).

A step is one store call for several instances (a chunk's), each applied alone: the Redis store
runs a server-side script per step (``start.lua``, ``finish.lua``), SQLite a few statements in
one write transaction (``sqlite_steps.py``). Both answer with the outcomes below, so the
scheduler reads them the same way whatever the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, StrEnum

from .records import EventRecord, InstanceRecord, ResultRecord


class Started(StrEnum):
    """What a :class:`Start` came to."""

    STARTED = "started"  #: the lease is the caller's and the instance is stored running
    STORED = "stored"  #: a result is stored under the key already: nothing to run
    LEASED = "leased"  #: another holder has the lease (the instance is touched: look again)
    ENDED = "ended"  #: the instance had ended already
    CANCELLING = "cancelling"  #: the run is being cancelled (a run transaction cancels it)
    MISSING = "missing"  #: no such instance


class Finished(Enum):
    """What a :class:`Finish` came to."""

    #: the instance ended and its node was counted down to ``pending`` instances (0: the caller
    #: completes the node, in a run transaction)
    COUNTED = "counted"
    #: the instance ended and the step completed its node too (``run_ended``, ``ready``)
    COMPLETED = "completed"
    #: another execution stored a result under the key first: nothing written; the caller
    #: completes the instance with that result
    OTHER_RESULT = "other-result"
    ENDED = "ended"  #: the instance had ended already: nothing written
    MISSING = "missing"  #: no such instance: nothing written


@dataclass(frozen=True)
class ScriptedCompletion:
    """What a :class:`Finish` needs to complete a node of one instance that succeeded: the
    node's outputs (``list[ItemRef]`` as JSON) and their count (for the run's ended counts),
    the events it would append, and the node's children."""

    outputs_json: str
    output_count: int
    node_event: EventRecord
    run_event: EventRecord
    children: list[str]


@dataclass(frozen=True)
class FinishOutcome:
    """A :class:`Finish`'s answer: ``pending`` for :attr:`Finished.COUNTED`; whether the node's
    completion ended the run and which children became ready for :attr:`Finished.COMPLETED`."""

    step: Finished
    pending: int = 0
    run_ended: bool = False
    ready: list[str] = field(default_factory=list)

    @property
    def wrote_event(self) -> bool:
        """Whether the instance's event was written (its node's too when ``COMPLETED``)."""
        return self.step in (Finished.COUNTED, Finished.COMPLETED)


@dataclass(frozen=True)
class Start:
    """Claim ``key`` for ``owner`` (``ttl`` seconds) and store ``running``, with its event and
    the run's, should this be the run's first start."""

    running: InstanceRecord
    key: str
    owner: str
    ttl: float
    started: EventRecord
    run_running: EventRecord


@dataclass(frozen=True)
class Finish:
    """Store ``result`` (``None``: already stored) and ``done`` with its ``event``, and drop the
    ``(key, owner)`` lease; with ``completion``, complete a node of one instance when nothing
    stands in the way (see ``finish.lua``)."""

    done: InstanceRecord
    event: EventRecord
    result: ResultRecord | None
    lease: tuple[str, str] | None
    completion: ScriptedCompletion | None = None
