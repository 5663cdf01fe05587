"""Every name a campaign spec uses, checked against what the back end serves before any submit.

A spec names a model, an evaluator and a refiner for its loops, and with ``brand.weight`` the
loops score with ``composite`` over ``loop.evaluator`` and ``brand-palette``. The back end checks
a loop's own fields when it is submitted, but the composite's parts sit inside its evaluator
options, where only the first score node finds them: a misspelt evaluator with a brand weight
had every variant submitted, paid for its images and failed. Checking here, once per campaign,
refuses such a spec before anything is spent.
"""

from __future__ import annotations

from genloop.sdk import Client
from genloop.sdk.schema import Served
from genloop.sdk.validation import loop_name_problems

from .spec import CampaignSpec, CampaignSpecError


def name_problems(spec: CampaignSpec, served: Served) -> list[str]:
    """Names in ``spec`` that ``served`` lacks, each as ``"field: what is wrong"``: the loop's
    by the SDK's own check, which every entry uses (:func:`loop_name_problems`)."""
    s = spec.loop
    problems = [str(p) for p in loop_name_problems(
        {"model": s.model, "evaluator": s.evaluator, "refiner": s.refiner}, served,
        prefix="loop.")]
    served_evaluators = {n.name for n in served.evaluators}
    if spec.brand is not None and spec.brand.weight > 0:
        for part in ("composite", "brand-palette"):
            if part not in served_evaluators:
                problems.append(f"brand.weight: needs the {part!r} evaluator, which this back "
                                f"end does not serve; set brand.weight to 0 or serve it")
    return problems


def check_names(spec: CampaignSpec, client: Client) -> None:
    """Raise :class:`CampaignSpecError` listing every name ``client``'s back end does not serve."""
    problems = name_problems(spec, client.schema().served)
    if problems:
        raise CampaignSpecError(problems)
