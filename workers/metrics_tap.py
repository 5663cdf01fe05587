"""The state store as the metrics see it: every event it commits, once committed.

:class:`MeteredStore` wraps any :class:`~.stores.base.StateStore` and passes everything through;
it reads the events a transaction writes and hands them to the metrics after the transaction
commits (a rolled-back one counts nothing), and likewise the events of the scripted start and
finish of an instance (a Redis store's) when the script says it wrote them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .stores.base import RunTx, StateStore, creation_events
from .stores.records import EventRecord
from .stores.redis_scripts import Finish, FinishOutcome, Start

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
        attr = getattr(self._store, name)  # AttributeError where the store has no such script
        if name == "start_instances":
            return self._start_instances(attr)
        if name == "finish_instances":
            return self._finish_instances(attr)
        return attr

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

    def _start_instances(self, start: Callable[..., list[tuple[str, float]]]) -> Callable:
        def started(starts: Sequence[Start]) -> list[tuple[str, float]]:
            outcomes = start(starts)
            for s, (outcome, _) in zip(starts, outcomes, strict=True):
                if outcome == "started":
                    self._observe(s.running.run_id, s.started)
            return outcomes
        return started

    def _finish_instances(self, finish: Callable[..., list[FinishOutcome]]) -> Callable:
        def finished(finishes: Sequence[Finish]) -> list[FinishOutcome]:
            outs = finish(finishes)
            for f, out in zip(finishes, outs, strict=True):
                # code >= 0: the instance's event written; -5: so were its node's (and the
                # run's, if that ended it); other negatives wrote nothing (see
                # redis_scripts.FINISH)
                run_id = f.done.run_id
                if out.code >= 0 or out.code == -5:
                    self._observe(run_id, f.event)
                if out.code == -5 and f.completion is not None:
                    self._observe(run_id, f.completion.node_event)
                    if out.run_ended:
                        self._observe(run_id, f.completion.run_event)
            return outs
        return finished
