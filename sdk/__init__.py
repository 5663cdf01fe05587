"""genloop SDK: submit generate -> evaluate -> refine loops and DAGs, follow them, collect results.

Light on purpose: pydantic, httpx and tenacity only. Importing it never imports torch.
"""

from genloop.sdk.aio import AsyncClient, AsyncRun
from genloop.sdk.backend import AsyncBackend, Backend
from genloop.sdk.client import Client
from genloop.sdk.errors import (
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
from genloop.sdk.graph import Graph, Node, NodeRef, RunLimits
from genloop.sdk.http import HttpBackend
from genloop.sdk.loop import Loop
from genloop.sdk.models import (
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
from genloop.sdk.ops import (
    Candidate,
    ClauseScore,
    Critique,
    GenerateParams,
    GenerationRequest,
    RefineAnswer,
    RefineParams,
    RefineRequest,
    ScoredCandidate,
    ScoreParams,
    SelectParams,
)
from genloop.sdk.run import Run
from genloop.sdk.schema import Named, Served, SpecSchema
from genloop.sdk.validation import graph_problems, validate_graph

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
    "GenloopError",
    "Graph",
    "GraphError",
    "GraphProblem",
    "IdempotencyConflict",
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
    from genloop.sdk.unshadow import hand_over

    hand_over(__name__, __path__[0])
