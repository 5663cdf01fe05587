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
from genloop.sdk.schema import Named, Served

from .spec import CampaignSpec, CampaignSpecError


def _unknown(field: str, kind: str, name: str | None, names: list[Named],
             default: str | None = None) -> list[str]:
    known = [n.name for n in names]
    if name is None:
        if kind in ("model", "evaluator") and default is None:
            return [f"{field}: name one; this back end has no default {kind} "
                    f"(served: {', '.join(known) or 'none'})"]
        return []
    # A hub id or a path ("org/name") is for trusted callers to name; the back end loads it.
    if name in known or (kind == "model" and "/" in name):
        return []
    return [f"{field}: unknown {kind} {name!r} (served: {', '.join(known) or 'none'})"]


def name_problems(spec: CampaignSpec, served: Served) -> list[str]:
    """Names in ``spec`` that ``served`` lacks, each as ``"field: what is wrong"``."""
    s = spec.loop
    problems = _unknown("loop.model", "model", s.model, served.models, served.default_model)
    problems += _unknown("loop.evaluator", "evaluator", s.evaluator, served.evaluators,
                         served.default_evaluator)
    problems += _unknown("loop.refiner", "refiner", s.refiner, served.refiners)
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
