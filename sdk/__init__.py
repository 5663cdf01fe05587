"""genloop SDK: submit generate -> evaluate -> refine loops and DAGs, follow them, collect results.

Light on purpose: pydantic, httpx and tenacity only. Importing it never imports torch, and
imports httpx and asyncio only when the HTTP back end or the asyncio client is first named
(:func:`__getattr__`): a process that runs ``Client.local`` starts without them.
"""

from typing import TYPE_CHECKING, Any

from .backend import AsyncBackend, Backend
from .client import Client
from .errors import (
    Cancelled,
    ClientError,
    GenloopError,
    GraphError,
    GraphProblem,
    IdempotencyConflict,
    NotFound,
    OpError,
    Permanent,
    QuorumError,
    RefineConflict,
    RunError,
    RunTimeout,
    StoreError,
    Transient,
    TransportError,
)
from .graph import Graph, Node, NodeRef, Priority, RunLimits
from .loop import Loop
from .models import (
    Compute,
    Event,
    EventData,
    Failure,
    NodeOutput,
    NodeState,
    NodeStatus,
    RoundSummary,
    RunInfo,
    RunResult,
    RunSpec,
    RunStatus,
)
from .ops import (
    Candidate,
    ClauseScore,
    Critique,
    GenerateParams,
    GenerationRequest,
    GiveUp,
    JudgeUsage,
    RefineAnswer,
    RefineParams,
    RefineRequest,
    ScoredCandidate,
    ScoreParams,
    SelectParams,
)
from .run import Run
from .schema import Named, Served, SpecSchema
from .validation import graph_problems, validate_graph

if TYPE_CHECKING:
    from .aio import AsyncClient, AsyncRun
    from .http import HttpBackend

_LAZY = {"AsyncClient": "aio", "AsyncRun": "aio", "HttpBackend": "http"}


def __getattr__(name: str) -> Any:
    """The names whose modules import httpx or asyncio, imported when first asked for (PEP 562)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value

__all__ = [
    "AsyncBackend",
    "AsyncClient",
    "AsyncRun",
    "Backend",
    "Cancelled",
    "Candidate",
    "ClauseScore",
    "Client",
    "ClientError",
    "Compute",
    "Critique",
    "Event",
    "EventData",
    "Failure",
    "GenerateParams",
    "GenerationRequest",
    "GiveUp",
    "GenloopError",
    "Graph",
    "GraphError",
    "GraphProblem",
    "IdempotencyConflict",
    "JudgeUsage",
    "HttpBackend",
    "Loop",
    "Named",
    "Node",
    "NodeOutput",
    "NodeRef",
    "NodeState",
    "NodeStatus",
    "NotFound",
    "OpError",
    "Permanent",
    "Priority",
    "QuorumError",
    "RefineAnswer",
    "RefineConflict",
    "RefineParams",
    "RefineRequest",
    "RoundSummary",
    "Run",
    "RunError",
    "RunInfo",
    "RunLimits",
    "RunResult",
    "RunSpec",
    "RunStatus",
    "RunTimeout",
    "ScoreParams",
    "ScoredCandidate",
    "SelectParams",
    "Served",
    "SpecSchema",
    "StoreError",
    "Transient",
    "TransportError",
    "graph_problems",
    "validate_graph",
]


if __name__ != "genloop.sdk":  # imported as a bare `sdk` from the checkout's root
    from .unshadow import hand_over

    hand_over(__name__, __path__[0])
