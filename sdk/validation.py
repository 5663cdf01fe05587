"""Graph validation: every problem at once, each with its node id.

Structural checks need nothing but the graph. Op checks need a catalogue of the ops the workers
know (name -> params model); the SDK knows the built-ins, a worker pool knows its registry too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from .errors import GraphError, GraphProblem
from .graph import Graph, Node
from .ops import BUILTIN_PARAMS

#: Largest graph genloop accepts in one submission.
MAX_NODES_PER_GRAPH = 2_000


def graph_problems(
    graph: Graph, ops: Mapping[str, type[BaseModel]] | None = None
) -> list[GraphProblem]:
    """All problems of ``graph``; empty when it is valid.

    ``ops`` maps each known op name to its params model; ``None`` skips the op checks (a client
    that does not know the workers' custom ops leaves them to the server).
    """
    problems: list[GraphProblem] = []

    def problem(node_id: str | None, message: str) -> None:
        problems.append(GraphProblem(node_id=node_id, message=message))

    if not graph.nodes:
        problem(None, "the graph has no nodes")
    if len(graph.nodes) > MAX_NODES_PER_GRAPH:
        problem(None, f"{len(graph.nodes)} nodes; at most {MAX_NODES_PER_GRAPH} are allowed")

    ids: set[str] = set()
    for node in graph.nodes:
        if node.id in ids:
            problem(node.id, "duplicate node id")
        ids.add(node.id)

    for node in graph.nodes:
        for parent in node.inputs:
            if parent not in ids:
                problem(node.id, f"input {parent!r} is not a node of this graph")
            if parent == node.id:
                problem(node.id, "a node cannot be its own input")
        if len(set(node.inputs)) != len(node.inputs):
            problem(node.id, "the same input is listed twice")
        if node.map and len(node.inputs) != 1:
            problem(node.id, "map=True needs exactly one input to map over")
        if (
            node.min_backoff is not None
            and node.max_backoff is not None
            and node.min_backoff > node.max_backoff
        ):
            problem(node.id, "min_backoff is larger than max_backoff")
        if ops is not None:
            problems.extend(_op_problems(node.id, node.op, node.params, ops))
        problems.extend(value_problems(node))

    for cycle in _cycles(graph):
        problem(cycle[0], "cycle: " + " -> ".join(cycle + [cycle[0]]))
    return problems


def validate_graph(graph: Graph, ops: Mapping[str, type[BaseModel]] | None = None) -> None:
    """Raise :class:`GraphError` listing every problem of ``graph``, if it has any."""
    problems = graph_problems(graph, ops)
    if problems:
        raise GraphError(problems)


def value_problems(node: Node, max_string: int | None = None) -> list[GraphProblem]:
    """Values no spec may hold, wherever they sit in a node: non-finite floats (JSON cannot
    carry them, so they would be stored as null or not parse back), strings that are not valid
    Unicode (lone surrogates cannot be encoded to store or send), and, with ``max_string``,
    strings longer than that (a long prompt is copied into every candidate of a node)."""
    problems: list[GraphProblem] = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(GraphProblem(
                node_id=node.id, message=f"{where}: {value} is not a finite number"))
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                problems.append(GraphProblem(
                    node_id=node.id, message=f"{where}: not valid Unicode (a lone surrogate)"))
            if max_string is not None and len(value) > max_string:
                problems.append(GraphProblem(
                    node_id=node.id,
                    message=f"{where}: {len(value)} characters; at most {max_string} allowed"))
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(key, where)
                walk(item, f"{where}.{key}" if isinstance(key, str) else where)
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                walk(item, f"{where}[{i}]")

    for name in Node.model_fields:
        walk(getattr(node, name), name)
    return problems


def _op_problems(
    node_id: str, op: str, params: dict, ops: Mapping[str, type[BaseModel]]
) -> list[GraphProblem]:
    model = ops.get(op)
    if model is None:
        known = ", ".join(sorted(ops)) or "none"
        return [GraphProblem(node_id=node_id, message=f"unknown op {op!r} (known: {known})")]
    try:
        model.model_validate(params)
    except ValidationError as exc:
        return [
            GraphProblem(
                node_id=node_id,
                message=f"params.{'.'.join(str(p) for p in err['loc']) or '?'}: {err['msg']}",
            )
            for err in exc.errors()
        ]
    return []


def _cycles(graph: Graph) -> list[list[str]]:
    """One representative path for each cycle found by depth-first search."""
    parents = {n.id: [p for p in n.inputs if p != n.id] for n in graph.nodes}
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    found: list[list[str]] = []

    for start in parents:
        if state.get(start):
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        path: list[str] = []
        while stack:
            node, i = stack.pop()
            if i == 0:
                state[node] = 1
                path.append(node)
            succ = parents.get(node, [])
            if i < len(succ):
                stack.append((node, i + 1))
                nxt = succ[i]
                if state.get(nxt) == 1:
                    found.append(list(reversed(path[path.index(nxt):])))
                elif nxt in parents and not state.get(nxt):
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                path.pop()
    return found


def builtin_ops() -> dict[str, type[BaseModel]]:
    """The catalogue of built-in ops, for client-side validation."""
    return dict(BUILTIN_PARAMS)
