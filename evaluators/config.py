"""An operator's own judges, named in the models config beside the models::

    [evaluators.house-clip]                 # an open_clip architecture and its checkpoint
    kind = "open_clip"
    architecture = "ViT-B-32"
    checkpoint = "/srv/judges/house-clip.safetensors"
    description = "CLIP fine-tuned on our catalogue"

    [evaluators.pick]                       # a transformers CLIPModel + CLIPProcessor folder
    kind = "hf_clip"
    path = "/srv/judges/pickscore"

    [evaluators.brand-judge]                # a module that registers the name on import
    kind = "module"
    module = "acme_judges"

Each becomes a name in the worker's evaluator registry that needs nothing from a spec: a
tenant names ``house-clip`` and never sees (or gives) the path. Workers publish the names they
serve (:mod:`genloop.workers.backends.catalogue`), so a client or gateway that never imported
``acme_judges`` still accepts it.

Problems are checked when a worker starts (:func:`judge_problems`: the checkpoint builds on
its architecture, the folder exists, the module imports and registers the name) and again when
a judge is built; a judge that cannot be built is :class:`~genloop.sdk.errors.Permanent`, named
for the tenant, with the path in the worker's log. This module imports no torch; building does.
"""

from __future__ import annotations

import functools
import importlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from genloop.sdk.errors import Permanent

if TYPE_CHECKING:
    from .base import Evaluator
    from .registry import EvaluatorRegistry

log = logging.getLogger(__name__)


class _Judge(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str = Field("", max_length=500, description="what it scores, for the schema")


class OpenClipJudge(_Judge):
    """An open_clip architecture (``open_clip.list_models()``) and a local checkpoint file."""

    kind: Literal["open_clip"]
    architecture: str = Field(min_length=1)
    checkpoint: str = Field(min_length=1)


class HFClipJudge(_Judge):
    """A folder holding a saved ``transformers`` CLIPModel and CLIPProcessor."""

    kind: Literal["hf_clip"]
    path: str = Field(min_length=1)


class ModuleJudge(_Judge):
    """A module that registers the judge's name when imported (``@evaluator`` or
    ``register_evaluator``)."""

    kind: Literal["module"]
    module: str = Field(min_length=1, pattern=r"^[A-Za-z_][\w.]*$")


JudgeEntry = Annotated[OpenClipJudge | HFClipJudge | ModuleJudge, Field(discriminator="kind")]


def resolve_paths(judges: dict[str, Any], base: Path) -> None:
    """Make checkpoint and folder paths absolute: ``~`` expanded, relative ones relative to
    the config file's folder."""
    for entry in judges.values():
        field = {"open_clip": "checkpoint", "hf_clip": "path"}.get(entry.kind)
        if field is not None:
            setattr(entry, field, str((base / Path(getattr(entry, field)).expanduser())
                                      .resolve()))


def register_judges(registry: EvaluatorRegistry, judges: dict[str, Any]) -> None:
    """Make each configured judge a name of ``registry`` (a module judge: import it)."""
    for name, entry in judges.items():
        if entry.kind == "module":
            try:
                importlib.import_module(entry.module)
            except ImportError:
                pass  # judge_problems names it, with the worker's other problems
            continue
        factory = functools.partial(_open_clip if entry.kind == "open_clip" else _hf_clip,
                                    name, entry)
        registry.register(name, factory, replace=True,
                          description=entry.description or f"the operator's {entry.kind} judge")


def judge_problems(registry: EvaluatorRegistry, judges: dict[str, Any]) -> list[str]:
    """Every configured judge that cannot be served, one line each with its path: a module
    that does not import or register its name, a checkpoint that does not build on its
    architecture, a missing folder. Builds each judge on the CPU (cached in ``registry``)."""
    problems = []
    for name, entry in judges.items():
        try:
            if entry.kind == "module":
                importlib.import_module(entry.module)
                if name not in registry.names():
                    problems.append(f"evaluators.{name}: module {entry.module!r} registers no "
                                    f"evaluator called {name!r}")
            else:
                registry.get(name, device="cpu")
        except (ImportError, Permanent) as exc:
            problems.append(f"evaluators.{name}: {getattr(exc, 'detail', exc)}")
    return problems


def _open_clip(name: str, entry: OpenClipJudge, device: str, **options: Any) -> Evaluator:
    """open_clip with the operator's checkpoint."""
    from .openclip import OpenClipEvaluator

    if not Path(entry.checkpoint).is_file():
        raise _unavailable(name, f"no checkpoint file at {entry.checkpoint}")
    try:
        return OpenClipEvaluator(model=entry.architecture, pretrained=entry.checkpoint,
                                 device=device, **options)
    except (Permanent, OSError) as exc:  # another architecture's weights: Permanent there
        raise _unavailable(name, f"checkpoint {entry.checkpoint} does not load as "
                           f"{entry.architecture}: {exc}") from None


def _hf_clip(name: str, entry: HFClipJudge, device: str, **options: Any) -> Evaluator:
    """transformers CLIP from the operator's folder."""
    from .hf_clip import HFClipEvaluator

    try:
        return HFClipEvaluator(path=entry.path, device=device, **options)
    except (Permanent, OSError, ValueError) as exc:
        raise _unavailable(name, f"folder {entry.path}: {exc}") from None


def _unavailable(name: str, detail: str) -> Permanent:
    """The tenant's error names the judge; the operator's log line says where and why."""
    log.error("judge %s cannot be built: %s", name, detail)
    error = Permanent(f"judge {name!r} cannot be loaded on this worker (a configuration "
                      "problem; the worker's log says what)")
    error.detail = detail  # type: ignore[attr-defined]
    return error
