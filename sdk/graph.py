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

from .labels import Labels
from .ops import GenerateParams, RefineParams, ScoreParams, SelectParams
from .webhooks import WebhookTarget

#: Fields of a Graph or Loop that change nothing it draws (keys made from what it draws leave
#: them out).
NOT_DRAWN = frozenset({"labels", "webhook", "priority", "retention"})

#: A run's lane on the workers: see :data:`PRIORITY`.
Priority = Literal["interactive", "batch"]
PRIORITY = (
    "Lane: 'interactive' (someone waits on it, e.g. an agent's loop) overtakes queued 'batch' "
    "work (campaigns), which keeps at least 1 engine batch in 4 while both wait. Omit for "
    "interactive, or for the tenant's default through a gateway; a campaign's runs are batch. "
    "Does not change the images.")
RETENTION = (
    "Seconds the run is kept once it ends, with the results only it needs (omit: the back "
    "end's retention, a week unless its operator says otherwise). Through a gateway it can "
    "only shorten the tenant's. `run.pin()` keeps a run whatever this says.")


class RunLimits(BaseModel):
    """What a run may grow to while it runs, when an op's output count was unknown at submit
    (a custom op that returns many items feeding a map or a generate node). A node that would
    take in more than ``items`` items, or take the run past ``images`` images or ``cost``
    megapixel-steps, fails instead of expanding, and its descendants are skipped. A gateway
    sets the tenant's limits here (whatever the client sent)."""

    model_config = ConfigDict(extra="forbid")

    items: int = Field(ge=1, description="Items any one node may take in from its inputs.")
    images: int = Field(ge=1, description="Images the whole run may generate.")
    cost: float | None = Field(
        None, gt=0, allow_inf_nan=False,
        description="Megapixel-steps the whole run may cost, retries included.")
    image_costs: dict[str, float] = Field(
        default_factory=dict,
        description="Megapixel-steps of one image of each generate node (by node id), retries "
        "included: what the run's cost is counted with.")
    image_steps: dict[str, int] = Field(
        default_factory=dict,
        description="Denoising steps each generate node's image is costed at (by node id): an "
        "agent's refine answer asking for more is costed at what it asks.")
    score_costs: dict[str, float] = Field(
        default_factory=dict,
        description="Megapixel-steps of scoring one item at each score node (by node id), "
        "retries included: evaluator work counts against the run's cost too.")


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

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"id": "gen", "op": "generate", "params": {"prompt": "a red circle", "n": 8}},
        {"id": "score", "op": "score", "inputs": ["gen"], "params": {"text": "a red circle"}},
        {"id": "best", "op": "select", "inputs": ["score"], "params": {"top_k": 2},
         "min_success": 6},
    ]})

    id: str = Field(
        min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-/]+$",
        description="Unique name of the node in its graph (letters, digits and _ . : - /); "
        "other nodes list it in their `inputs`.")
    op: str = Field(
        min_length=1, description="The operation the node runs: 'generate' (images from a "
        "prompt), 'score' (an evaluator's score per image), 'select' (keep the best), "
        "'refine' (next round's requests), or a custom op the workers registered.")
    params: dict[str, Any] = Field(
        default_factory=dict, description="The op's parameters, an object whose fields "
        "depend on `op` (see GenerateParams, ScoreParams, SelectParams, RefineParams).")
    inputs: list[str] = Field(
        default_factory=list, description="Ids of the nodes whose outputs this node consumes, "
        "in order. Empty for a source node such as a first `generate`. No cycles.")
    map: bool = Field(
        False, description="Run the op once per item of its single input (one image per "
        "refine request, say) instead of once on the whole list. Needs exactly one input.")
    min_success: int | None = Field(
        None, ge=0, description="Quorum: how many input items must have succeeded for this "
        "node to run; fewer and it fails (QuorumError) and its descendants are skipped. "
        "Omit for: every item (select, refine, custom reducers) or at least one (score, "
        "mapped nodes, which pass failed items on).")
    max_retries: int | None = Field(
        None, ge=0, le=100, description="Retries after a transient failure. Omit for the op's "
        "own (usually 3); 0 for none.")
    min_backoff: float | None = Field(
        None, ge=0, allow_inf_nan=False,
        description="Seconds before the first retry; later ones back off "
        "exponentially. Omit for the op's own.")
    max_backoff: float | None = Field(
        None, ge=0, allow_inf_nan=False,
        description="Cap on the delay between retries, seconds. Omit for the op's "
        "own.")
    queue: str | None = Field(
        None, description="Worker queue to run on (e.g. 'gpu', 'cpu'). Omit for the op's own "
        "queue; only queues some worker consumes are accepted.")


class Graph(BaseModel):
    """A DAG of nodes. Use the builder methods, or construct it from JSON."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"kind": "graph", "nodes": [
            {"id": "gen", "op": "generate", "params": {"prompt": "a red circle", "n": 8}},
            {"id": "score", "op": "score", "inputs": ["gen"],
             "params": {"text": "a red circle"}},
            {"id": "best", "op": "select", "inputs": ["score"], "params": {"top_k": 2}},
        ]},
    ]})

    kind: Literal["graph"] = Field(
        default="graph", description="Always 'graph'; tells a Graph from a Loop in a submission.")
    nodes: list[Node] = Field(
        default_factory=list, description="The nodes, in any order; edges are each node's "
        "`inputs`. At least one, at most 2000.")
    namespace: str | None = Field(
        None, max_length=200,
        description="Stored results are reused only between runs of the same namespace; a "
        "gateway sets it to the tenant (whatever the client sent).",
    )
    limits: RunLimits | None = Field(
        None, description="Bounds on what the run may grow to while it runs (see RunLimits); "
        "a gateway sets the tenant's.")
    labels: Labels = Field(default_factory=dict)
    webhook: WebhookTarget | None = Field(
        default=None,
        description="POST the run's summary here when it ends (through a gateway)")
    priority: Priority | None = Field(default=None, description=PRIORITY)
    retention: float | None = Field(default=None, gt=0, allow_inf_nan=False,
                                    description=RETENTION)

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
        model: str | None = None,
        inputs: Sequence[str] = (),
        map: bool = False,
        id: str | None = None,
        **options: Any,
    ) -> NodeRef:
        """``n`` candidates of ``prompt``; candidate ``i`` is generated with seed ``seed + i``.
        ``model=None`` leaves the choice to the back end (its default model).

        ``options`` are the other :class:`~genloop.sdk.ops.GenerateParams` fields (``steps``,
        ``guidance``, ``width``, ``height``, ``negative_prompt``) and node settings
        (``min_success``, ``max_retries``, ...).
        """
        params, node_opts = _split(GenerateParams, options)
        params.update(prompt=prompt, n=n, seed=seed)
        if model is not None:
            params["model"] = model
        return self.add("generate", inputs=inputs, params=params, map=map, id=id, **node_opts)

    def score(
        self, images: str, *, text: str, evaluator: str | None = None, id: str | None = None,
        **options: Any,
    ) -> NodeRef:
        """Score every image of ``images`` against ``text`` (``evaluator=None``: the back
        end's default); ``options={...}`` configures the evaluator (see ScoreParams)."""
        params, node_opts = _split(ScoreParams, options)
        params["text"] = text
        if evaluator is not None:
            params["evaluator"] = evaluator
        return self.add("score", inputs=[images], params=params, id=id, **node_opts)

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
