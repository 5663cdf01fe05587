"""Admission: the one check a spec passes before it is stored, whoever sends it.

:func:`admit` fills in the back end's defaults, compiles a Loop once, and checks in one pass
everything that stops the spec from running here: the graph's structure and params, queues no
worker consumes, and the names it holds against what the back end serves. Every problem is
reported at once, in one order (the graph's own, its queues, names, then the policy's). The
back ends in this process call it trusted (``Client.local``, ``Client.connect``, and the CLI,
agent tools and campaigns through them); the gateway calls it with its tenant's
:class:`Policy`: a narrower offer, untrusted names, and checks of its own (values, options).
What it returns is stored as it is (:meth:`Scheduler.start`): nothing is checked again.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from genloop.sdk.errors import GraphError, GraphProblem
from genloop.sdk.graph import Graph
from genloop.sdk.loop import Loop
from genloop.sdk.schema import Served, fill_defaults
from genloop.sdk.validation import graph_problems, name_problems

from ..ops.registry import OpRegistry


class Policy(Protocol):
    """What an untrusted sender (a gateway's tenant) is held to beyond the back end's own
    checks."""

    def offer(self, served: Served) -> Served:
        """What the sender may name of what the back end serves."""
        ...

    def problems(self, spec: Graph | Loop, graph: Graph, offer: Served) -> list[GraphProblem]:
        """The policy's own problems with ``spec`` (as written) compiled to ``graph``."""
        ...


@dataclass(frozen=True)
class Admitted:
    """A spec that may run: with the back end's defaults filled in, and the graph it compiles
    to (the spec itself for a Graph)."""

    spec: Graph | Loop
    graph: Graph


def admit(spec: Graph | Loop, served: Served, registry: OpRegistry,
          queues: Collection[str] | None, policy: Policy | None = None) -> Admitted:
    """``spec`` admitted against what a back end serves (``served``, its ``registry`` of ops and
    the ``queues`` its workers consume, ``None`` when it cannot tell), or ``GraphError`` listing
    every problem. Names are checked where the author wrote them (a Loop's own fields, not its
    compiled nodes')."""
    filled = fill_defaults(spec, served)
    graph = filled.compile() if isinstance(filled, Loop) else filled
    problems = runnable_problems(graph, registry, queues)
    if policy is None:  # a trusted sender: its defaults are its own, checked like the rest
        problems.extend(name_problems(filled, served))
    else:  # a tenant: what it wrote, against its offer (an unset name is the operator's)
        offer = policy.offer(served)
        problems.extend(name_problems(spec, offer, trusted=False))
        problems.extend(policy.problems(spec, graph, offer))
    if problems:
        raise GraphError(_unique(problems))
    return Admitted(filled, graph)


def runnable_problems(graph: Graph, registry: OpRegistry,
                      queues: Collection[str] | None) -> list[GraphProblem]:
    """What stops ``graph`` from running here, names aside: its structure, its ops' params,
    and queues no worker consumes (``queues``; ``None`` when the back end cannot tell)."""
    problems = graph_problems(graph, registry.catalogue())
    if queues is not None:
        problems.extend(registry.queue_problems(graph, queues))
    return problems


def _unique(problems: list[GraphProblem]) -> list[GraphProblem]:
    """One of each problem (a Loop's field and its compiled nodes may report the same)."""
    seen: dict[tuple[str | None, str | None, str], GraphProblem] = {}
    for p in problems:
        seen.setdefault((p.node_id, p.path, p.message), p)
    return list(seen.values())
