"""What scoring one image costs, in the megapixel-steps that runs are costed in.

A tenant chooses how much evaluator work a run does: how many score nodes, which evaluators, a
composite's parts, a brand palette's length. The gateway counts that work against the same
limits as generation (:func:`genloop.workers.runtime.planner.run_cost`), so one image scored by a
thousand score nodes with a thousand option sets costs a thousand scorings, not one image.

One evaluator pass over one image is priced at :data:`PASS_COST`. A CLIP-class image encoder
at 224x224 takes 4.4 GFLOPs (ViT-B/32) to 81 GFLOPs (ViT-L/14); one megapixel-step of a
Stable Diffusion 1.5 UNet with guidance takes about 2.6 TFLOPs, so a pass is 0.002 to 0.03
megapixel-steps: the price is the top of that range, under 0.1% of a 512x512 25-step image, so
it changes nothing for a real loop. A brand palette adds what its length costs: each colour is
compared with every image's dominant colours, and 10,000 colours (measured: a 90,000-colour
palette scored a 512x512 image in 4.4 s against 0.46 s for one colour) cost one more pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .weights import counts

#: Megapixel-steps of one evaluator pass over one image.
PASS_COST = 0.03
#: Palette colours that cost as much as one more pass.
COLOURS_PER_PASS = 10_000


def score_cost(name: str | None, options: Mapping[str, Any] | None) -> float:
    """Megapixel-steps of scoring one image with evaluator ``name`` (``None``: the back end's
    default) and ``options``, without retries: a composite or an ensemble costs its weighted
    parts, a brand palette one pass plus its colours. ``options`` must have passed admission's
    checks."""
    options = options or {}
    if name in ("composite", "ensemble"):
        weights, parts = options.get("weights") or {}, options.get("options") or {}
        # A part whose weight counts for nothing is never built. A weight that is no number
        # fails the run at its first score, so pricing it too errs on the side of the limit.
        return sum(score_cost(part, parts.get(part)) for part, weight in weights.items()
                   if not isinstance(weight, (int, float)) or counts(name, weight))
    if name == "brand-palette":
        return PASS_COST * (1 + len(options.get("palette") or ()) / COLOURS_PER_PASS)
    return PASS_COST
