"""The op registry: ops are plain functions registered by name; workers find them by name.

    @op("thumbnail", params=ThumbParams, queue="cpu")
    def thumbnail(params: ThumbParams, inputs: list, ctx: OpContext) -> Thumb: ...

A worker started with ``--import my.module`` imports the module, which registers its ops in
:data:`default_registry`. A runtime can also be given a registry of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from genloop.sdk.errors import GenloopError, GraphProblem
from genloop.sdk.graph import Graph, Node

OpFunction = Callable[..., Any]


class _NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class OpSpec:
    """How to run one op and how the scheduler should treat it.

    ``version`` is part of every result key: bump it when the op's output changes for the same
    inputs, and stored results of the old version stop being reused. ``elementwise`` ops return
    one output item per input item (in order) and let failed items pass through to the next
    reducer instead of applying the quorum themselves. ``identity(params, resources)`` names the
    model (or other external state) whose change must invalidate stored results.
    """

    name: str
    fn: OpFunction
    params: type[BaseModel] = _NoParams
    output: type[BaseModel] | None = None
    version: str = "1"
    queue: str = "cpu"
    elementwise: bool = False
    max_retries: int = 3
    min_backoff: float = 0.2
    max_backoff: float = 30.0
    identity: Callable[[Any, Any], str] | None = field(default=None, compare=False)


class OpRegistry(Mapping[str, OpSpec]):
    """Ops by name. Registering a name twice with another function is an error."""

    def __init__(self) -> None:
        self._ops: dict[str, OpSpec] = {}

    def register(self, spec: OpSpec) -> OpSpec:
        known = self._ops.get(spec.name)
        if known is not None and known.fn is not spec.fn:
            raise GenloopError(f"op {spec.name!r} is already registered by {known.fn!r}")
        self._ops[spec.name] = spec
        return spec

    def __getitem__(self, name: str) -> OpSpec:
        return self._ops[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def catalogue(self) -> dict[str, type[BaseModel]]:
        """Op name -> params model, as graph validation wants it."""
        return {name: spec.params for name, spec in self._ops.items()}

    def queue_of(self, node: Node) -> str | None:
        """The queue ``node`` runs on: its own ``queue``, else its op's (``None`` for an op not
        registered here)."""
        spec = self._ops.get(node.op)
        return node.queue or (spec.queue if spec is not None else None)

    def queue_problems(self, graph: Graph, queues: Collection[str]) -> list[GraphProblem]:
        """The nodes of ``graph`` bound for a queue outside ``queues`` (those some worker
        consumes). A node of an unknown op is graph validation's to report."""
        return [GraphProblem(node_id=node.id, message=f"no workers consume queue {queue!r}; "
                             f"known: {', '.join(sorted(queues))}")
                for node in graph.nodes
                if (queue := self.queue_of(node)) is not None and queue not in queues]


#: Where ``@op`` registers by default; runtimes use it unless given another registry.
default_registry = OpRegistry()


def op(
    name: str,
    *,
    params: type[BaseModel] | None = None,
    output: type[BaseModel] | None = None,
    version: str = "1",
    queue: str = "cpu",
    elementwise: bool = False,
    max_retries: int = 3,
    min_backoff: float = 0.2,
    max_backoff: float = 30.0,
    identity: Callable[[Any, Any], str] | None = None,
    registry: OpRegistry | None = None,
) -> Callable[[OpFunction], OpFunction]:
    """Register ``fn(params, inputs, ctx)`` as op ``name``; see :class:`OpSpec` for the options.

    ``fn`` receives its validated params, the list of its input items (the items of all its
    input nodes in input order; one item for a ``map`` node) and an ``OpContext``. It returns a
    pydantic model or a list of them.
    """

    def register(fn: OpFunction) -> OpFunction:
        (registry if registry is not None else default_registry).register(
            OpSpec(
                name=name, fn=fn, params=params or _NoParams, output=output, version=version,
                queue=queue, elementwise=elementwise, max_retries=max_retries,
                min_backoff=min_backoff, max_backoff=max_backoff, identity=identity,
            )
        )
        return fn

    return register
