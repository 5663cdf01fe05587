"""The state store as the metrics see it: every event it commits, once committed.

:class:`MeteredStore` wraps any :class:`~..stores.base.StateStore` and passes everything through;
it reads the events a transaction writes and hands them to the metrics after the transaction
commits (a rolled-back one counts nothing), and likewise the events of the hot start and
finish steps when their outcome says they were written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..stores.base import RunTx, StateStore, creation_events
from ..stores.records import EventRecord
from ..stores.steps import Finish, Finished, FinishOutcome, Start, Started

Observe = Callable[[str, EventRecord], None]


class _TxTap:
    """A transaction that remembers the events written in it."""

    def __init__(self, tx: RunTx, events: list[EventRecord]) -> None:
        self._tx, self._events = tx, events

    def event(self, event: EventRecord) -> None:
        self._tx.event(event)
        self._events.append(event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tx, name)


class MeteredStore:
    """``store`` with its committed events reported to ``observe(run_id, event)``."""

    def __init__(self, store: StateStore, observe: Observe) -> None:
        self._store, self._observe = store, observe

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def create_run(self, run, spec, nodes, instances):
        stored, created = self._store.create_run(run, spec, nodes, instances)
        if created:
            for event in creation_events(stored, nodes):
                self._observe(stored.id, event)
        return stored, created

    @contextmanager
    def transaction(self, run_id: str, *, shared: bool = False) -> Iterator[_TxTap]:
        events: list[EventRecord] = []
        with self._store.transaction(run_id, shared=shared) as tx:
            yield _TxTap(tx, events)
        for event in events:
            self._observe(run_id, event)

    def append_event(self, run_id: str, event: EventRecord) -> int:
        event_id = self._store.append_event(run_id, event)
        self._observe(run_id, event)
        return event_id

    def start_instances(self, starts: Sequence[Start]) -> list[tuple[Started, float]]:
        outcomes = self._store.start_instances(starts)
        for s, (outcome, _) in zip(starts, outcomes, strict=True):
            if outcome == Started.STARTED:
                self._observe(s.running.run_id, s.started)
        return outcomes

    def finish_instances(self, finishes: Sequence[Finish]) -> list[FinishOutcome]:
        outs = self._store.finish_instances(finishes)
        for f, out in zip(finishes, outs, strict=True):
            run_id = f.done.run_id
            if out.wrote_event:
                self._observe(run_id, f.event)
            if out.step is Finished.COMPLETED and f.completion is not None:
                self._observe(run_id, f.completion.node_event)
                if out.run_ended:
                    self._observe(run_id, f.completion.run_event)
        return outs
