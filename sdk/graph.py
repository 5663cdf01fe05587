"""Graphs: the unit an agent submits. A graph is a list of nodes; each node names an op, its
params and the nodes whose outputs it consumes.

Build one with the methods of :class:`Graph` or author it as JSON; both give the same model::

    g = Graph()
    gen = g.generate(prompt="a red sneaker", n=8, seed=0, model="tiny")
    sc = g.score(gen, text="a red sneaker")
    top = g.select(sc, top_k=2, min_success=6)
    Graph.model_validate_json(g.model_dump_json()) == g
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .ops import GenerateParams, RefineParams, SelectParams


class NodeRef(str):
    """The id of a node in a graph, returned by the builder methods; pass it as an input."""

    __slots__ = ()

    @property
    def id(self) -> str:
        return str(self)


class Node(BaseModel):
    """One node of a graph.

    ``map=True`` runs the op once per item of its single input's list output instead of once on
    the whole list. ``min_success`` is the quorum: how many input items must have succeeded for
    the node to run. ``None`` means every item for reducing ops and at least one for element-wise
    ones (``score``, mapped nodes), which pass failed items through to the next reducer.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-/]+$")
    op: str = Field(min_length=1)
    params: dict[str, Any] = Field(default_factory=dict)
    inputs: list[str] = Field(default_factory=list)
    map: bool = False
    min_success: int | None = Field(None, ge=0)
    max_retries: int | None = Field(None, ge=0, le=100, description="default: the op's own")
    min_backoff: float | None = Field(None, ge=0, allow_inf_nan=False,
                                      description="seconds before the first retry")
    max_backoff: float | None = Field(None, ge=0, allow_inf_nan=False,
                                      description="cap on the retry delay, seconds")
    queue: str | None = Field(None, description="worker queue; default: the op's own")


class Graph(BaseModel):
    """A DAG of nodes. Use the builder methods, or construct it from JSON."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["graph"] = "graph"
    nodes: list[Node] = Field(default_factory=list)
    namespace: str | None = Field(
        None, max_length=200,
        description="stored results are reused only between runs of the same namespace; a "
        "gateway sets it to the tenant (whatever the client sent)",
    )

    def add(
        self,
        op: str,
        *,
        inputs: Sequence[str] = (),
        params: dict[str, Any] | None = None,
        id: str | None = None,
        map: bool = False,
        min_success: int | None = None,
        max_retries: int | None = None,
        min_backoff: float | None = None,
        max_backoff: float | None = None,
        queue: str | None = None,
    ) -> NodeRef:
        """Append a node running ``op`` (any registered op) and return its id."""
        node = Node(
            id=id or self._fresh_id(op),
            op=op,
            params=dict(params or {}),
            inputs=[str(i) for i in inputs],
            map=map,
            min_success=min_success,
            max_retries=max_retries,
            min_backoff=min_backoff,
            max_backoff=max_backoff,
            queue=queue,
        )
        self.nodes.append(node)
        return NodeRef(node.id)

    def generate(
        self,
        prompt: str | None = None,
        *,
        n: int = 1,
        seed: int = 0,
        model: str = "tiny",
        inputs: Sequence[str] = (),
        map: bool = False,
        id: str | None = None,
        **options: Any,
    ) -> NodeRef:
        """``n`` candidates of ``prompt``; candidate ``i`` is generated with seed ``seed + i``.

        ``options`` are the other :class:`~genloop.sdk.ops.GenerateParams` fields (``steps``,
        ``guidance``, ``width``, ``height``, ``negative_prompt``) and node settings
        (``min_success``, ``max_retries``, ...).
        """
        params, node_opts = _split(GenerateParams, options)
        params.update(prompt=prompt, n=n, seed=seed, model=model)
        return self.add("generate", inputs=inputs, params=params, map=map, id=id, **node_opts)

    def score(
        self, images: str, *, text: str, evaluator: str = "clip", id: str | None = None,
        **options: Any,
    ) -> NodeRef:
        """Score every image of ``images`` against ``text``."""
        return self.add(
            "score", inputs=[images], params={"text": text, "evaluator": evaluator}, id=id,
            **options,
        )

    def select(
        self, scores: str | Sequence[str], *, top_k: int = 1, id: str | None = None,
        **options: Any,
    ) -> NodeRef:
        """Keep the ``top_k`` best of the scored candidates of ``scores``."""
        params, node_opts = _split(SelectParams, options)
        params["top_k"] = top_k
        inputs = [scores] if isinstance(scores, str) else list(scores)
        return self.add("select", inputs=inputs, params=params, id=id, **node_opts)

    def refine(
        self, scores: str | Sequence[str], *, prompt: str, candidates: int = 8,
        strategy: str = "seed-search", id: str | None = None, **options: Any,
    ) -> NodeRef:
        """Next round's generation requests from the scored candidates seen so far."""
        params, node_opts = _split(RefineParams, options)
        params.update(prompt=prompt, candidates=candidates, strategy=strategy)
        inputs = [scores] if isinstance(scores, str) else list(scores)
        return self.add("refine", inputs=inputs, params=params, id=id, **node_opts)

    def node(self, node_id: str) -> Node:
        """The node with this id (``KeyError`` if absent)."""
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def _fresh_id(self, op: str) -> str:
        taken = {n.id for n in self.nodes}
        i = 1
        while f"{op}-{i}" in taken:
            i += 1
        return f"{op}-{i}"


def _split(params_model: type[BaseModel], options: dict[str, Any]) -> tuple[dict, dict]:
    """Separate op params from node settings in a builder's keyword arguments."""
    fields = params_model.model_fields
    params = {k: v for k, v in options.items() if k in fields}
    node_opts = {k: v for k, v in options.items() if k not in fields}
    return params, node_opts


__all__ = ["Graph", "Node", "NodeRef"]
