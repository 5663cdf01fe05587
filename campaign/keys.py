"""What a campaign's idempotency keys are made of: what decides a variant's images.

A variant's loop and its formats' graph are submitted under keys hashed from their fields, so a
re-run finds the runs it already paid for. Labels, webhook, lane and retention never decide an
image and are left out (:data:`~genloop.sdk.graph.NOT_DRAWN`). A field added to ``Loop`` or
``Graph`` later joins a key only when set away from its default: left at it, every stored
campaign keeps its keys, so a re-run after an upgrade finds its runs (and its reviews, kept by
variant key) instead of paying for every variant again.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, TypeAdapter

from genloop.sdk.graph import NOT_DRAWN

#: The Loop fields every campaign key so far was made of.
LOOP_KEYED = frozenset({
    "budget", "candidates", "draft_candidates", "draft_steps", "evaluator", "evaluator_options",
    "fallback", "guidance", "height", "keep", "kind", "limits", "max_retries", "model",
    "namespace", "prompt", "refine_timeout", "refiner", "rounds", "seed", "steps", "target",
    "width"})
#: The Graph fields every format key so far was made of.
GRAPH_KEYED = frozenset({"kind", "limits", "namespace", "nodes"})

_JSON = TypeAdapter(Any)


def key_fields(model: BaseModel, keyed: frozenset[str]) -> dict[str, Any]:
    """``model`` as JSON for its key: the ``keyed`` fields, and any other field (one added
    since) only when it is set away from its default; never a :data:`NOT_DRAWN` field."""
    dumped = model.model_dump(mode="json", exclude=set(NOT_DRAWN))
    fields = type(model).model_fields
    out = {}
    for name, value in dumped.items():
        field = fields.get(name)
        if name in keyed or field is None or field.is_required():
            out[name] = value
        elif value != _JSON.dump_python(field.get_default(call_default_factory=True),
                                        mode="json"):
            out[name] = value
    return out
