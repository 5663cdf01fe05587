"""What the gateway checks on a spec before the back end sees it.

A tenant's spec is data: every model, evaluator and refine strategy it names must be one the
operator registered (and the tenant's own allow-list keeps), every string is bounded, and the
run is costed (its images and its evaluator work) so the tenant's limits apply before anything
is stored. The problems are reported together as one :class:`~genloop.sdk.errors.GraphError`
(422), each with its node id and the names that would have been accepted.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from genloop.evaluators.options import tenant_option_problems
from genloop.evaluators.pricing import score_cost
from genloop.sdk.errors import GraphError, GraphProblem
from genloop.sdk.graph import Graph, Node, RunLimits
from genloop.sdk.loop import Loop
from genloop.sdk.ops import BUILTIN_PARAMS
from genloop.sdk.validation import cache_problems, graph_problems, value_problems

from ..capabilities import model_cache_modes
from ..models_config import ModelsConfig
from ..ops.registry import OpRegistry
from ..planner import ImageSize, RunCost, attempts, image_cost, run_cost
from .limits import TenantLimits

#: A prompt (or any string in a spec) longer than this is refused unless the operator says.
DEFAULT_MAX_PROMPT_CHARS = 4000

#: The engine's defaults for a configured model that leaves them unset (see ModelDefaults).
_ENGINE_DEFAULT = ImageSize(steps=25, width=512, height=512)
_BUILTIN_SIZES = {"tiny": ImageSize(steps=4, width=32, height=32)}


@dataclass
class Admission:
    """The operator's names and bounds; :meth:`check` applies them and a tenant's limits."""

    ops: OpRegistry
    models: ModelsConfig
    evaluators: Callable[[], Sequence[str]]
    strategies: Callable[[], Sequence[str]]
    max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS
    #: Queues some worker consumes; ``None`` when the back end cannot tell.
    queues: Collection[str] | None = None

    def check(self, spec: Graph | Loop, limits: TenantLimits) -> RunCost:
        """The run's cost; ``GraphError`` listing every problem if the spec may not run."""
        loop = spec if isinstance(spec, Loop) else None
        graph = spec.compile() if isinstance(spec, Loop) else spec
        problems = graph_problems(graph, self.ops.catalogue())
        if loop is not None:  # named where the author wrote them, not in the compiled nodes
            problems.extend(self._loop_name_problems(loop, limits))
            problems.extend(self._option_problems(None, loop.evaluator, loop.evaluator_options,
                                                  "evaluator_options", limits))
        for i, node in enumerate(graph.nodes):
            problems.extend(value_problems(node, self.max_prompt_chars))
            if loop is None:
                problems.extend(self._name_problems(i, node, limits))
                if node.op == "score":
                    problems.extend(self._option_problems(
                        node.id, node.params.get("evaluator"), node.params.get("options"),
                        f"nodes[{i}].params.options", limits))
            problems.extend(self._queue_problems(node))
        problems.extend(cache_problems(spec, model_cache_modes(self.models)))
        if problems:
            raise GraphError(_unique(problems))
        return run_cost(graph, self.ops, self.size_of, self.score_cost)

    def run_limits(self, spec: Graph | Loop, limits: TenantLimits) -> RunLimits:
        """The tenant's per-run limits as the scheduler applies them while the run grows (a
        fan-out no plan could see), with each generate node's cost of one image. The spec must
        have passed :meth:`check`."""
        graph = spec.compile() if isinstance(spec, Loop) else spec
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

    def _allowed(self, field: str, limits: TenantLimits) -> list[str]:
        if field == "model":
            return _narrow(self.models.names(), limits.models)
        if field == "evaluator":
            return _narrow(self.evaluators(), limits.evaluators)
        if field == "fallback":  # decides when the agent does not answer: not the agent
            return [s for s in sorted(self.strategies()) if s != "agent"]
        return sorted(self.strategies())

    def _loop_name_problems(self, loop: Loop, limits: TenantLimits) -> list[GraphProblem]:
        found = [("model", loop.model, "model"), ("evaluator", loop.evaluator, "evaluator"),
                 ("refiner", loop.refiner, "strategy"), ("fallback", loop.fallback, "fallback")]
        return [
            GraphProblem(node_id=None, message=f"unknown {field} {value!r}; allowed: "
                         f"{', '.join(allowed) or 'none'}", path=field, received=value,
                         allowed=allowed)
            for field, value, kind in found
            if value is not None and value not in (allowed := self._allowed(kind, limits))
        ]

    def _name_problems(self, index: int, node: Node,
                       limits: TenantLimits) -> list[GraphProblem]:
        """Names outside the operator's (and the tenant's) lists. A name left out is the back
        end's default, which the operator chose, so it needs no check here."""
        if node.op not in BUILTIN_PARAMS:
            return []
        params = node.params
        fields = {"generate": ["model"], "score": ["evaluator"],
                  "refine": ["strategy", "fallback"]}.get(node.op, [])
        found = [(field, params.get(field), self._allowed(field, limits)) for field in fields]
        return [
            GraphProblem(node_id=node.id, message=f"params.{field}: unknown {field} "
                         f"{value!r}; allowed: {', '.join(allowed) or 'none'}",
                         path=f"nodes[{index}].params.{field}", received=value,
                         allowed=list(allowed))
            for field, value, allowed in found
            if value is not None and (not isinstance(value, str) or value not in allowed)
        ]

    def _option_problems(self, node_id: str | None, evaluator: object, options: object,
                         path: str, limits: TenantLimits) -> list[GraphProblem]:
        """Evaluator options are data only: no paths reach a factory (see evaluators.options)."""
        if not options:
            return []
        if not isinstance(options, dict) or not (evaluator is None or isinstance(evaluator, str)):
            return [GraphProblem(node_id=node_id, message=f"{path}: give a mapping", path=path)]
        allowed = self._allowed("evaluator", limits)
        return [GraphProblem(node_id=node_id, message=message, path=path)
                for message in tenant_option_problems(evaluator, options, allowed, path)]

    def _queue_problems(self, node: Node) -> list[GraphProblem]:
        spec = self.ops.get(node.op)
        queue = node.queue or (spec.queue if spec is not None else None)
        if self.queues is None or queue is None or queue in self.queues:
            return []
        return [GraphProblem(node_id=node.id, message=f"no workers consume queue {queue!r}; "
                             f"known: {', '.join(sorted(self.queues))}")]

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


def _narrow(allowed: Sequence[str], tenant: list[str] | None) -> list[str]:
    return sorted(set(allowed) if tenant is None else set(allowed) & set(tenant))


def _unique(problems: list[GraphProblem]) -> list[GraphProblem]:
    seen: dict[tuple[str | None, str], GraphProblem] = {}
    for p in problems:
        seen.setdefault((p.node_id, p.message), p)
    return list(seen.values())


def default_admission(ops: OpRegistry, models: ModelsConfig | None = None,
                      max_prompt_chars: int = DEFAULT_MAX_PROMPT_CHARS,
                      queues: Collection[str] | None = None,
                      evaluators: Callable[[], Sequence[str]] | None = None) -> Admission:
    """``ops`` (the back end's), the evaluators a tenant may name (default: the registered
    ones a tenant can use, :mod:`.judges`), the refine strategies (whatever was imported
    registers more), and ``models`` (the built-ins only by default)."""
    from genloop.evaluators import default_registry

    from ..ops.refine import default_refiners
    from .judges import usable

    def registered() -> list[str]:
        return [name for name, judge in default_registry.listing().items() if usable(judge)]

    return Admission(ops, models or ModelsConfig(), evaluators or registered,
                     default_refiners.names, max_prompt_chars, queues)
