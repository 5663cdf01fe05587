"""What a back end in this process serves, for the spec schema and for filling in defaults.

Names come from the live registries the back end was given: the op registry (custom ops
included), the model registry's built-ins, the evaluator registry, the refine strategies. The
defaults are the operator's choice; unset, the shipped trained ``shapes`` / ``shapes-clip`` when
present (they draw and judge something recognisable), else the first model / evaluator served.
A built-in model may come with a recipe, the Loop settings measured best on it
(``shapes.RECIPE``), which a Loop that sets none of them runs with.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from genloop.sdk.schema import Named, Served

from ..ops.refine import RefinerRegistry
from ..ops.registry import OpRegistry

if TYPE_CHECKING:
    from genloop.evaluators import EvaluatorRegistry

    from .catalogue import PublishedEvaluators

#: Preferred defaults, best first; the random-weight test models come last.
PREFERRED_MODELS = ("shapes", "tiny")
PREFERRED_EVALUATORS = ("shapes-clip", "clip")


def _first_line(text: str | None) -> str:
    return (text or "").strip().split("\n")[0]


def _pick(choice: str | None, preferred: tuple[str, ...], names: list[str]) -> str | None:
    if choice is not None:
        return choice
    return next((n for n in preferred if n in names), names[0] if names else None)


def served(registry: OpRegistry, model_names: dict[str, str],
           evaluators: EvaluatorRegistry | PublishedEvaluators,
           refiners: RefinerRegistry, default_model: str | None = None,
           default_evaluator: str | None = None,
           cache_modes: dict[str, list[str]] | None = None) -> Served:
    """``model_names``: the built-in models (name -> description) of the model registry;
    ``evaluators``: a registry, or a pool's (its workers' published names too)."""
    listed = evaluators.listing()
    evaluator_names = sorted(listed)
    return Served(
        models=[Named(name=n, description=d) for n, d in sorted(model_names.items())],
        evaluators=[listed[n] for n in evaluator_names],
        refiners=[Named(name=n, description=d) for n, d in sorted(refiners.describe().items())],
        ops=[Named(name=n, description=_first_line(registry[n].params.__doc__
                                                   or registry[n].fn.__doc__))
             for n in sorted(registry)],
        default_model=_pick(default_model, PREFERRED_MODELS, sorted(model_names)),
        default_evaluator=_pick(default_evaluator, PREFERRED_EVALUATORS, evaluator_names),
        recipes=_recipes(model_names, evaluator_names),
        cache_modes=cache_modes or {},
    )


def _recipes(model_names: dict[str, str], evaluator_names: list[str]) -> dict[str, dict]:
    """The built-in models' recipes (the best loop measured on each) that this back end can run:
    the model served and the recipe's evaluator too."""
    from genloop import shapes

    recipes = {shapes.PIPELINE_NAME: shapes.RECIPE}
    return {name: dict(recipe) for name, recipe in recipes.items()
            if name in model_names and recipe["evaluator"] in evaluator_names}
