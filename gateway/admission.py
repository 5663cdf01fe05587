"""What the gateway checks on a spec before the back end sees it.

A tenant's spec is data: every model, evaluator and refine strategy it names must be one the
operator registered (and the tenant's own allow-list keeps), every string is bounded, and the
run is costed (its images and its evaluator work) so the tenant's limits apply before anything
is stored. The problems are reported together as one :class:`~genloop.sdk.errors.GraphError`
(422), each with its node id and the names that would have been accepted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from genloop.evaluators.options import tenant_option_problems
from genloop.evaluators.pricing import score_cost
from genloop.sdk.errors import GraphProblem
from genloop.sdk.graph import Graph, Node, RunLimits
from genloop.sdk.loop import Loop
from genloop.sdk.schema import Named, Served
from genloop.sdk.validation import value_problems
from genloop.workers.models.capabilities import model_cache_modes
from genloop.workers.models.models_config import ModelsConfig
from genloop.workers.ops.registry import OpRegistry
from genloop.workers.runtime.admission import admit
from genloop.workers.runtime.planner import ImageSize, RunCost, attempts, image_cost, run_cost

from .judges import tenant_judges
from .limits import TenantLimits

#: A prompt (or any string in a spec) longer than this is refused unless the operator says.
DEFAULT_MAX_PROMPT_CHARS = 4000

#: The engine's defaults for a configured model that leaves them unset (see ModelDefaults).
_ENGINE_DEFAULT = ImageSize(steps=25, width=512, height=512)
_BUILTIN_SIZES = {"tiny": ImageSize(steps=4, width=32, height=32)}


@dataclass(frozen=True)
class Plan:
    """An admitted spec: the spec with the back end's defaults filled in and the graph it
    compiles to (compiled once, here: the back end stores both without checking again), what
    it costs, checked against the tenant's limits before it is stored, and the limits the
    scheduler applies while the run grows (a fan-out no plan could see)."""

    spec: Graph | Loop
    graph: Graph
    cost: RunCost
    limits: RunLimits


@dataclass
class Admission:
    """The operator's names and bounds; :meth:`admit` applies them and a tenant's limits."""

    ops: OpRegistry
    models: ModelsConfig
    #: What the back end serves (its judges, strategies and defaults), read at each check: a
    #: pool's workers publish theirs as they start.
    served: Callable[[], Served]
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS
    #: Queues some worker consumes; ``None`` when the back end cannot tell.
    queues: Collection[str] | None = None

    def admit(self, spec: Graph | Loop, limits: TenantLimits) -> Plan:
        """The run's plan: the spec admitted by the runtime's one check
        (:func:`~genloop.workers.runtime.admission.admit`) under the tenant's policy, then
        costed; ``GraphError`` listing every problem if the spec may not run."""
        policy = TenantPolicy(self.models.names(), limits, self.max_prompt_chars)
        admitted = admit(spec, self.served(), self.ops, self.queues, policy)
        graph = admitted.graph
        return Plan(admitted.spec, graph, run_cost(graph, self.ops, self.size_of, self.score_cost),
                    self._run_limits(graph, limits))

    def _run_limits(self, graph: Graph, limits: TenantLimits) -> RunLimits:
        """The tenant's per-run limits, with each generate node's cost of one image and steps,
        and each score node's cost of one score."""
        image_costs, image_steps, score_costs = {}, {}, {}
        for node in graph.nodes:
            if node.op in ("generate", "score"):
                op = self.ops[node.op]
                # The op's own params model (generate's has model and steps).
                params: Any = op.params.model_validate(node.params)
            if node.op == "generate":
                image_costs[node.id] = image_cost(node, op, params, self.size_of)
                image_steps[node.id] = params.steps or self.size_of(params.model).steps
            elif node.op == "score":
                score_costs[node.id] = self.score_cost(node, params) * attempts(node, op)
        return RunLimits(items=limits.max_candidates_per_run,
                         images=limits.max_candidates_per_run, cost=limits.max_cost_per_run,
                         image_costs=image_costs, image_steps=image_steps,
                         score_costs=score_costs)

    def score_cost(self, node: Node, params: object) -> float:
        """Megapixel-steps of scoring one image at score node ``node`` (see
        :mod:`genloop.evaluators.pricing`)."""
        return score_cost(getattr(params, "evaluator", None), getattr(params, "options", None))

    def size_of(self, model: str) -> ImageSize:
        entry = self.models.models.get(model)
        base = _BUILTIN_SIZES.get(model, _ENGINE_DEFAULT)
        if entry is None:
            return base
        width, height = entry.size()  # the folder's native size where the entry gives none
        return ImageSize(steps=entry.steps or base.steps, width=width or base.width,
                         height=height or base.height)


@dataclass(frozen=True)
class TenantPolicy:
    """What a tenant is held to beyond the back end's own checks (the runtime admission's
    ``Policy``): the operator's models and the judges a tenant can use, each narrowed by its
    allow-list; strings and numbers within bounds; evaluator options that are data only."""

    models: Sequence[str]
    limits: TenantLimits
    max_prompt_chars: int

    def offer(self, served: Served) -> Served:
        """What the tenant may name of what the back end serves: the models and judges (see
        :mod:`.judges`) narrowed, the back end's refine strategies and cache modes."""
        return served.model_copy(update={
            "models": [Named(name=n) for n in _narrow(self.models, self.limits.models)],
            "evaluators": tenant_judges(served, self.limits.evaluators)})

    def problems(self, spec: Graph | Loop, graph: Graph, offer: Served) -> list[GraphProblem]:
        problems = []
        judges = [j.name for j in offer.evaluators]
        if isinstance(spec, Loop):
            problems.extend(_option_problems(None, spec.evaluator, spec.evaluator_options,
                                             "evaluator_options", judges))
        for i, node in enumerate(graph.nodes):
            problems.extend(value_problems(node, self.max_prompt_chars))
            if node.op == "score" and isinstance(spec, Graph):
                params = spec.nodes[i].params  # as written: the filled evaluator is the default
                problems.extend(_option_problems(
                    node.id, params.get("evaluator"), params.get("options"),
                    f"nodes[{i}].params.options", judges))
        return problems


def _option_problems(node_id: str | None, evaluator: object, options: object, path: str,
                     allowed: list[str]) -> list[GraphProblem]:
    """Evaluator options are data only: no paths reach a factory (see evaluators.options).
    ``allowed``: the judges the tenant may name."""
    if not options:
        return []
    if not isinstance(options, dict) or not (evaluator is None or isinstance(evaluator, str)):
        return [GraphProblem(node_id=node_id, message="give a mapping", path=path)]
    return [GraphProblem(node_id=node_id, message=message, path=where)
            for where, message in tenant_option_problems(evaluator, options, allowed, path)]


def _narrow(allowed: Sequence[str], tenant: list[str] | None) -> list[str]:
    return sorted(set(allowed) if tenant is None else set(allowed) & set(tenant))


def default_admission(ops: OpRegistry, models: ModelsConfig | None = None,
                      max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS,
                      queues: Collection[str] | None = None,
                      served: Callable[[], Served] | None = None) -> Admission:
    """``ops`` (the back end's), ``served`` (what the back end serves; default: this process's
    registered judges and refine strategies over ``ops``) and ``models`` (the models tenants
    may name: the built-ins only by default)."""
    models = models or ModelsConfig()
    if served is None:
        from genloop.evaluators import default_registry
        from genloop.workers.backends.served import served as serving
        from genloop.workers.ops.refine import default_refiners

        served = functools.partial(serving, ops, dict.fromkeys(models.names(), ""),
                                   default_registry, default_refiners,
                                   cache_modes=model_cache_modes(models))
    return Admission(ops, models, served, max_prompt_chars, queues)
