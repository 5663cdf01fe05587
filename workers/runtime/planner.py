"""Turning graph nodes into instances, and the quorum rule. Pure functions: no store, no broker.

A node runs as one or more *instances*, each one Dramatiq message:
- a node whose op has ``n``/``seed``/``shard_size`` params (``generate``) runs as shards of at
  most ``shard_size`` candidates; shard ``[a, b)`` gets ``seed + a``, ``n = b - a`` and
  ``first = a``, so candidate ``i`` is generated from seed ``seed + i`` however it is sharded;
- a ``map`` node runs once per item of its input, with ``first`` set to the item's position;
- any other node runs once, on all items of all its inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from genloop.sdk.errors import GraphError, GraphProblem
from genloop.sdk.graph import Graph, Node, RunLimits
from genloop.sdk.ops import GenerationRequest, RefineParams, edit_steps

from ..ops.registry import OpRegistry, OpSpec
from ..stores.records import FailedItem, InstanceRecord, ItemRef

_SHARDED_BY = frozenset({"n", "seed", "shard_size", "first"})


@dataclass(frozen=True)
class Topology:
    """A graph with its edges indexed both ways."""

    graph: Graph

    @cached_property
    def nodes(self) -> dict[str, Node]:
        return {n.id: n for n in self.graph.nodes}

    @cached_property
    def children(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {n.id: [] for n in self.graph.nodes}
        for node in self.graph.nodes:
            for parent in node.inputs:
                out[parent].append(node.id)
        return out

    def descendants(self, node_id: str) -> list[str]:
        seen: dict[str, None] = {}
        stack = list(self.children[node_id])
        while stack:
            nid = stack.pop()
            if nid not in seen:
                seen[nid] = None
                stack.extend(self.children[nid])
        return list(seen)


def op_spec(registry: OpRegistry, node: Node) -> OpSpec:
    try:
        return registry[node.op]
    except KeyError:
        raise GraphError(
            [GraphProblem(node_id=node.id, message=f"unknown op {node.op!r}")]
        ) from None


def is_elementwise(node: Node, spec: OpSpec) -> bool:
    """Element-wise nodes pass failed input items through; reducers apply the quorum."""
    return node.map or spec.elementwise


def expand(
    run_id: str, node: Node, spec: OpSpec, inputs: list[ItemRef]
) -> list[InstanceRecord]:
    """The instances that run ``node`` on ``inputs`` (the successful items of its parents)."""
    params = spec.params.model_validate(node.params).model_dump(mode="json")
    common = dict(
        run_id=run_id,
        node_id=node.id,
        queue=node.queue or spec.queue,
        max_retries=spec.max_retries if node.max_retries is None else node.max_retries,
        min_backoff=spec.min_backoff if node.min_backoff is None else node.min_backoff,
        max_backoff=spec.max_backoff if node.max_backoff is None else node.max_backoff,
    )
    if node.map:
        has_first = "first" in spec.params.model_fields
        return [
            InstanceRecord(
                instance_id=f"{node.id}[{seq}]", seq=seq, inputs=[ref], expected_items=1,
                params={**params, "first": seq} if has_first else params, **common,
            )
            for seq, ref in enumerate(inputs)
        ]
    if _SHARDED_BY <= spec.params.model_fields.keys() and not inputs:
        n, size = params["n"], params["shard_size"]
        return [
            InstanceRecord(
                instance_id=f"{node.id}#{start}", seq=seq, expected_items=min(size, n - start),
                params={**params, "seed": params["seed"] + start, "n": min(size, n - start),
                        "first": start},
                **common,
            )
            for seq, start in enumerate(range(0, n, size))
        ]
    expected = len(inputs) if spec.elementwise else 1
    return [
        InstanceRecord(
            instance_id=node.id, seq=0, inputs=inputs, expected_items=expected, params=params,
            **common,
        )
    ]


def quorum_problem(
    node: Node, spec: OpSpec, ok: list[ItemRef], failed: list[FailedItem]
) -> str | None:
    """Why ``node`` may not run on these inputs, or ``None`` if it may.

    ``min_success=None`` asks for every item on a reducing node and for at least one (if there
    were any) on an element-wise node.
    """
    total = len(ok) + sum(f.items for f in failed)
    if node.min_success is not None:
        required = node.min_success
    elif is_elementwise(node, spec):
        required = min(1, total)
    else:
        required = total
    if len(ok) >= required:
        return None
    lost = "; ".join(f"{f.instance_id}: {f.error_type}: {f.message}" for f in failed)
    return f"{len(ok)} of {total} input items succeeded, min_success={required}. Failed: {lost}"


# -- cost ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ImageSize:
    """What one image of a model costs when a request leaves the settings out."""

    steps: int
    width: int
    height: int


@dataclass(frozen=True)
class NodeCost:
    """A node's share of a run, at most: ``items`` it outputs, ``images`` it generates on first
    attempts, and ``cost`` in megapixel-steps with every retry it may take."""

    node_id: str
    items: int
    images: int
    cost: float


@dataclass(frozen=True)
class RunCost:
    nodes: dict[str, NodeCost]

    @property
    def images(self) -> int:
        return sum(n.images for n in self.nodes.values())

    @property
    def cost(self) -> float:
        return sum(n.cost for n in self.nodes.values())


#: Megapixel-steps of scoring one item at a score node (its evaluator and options), no retries.
ScoreCost = Callable[[Node, Any], float]


def run_cost(graph: Graph, registry: OpRegistry, size_of: Callable[[str], ImageSize],
             score_cost: ScoreCost | None = None) -> RunCost:
    """What ``graph`` may generate, node by node, before anything runs.

    Items flow along edges in topological order. A generate node without inputs makes ``n``
    images (however it is sharded); with inputs, mapped or not, it makes one image per input
    item, so chained generate nodes are counted as the products they are. ``score`` and other
    element-wise ops pass their input count on, ``select`` keeps at most ``top_k``, ``refine``
    asks for ``candidates``: a loop's rounds are counted through its refine nodes. A custom op's
    output count is unknown before it runs; it is taken as its input count (one item for a
    root), and the run's :class:`~genloop.sdk.graph.RunLimits` stop a larger fan-out when it
    comes (:func:`limits_problem`). ``cost`` is images x megapixels x steps x (1 + max
    retries): the most a node can burn, failures included; with ``score_cost``, a score node
    adds the items it scores x ``score_cost(node, params)`` x (1 + max retries), so evaluator
    work a tenant chooses is counted too. ``size_of(model)`` gives the model's defaults for
    unset steps, width and height. The graph must be valid (acyclic, known ops).
    """
    costs: dict[str, NodeCost] = {}
    for node, spec, params, fed, images, items in _flow(graph, registry, {}):
        cost = images * image_cost(node, spec, params, size_of) if images else 0.0
        if score_cost is not None and node.op == "score" and fed:
            cost += fed * score_cost(node, params) * attempts(node, spec)
        costs[node.id] = NodeCost(node.id, items, images, cost)
    return RunCost(costs)


def attempts(node: Node, spec: OpSpec) -> int:
    """How many times the node's op may run: its first attempt and every retry."""
    return 1 + (spec.max_retries if node.max_retries is None else node.max_retries)


def image_cost(node: Node, spec: OpSpec, params: Any,
               size_of: Callable[[str], ImageSize]) -> float:
    """Megapixel-steps of one image of a generate node, every retry counted."""
    size = size_of(params.model)
    steps = params.steps or size.steps
    pixels = (params.width or size.width) * (params.height or size.height)
    return pixels / 1e6 * steps * attempts(node, spec)


def limits_problem(graph: Graph, registry: OpRegistry, limits: RunLimits, node_id: str,
                   known: Mapping[str, int]) -> str | None:
    """Why node ``node_id``, about to expand, would take the run past ``limits``; ``None`` if
    it may run. ``known``: the items each ended node actually output; the rest are planned as
    :func:`run_cost` plans them, from these."""
    images, cost = 0, 0.0
    for node, _spec, _params, fed, node_images, _items in _flow(graph, registry, known):
        if node.id == node_id and fed > limits.items:
            return (f"{fed} input items; at most {limits.items} per node (an op upstream "
                    "returned more items than planned)")
        images += node_images
        cost += _planned(limits, node.id, fed, node_images)
    if images > limits.images:
        return (f"the run would generate {images} images; at most {limits.images} (an op "
                "upstream returned more items than planned)")
    if limits.cost is not None and cost > limits.cost:
        return (f"the run would cost {cost:.4g} megapixel-steps; at most {limits.cost:g} (an "
                "op upstream returned more items than planned)")
    return None


def answer_cost_problem(graph: Graph, registry: OpRegistry, refine_id: str,
                        requests: Sequence[GenerationRequest],
                        earlier: Sequence[tuple[str, Sequence[GenerationRequest]]]
                        ) -> str | None:
    """Why an agent's answer to refine node ``refine_id`` would take the run past its cost
    limit; ``None`` if it may run. The plan costed the next round at the node's candidates and
    its generate node's steps; an answer asking more steps costs what it asks, on top of the
    plan and of what the ``earlier`` answers (refine node, requests) added."""
    limits = graph.limits
    if limits is None or limits.cost is None:
        return None
    extra = _answer_extra(graph, refine_id, requests)
    if extra <= 0:
        return None
    planned = sum(_planned(limits, node.id, fed, images)
                  for node, _spec, _params, fed, images, _items in _flow(graph, registry, {}))
    taken = sum(max(0.0, _answer_extra(graph, node_id, reqs)) for node_id, reqs in earlier)
    if planned + taken + extra <= limits.cost:
        return None
    return (f"the answer would cost {extra:.4g} megapixel-steps more than its round was "
            f"planned at, taking the run to {planned + taken + extra:.4g}; at most "
            f"{limits.cost:g}: ask for fewer steps or images")


def _planned(limits: RunLimits, node_id: str, fed: int, images: int) -> float:
    """Megapixel-steps a node is counted at by the run's limits: its images and what it
    scores."""
    return (images * limits.image_costs.get(node_id, 0.0)
            + fed * limits.score_costs.get(node_id, 0.0))


def _answer_extra(graph: Graph, refine_id: str, requests: Sequence[GenerationRequest]) -> float:
    """What the answer costs beyond what its round was planned at (megapixel-steps)."""
    limits = graph.limits
    nodes = {n.id: n for n in graph.nodes}
    targets = [n for n in graph.nodes if refine_id in n.inputs and n.op == "generate"]
    if limits is None or not targets or refine_id not in nodes:
        return 0.0
    target = targets[0].id
    cost, steps = limits.image_costs.get(target), limits.image_steps.get(target)
    if not cost or not steps:
        return 0.0
    # as the plan counted them: a spec that names none has the op's default
    candidates = RefineParams.model_validate(nodes[refine_id].params).candidates
    asked = sum(_denoised(r, steps) for r in requests[:candidates])
    return cost / steps * asked - cost * candidates


def _denoised(request: GenerationRequest, planned: int) -> int:
    steps = request.steps or planned
    if request.init_image is not None and request.strength is not None:
        return edit_steps(steps, request.strength)
    return steps


def _flow(graph: Graph, registry: OpRegistry, known: Mapping[str, int]
          ) -> Iterator[tuple[Node, OpSpec, Any, int, int, int]]:
    """Per node, in topological order: ``(node, spec, params, fed, images, items)``; an ended
    node's ``items`` are ``known[node.id]``."""
    nodes = {n.id: n for n in graph.nodes}
    items_of: dict[str, int] = {}
    for node_id in _topological(graph):
        node = nodes[node_id]
        spec = registry[node.op]
        # The op's own params model, known by its name only (generate's has n, select's top_k).
        params: Any = spec.params.model_validate(node.params)
        fed = sum(items_of[p] for p in node.inputs)
        images = 0
        if node.op == "generate":
            images = items = fed if node.inputs else params.n
        elif node.op == "select":
            items = min(params.top_k, fed)
        elif node.op == "refine":
            items = params.candidates
        else:
            items = fed if node.inputs else 1
        items_of[node_id] = known.get(node_id, items)
        yield node, spec, params, fed, images, items_of[node_id]


def _topological(graph: Graph) -> list[str]:
    waiting = {n.id: len(n.inputs) for n in graph.nodes}
    children = Topology(graph).children
    ready = [n.id for n in graph.nodes if not n.inputs]
    order = []
    while ready:
        node_id = ready.pop()
        order.append(node_id)
        for child in children[node_id]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    return order
