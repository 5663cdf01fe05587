"""Graph validation: every problem at once, each with its node id, JSON path, the value received
and what is allowed, so whoever wrote the spec (often a model) can fix it in one go.

To add a check, append :class:`GraphProblem` s to the list in :func:`graph_problems` (or a
function it calls): nothing stops at the first problem.

Structural checks need nothing but the graph. Op checks need a catalogue of the ops the workers
know (name -> params model); the SDK knows the built-ins, a worker pool knows its registry too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from .errors import GraphError, GraphProblem
from .graph import Graph, Node
from .loop import Loop
from .schema import Served

#: Largest graph genloop accepts in one submission.
MAX_NODES_PER_GRAPH = 2_000


def graph_problems(
    graph: Graph, ops: Mapping[str, type[BaseModel]] | None = None,
    served: Served | None = None,
) -> list[GraphProblem]:
    """All problems of ``graph``; empty when it is valid.

    ``ops`` maps each known op name to its params model; ``None`` skips the op checks (a client
    that does not know the workers' custom ops leaves them to the server). ``served`` adds the
    name checks (:func:`name_problems`). Each problem carries a JSON path into the graph.
    """
    problems: list[GraphProblem] = []

    def problem(node_id: str | None, message: str, path: str | None = None, *,
                received: Any = None, allowed: Any = None) -> None:
        problems.append(GraphProblem(node_id=node_id, message=message, path=path,
                                     received=_jsonable(received), allowed=_jsonable(allowed)))

    if not graph.nodes:
        problem(None, "the graph has no nodes", "nodes", allowed="at least one node")
    if len(graph.nodes) > MAX_NODES_PER_GRAPH:
        problem(None, f"{len(graph.nodes)} nodes; at most {MAX_NODES_PER_GRAPH} are allowed",
                "nodes", allowed=f"at most {MAX_NODES_PER_GRAPH} nodes")

    # Values no spec may hold: one quick look at the whole graph, a walk only if it finds some.
    fields = list(Node.model_fields)
    suspect = bool(bad_values([[getattr(n, f) for f in fields] for n in graph.nodes]))
    ids: set[str] = set()
    for i, node in enumerate(graph.nodes):
        if node.id in ids:
            problem(node.id, "duplicate node id", f"nodes[{i}].id", received=node.id,
                    allowed="an id no other node has")
        ids.add(node.id)

    for i, node in enumerate(graph.nodes):
        at = f"nodes[{i}]"
        for j, parent in enumerate(node.inputs):
            if parent not in ids:
                problem(node.id, f"input {parent!r} is not a node of this graph",
                        f"{at}.inputs[{j}]", received=parent, allowed=sorted(ids - {node.id}))
            if parent == node.id:
                problem(node.id, "a node cannot be its own input", f"{at}.inputs[{j}]",
                        received=parent)
        if len(set(node.inputs)) != len(node.inputs):
            problem(node.id, "the same input is listed twice", f"{at}.inputs",
                    received=node.inputs)
        if node.map and len(node.inputs) != 1:
            problem(node.id, "map=True needs exactly one input to map over", f"{at}.inputs",
                    received=node.inputs, allowed="exactly one node id")
        if (
            node.min_backoff is not None
            and node.max_backoff is not None
            and node.min_backoff > node.max_backoff
        ):
            problem(node.id, "min_backoff is larger than max_backoff", f"{at}.min_backoff",
                    received=node.min_backoff, allowed=f"at most max_backoff ({node.max_backoff})")
        if ops is not None:
            problems.extend(_op_problems(i, node, ops))
        if suspect:
            problems.extend(value_problems(node))

    for cycle in _cycles(graph):
        problem(cycle[0], "cycle: " + " -> ".join(cycle + [cycle[0]]), "nodes",
                allowed="a graph without cycles")
    if served is not None:
        problems.extend(name_problems(graph, served))
    return problems


def validate_graph(graph: Graph, ops: Mapping[str, type[BaseModel]] | None = None,
                   served: Served | None = None) -> None:
    """Raise :class:`GraphError` listing every problem of ``graph``, if it has any."""
    problems = graph_problems(graph, ops, served)
    if problems:
        raise GraphError(problems)


def value_problems(node: Node, max_string: int | None = None) -> list[GraphProblem]:
    """Values no spec may hold, wherever they sit in a node (see :func:`bad_values`)."""
    return [GraphProblem(node_id=node.id, message=f"{where}: {message}")
            for name in Node.model_fields
            for where, message in bad_values(getattr(node, name), name, max_string)]


def bad_values(value: Any, where: str = "", max_string: int | None = None
               ) -> list[tuple[str, str]]:
    """``(path, why)`` for each value that no spec or stored record may hold: non-finite floats
    (JSON cannot carry them, so they would be stored as null or not parse back), strings that
    are not valid Unicode (lone surrogates cannot be encoded to store or send), and, with
    ``max_string``, strings longer than that (a long prompt is copied into every candidate of
    a node). The gateway's admission refuses a spec with any; the sweeper quarantines a stored
    record with any, so that it cannot trip recovery for everyone."""
    if max_string is None:
        try:  # what nearly every value is, found at C speed: nothing to report
            json.dumps(value, allow_nan=False, ensure_ascii=False).encode("utf-8")
            return []
        except (TypeError, ValueError, UnicodeEncodeError):
            pass  # something to report (or a value JSON cannot hold): walk it to say where
    found: list[tuple[str, str]] = []

    def walk(value: Any, where: str) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            found.append((where, f"{value} is not a finite number"))
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                found.append((where, "not valid Unicode (a lone surrogate)"))
            if max_string is not None and len(value) > max_string:
                found.append((where, f"{len(value)} characters; at most {max_string} allowed"))
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(key, where)
                walk(item, f"{where}.{key}" if isinstance(key, str) and where else
                     key if isinstance(key, str) else where)
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                walk(item, f"{where}[{i}]")

    walk(value, where)
    return found


@dataclass(frozen=True)
class NamedField:
    """A spec field that names one of what a back end serves: a row of :data:`NAMED_FIELDS`."""

    op: str  #: the graph op whose params hold it
    param: str  #: its name in those params
    loop: str  #: its name on a Loop
    kind: str  #: the :class:`Served` list it names one of
    #: the :class:`Served` attribute whose name fills it when unset; ``None``: unset is the
    #: op's own choice, never a problem
    default: str | None = None
    #: names of that list this field may not take
    excluded: frozenset[str] = frozenset()
    #: the refine strategy the field is read under (``None``: always read); under another the
    #: field is never used, so not checked
    strategy: str | None = None


#: Every name a spec may hold, checked by :func:`name_problems` for every entry (the SDK's
#: back ends, the gateway's admission narrowed to a tenant, campaigns): a new kind of name is
#: one row here.
NAMED_FIELDS = (
    NamedField("generate", "model", "model", "models", default="default_model"),
    NamedField("score", "evaluator", "evaluator", "evaluators", default="default_evaluator"),
    NamedField("refine", "strategy", "refiner", "refiners"),
    # decides when the agent does not answer: never the agent
    NamedField("refine", "fallback", "fallback", "refiners", excluded=frozenset({"agent"}),
               strategy="agent"),
)


def _name_problem(row: NamedField, field: str, name: Any, served: Served, trusted: bool, *,
                  node_id: str | None, path: str) -> GraphProblem | None:
    """``field`` is the row's name where the spec holds it (a param or a Loop field)."""
    allowed = [n.name for n in getattr(served, row.kind) if n.name not in row.excluded]
    if name is None:
        if row.default is None or getattr(served, row.default) is not None:
            return None
        return GraphProblem(node_id=node_id, message=f"no {field} named, and this back end "
                            f"has no default {field}", path=path, allowed=allowed)
    if not isinstance(name, str) or name in allowed:
        return None  # a value of another type is the op's params check's to report
    # A path or a hub id ("org/name") is for trusted callers to name (Client.local, a pool's
    # clients, workers); a tenant names only what the operator listed.
    if trusted and row.kind == "models" and "/" in name:
        return None
    return GraphProblem(node_id=node_id, message=f"unknown {field} {name!r}; allowed: "
                        f"{', '.join(allowed) or 'none'}", path=path, received=name,
                        allowed=allowed)


def loop_name_problems(fields: Mapping[str, Any], served: Served, *, prefix: str = "",
                       trusted: bool = True) -> list[GraphProblem]:
    """The problems of a Loop's named fields, given as ``fields`` (Loop field -> value; a field
    left out is unset), each path ``prefix`` + the field."""
    found = [_name_problem(row, row.loop, fields.get(row.loop), served, trusted, node_id=None,
                           path=prefix + row.loop) for row in NAMED_FIELDS
             if row.strategy in (None, fields.get("refiner"))]
    return [p for p in found if p is not None]


def name_problems(spec: Graph | Loop, served: Served, *,
                  trusted: bool = True) -> list[GraphProblem]:
    """Names a spec holds that ``served`` lacks (models, evaluators, refine strategies, step
    cache modes), and models or evaluators left unset where it has no default to fill in.
    ``trusted`` callers may also name a model by path or hub id."""
    if isinstance(spec, Loop):
        found = loop_name_problems({row.loop: getattr(spec, row.loop) for row in NAMED_FIELDS},
                                   served, trusted=trusted)
    else:
        found = [p for i, node in enumerate(spec.nodes) for row in NAMED_FIELDS
                 if node.op == row.op and row.strategy in (None, node.params.get("strategy"))
                 and (p := _name_problem(
                     row, row.param, node.params.get(row.param), served, trusted,
                     node_id=node.id, path=f"nodes[{i}].params.{row.param}")) is not None]
    return found + cache_problems(spec, served.cache_modes, served.default_model)


def cache_problems(spec: Graph | Loop, cache_modes: Mapping[str, list[str]],
                   default_model: str | None = None) -> list[GraphProblem]:
    """Step cache modes a spec asks of a model whose architecture cannot run them, where the
    back end knows the model's (``cache_modes``: model -> the modes it runs, as
    ``Served.cache_modes``); ``default_model`` is the one a spec naming none gets."""
    def problem(node_id: str | None, path: str, model: Any, mode: Any) -> GraphProblem | None:
        model = model or default_model  # a spec that names none runs the default
        allowed = cache_modes.get(model or "")
        if allowed is None or not isinstance(mode, str) or mode.partition(":")[0] in allowed:
            return None
        return GraphProblem(node_id=node_id, message=f"model {model!r} cannot run cache mode "
                            f"{mode!r}; it runs {', '.join(allowed)}", path=path,
                            received=mode, allowed=allowed)

    if isinstance(spec, Loop):
        found = [problem(None, "cache", spec.model, spec.cache)]
    else:
        found = [problem(node.id, f"nodes[{i}].params.cache", node.params.get("model"),
                         node.params.get("cache", "default"))
                 for i, node in enumerate(spec.nodes) if node.op == "generate"]
    return [p for p in found if p is not None]


_RULES = {"ge": ">= {}", "gt": "> {}", "le": "<= {}", "lt": "< {}", "multiple_of":
          "a multiple of {}", "min_length": "length >= {}", "max_length": "length <= {}",
          "pattern": "a string matching {}", "expected": "{}"}


def _allowed(err: Any, model: type[BaseModel]) -> Any:
    if err["type"] == "extra_forbidden" and len(err["loc"]) == 1:
        return sorted(model.model_fields)
    rules = [_RULES[k].format(v) for k, v in err.get("ctx", {}).items() if k in _RULES]
    return ", ".join(rules) or None


def validation_problems(exc: ValidationError, prefix: str, node_id: str,
                        model: type[BaseModel]) -> list[GraphProblem]:
    """A node's params' pydantic error as problems: the path (under ``prefix``, the params'
    own), the value received, the rule it broke (for an unknown field of ``model``, the fields
    it has)."""
    out = []
    for err in exc.errors():
        path = prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"])
        allowed = _allowed(err, model)
        received = err.get("input") if err["type"] != "missing" else None
        out.append(GraphProblem(node_id=node_id, message=err["msg"], path=path,
                                received=_jsonable(received), allowed=_jsonable(allowed)))
    return out


def _op_problems(
    i: int, node: Node, ops: Mapping[str, type[BaseModel]]
) -> list[GraphProblem]:
    model = ops.get(node.op)
    if model is None:
        known = sorted(ops)
        return [GraphProblem(node_id=node.id, message=f"unknown op {node.op!r}",
                             path=f"nodes[{i}].op", received=node.op, allowed=known)]
    try:
        model.model_validate(node.params)
    except ValidationError as exc:
        return validation_problems(exc, f"nodes[{i}].params", node.id, model)
    return []


def _jsonable(value: Any) -> Any:
    try:
        return to_jsonable_python(value)
    except Exception:  # noqa: BLE001 - anything pydantic cannot render is shown as text
        return repr(value)


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
