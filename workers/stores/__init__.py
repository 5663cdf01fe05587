"""State stores: where runs, nodes, instances, results, claims and events live."""

from .base import IdempotencyConflict, RunTx, StateStore
from .records import (
    EventRecord,
    FailedItem,
    InstanceRecord,
    ItemRef,
    NodeRecord,
    ResultRecord,
    RunRecord,
    RunSpecRecord,
)
from .sqlite import SqliteStateStore

__all__ = [
    "EventRecord",
    "FailedItem",
    "IdempotencyConflict",
    "InstanceRecord",
    "ItemRef",
    "NodeRecord",
    "ResultRecord",
    "RunRecord",
    "RunSpecRecord",
    "RunTx",
    "SqliteStateStore",
    "StateStore",
]
