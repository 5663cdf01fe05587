"""A model's identity without its pipeline: the string in every result key made with the
model, from its name and the operator's models config alone.

Why not only on the registry: :class:`~..engine.registry.ModelRegistry` imports torch (seconds
in a fresh process), and an executor makes an instance's result key before any work, to find a
stored result or to claim the work. A re-run whose results are stored needs no model at all,
and a re-run taking up a crashed process's work can claim it while torch loads. The registry
answers with the same function, so the two never disagree.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path

from genloop.sdk.errors import Permanent

from .fingerprint import fingerprint
from .model_folder import FolderProblem, read_folder
from .models_config import ModelsConfig, ShippedShapes, SimulatedModel, shipped_shapes

log = logging.getLogger(__name__)

#: Bump when tiny's configs or seeding change (:mod:`..engine.tiny`): it is part of every
#: result key made with tiny.
TINY_VERSION = "tiny-v1"
#: Bump when what a simulated model draws changes (:mod:`..engine.simulated`).
SIMULATED_VERSION = "simulated-v1"


def simulated_identity(model: SimulatedModel) -> str:
    """Changes with any of the model's settings, so results made under others are not reused."""
    digest = hashlib.sha256(model.model_dump_json().encode()).hexdigest()[:16]
    return f"simulated:{SIMULATED_VERSION}:{digest}"


def shapes_identity(found: ShippedShapes) -> str:
    return f"shapes:{fingerprint(found.path)}"


def builtin_identities() -> dict[str, str]:
    """The identities of the models every registry is built with: ``tiny``, and ``shapes``
    when its weights are in the package."""
    identities = {"tiny": TINY_VERSION}
    found = shipped_shapes()
    if found is not None:
        from genloop import shapes

        identities[shapes.PIPELINE_NAME] = shapes_identity(found)
    return identities


def model_source(name: str, models: ModelsConfig | None) -> str:
    """Where a non-built-in ``name`` loads from; ``Permanent`` if the config lacks it or its
    folder cannot be served (the tenant's message names the model, the log the path)."""
    if models is None:
        if name.startswith(("/", ".")) and not Path(name).is_dir():
            raise Permanent(f"model {name!r}: no such folder")  # trusted code's own path
        return name
    entry = models.models.get(name)
    if entry is None or entry.source is None:
        raise Permanent(f"unknown model {name!r}; allowed: {', '.join(models.names())}")
    if entry.folder is not None:
        try:
            read_folder(entry.folder)
        except FolderProblem as exc:
            log.error("model %s cannot be loaded: %s", name, exc)
            raise Permanent(f"model {name!r} cannot be loaded: {exc.public} (a "
                            "configuration problem; the worker's log names the path)") from None
    return entry.source


def model_identity(name: str, models: ModelsConfig | None, builtin: Mapping[str, str]) -> str:
    """A string that changes whenever the weights behind ``name`` change; ``builtin``: the
    identities of the names registered by code (:func:`builtin_identities` and any more)."""
    if name in builtin:
        return builtin[name]
    entry = models.models.get(name) if models is not None else None
    if entry is not None and entry.simulated is not None:
        return simulated_identity(entry.simulated)
    source = model_source(name, models)
    path = Path(source)
    weights = (f"path:{fingerprint(path)}" if path.is_dir()
               else f"hub:{source}@{_hub_revision(source)}")
    # What the entry changes in every image (precision, class, the default cache) is part of
    # the identity, so changing it never reuses results made the other way.
    settings = "".join(f";{k}={v}" for k, v in (entry.model_dump(
        include={"pipeline", "dtype", "cache"}, exclude_none=True) if entry else {}).items())
    return weights + settings


def _hub_revision(name: str) -> str:
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        cached = try_to_load_from_cache(name, "model_index.json")
    except HFValidationError:  # not a repo id at all: a mistyped path, say
        cached = None
    if isinstance(cached, str):
        return Path(cached).parent.name  # the snapshot's commit hash
    raise Permanent(
        f"model {name!r} is not a built-in model, a local directory, or in the Hugging Face "
        "cache; genloop does not download weights at run time"
    )
