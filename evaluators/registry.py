"""Finding evaluators by name: a registry of factories and the instances they built.

Workers receive an evaluator *name* in a node's params, the way they receive a custom op's name,
and need the loaded model behind it without loading it twice. A registry maps names to factories
(cheap, registered at import) and caches the instances (expensive, built on first ``get`` and kept
per ``(name, device, options)``).

The default registry (:data:`default_registry`) holds only factories until something asks for a
model, so importing genloop.evaluators loads no weights and does not even import torch.

Built-in names: ``clip`` (open_clip; the default), ``shapes-clip`` (open_clip trained on the
shapes world, shipped in the package), ``hf-clip`` (transformers CLIP from a local path),
``aesthetic`` (a LAION-style head on CLIP image embeddings), ``composite`` (a weighted sum),
``ensemble`` (judges combined with learned weights into a probability),
``clause-critic`` / ``shapes-critic`` (per-clause scores over ``clip`` / ``shapes-clip``),
``vlm-judge`` (yes/no questions to a hosted vision-language model the operator configures),
``shapes-vqa`` (yes/no questions to a small model trained on the shapes world, shipped),
``shapes-reader`` (a small model that reads a shapes image as the pixel checker does, shipped).
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from PIL import Image

from genloop.sdk.errors import Permanent
from genloop.sdk.schema import Named

from .base import Evaluator, Scores, check_finite
from .vlm_env import vlm_unset

#: Builds an evaluator for a resolved device string and the options given to ``get``.
Factory = Callable[..., Evaluator]
#: What a name needs before it works alone (see :meth:`EvaluatorRegistry.needs`): a fixed list
#: of options, or a function that says what is missing now (an unset environment variable).
Needs = Sequence[str] | Callable[[], Sequence[str]]
T = TypeVar("T")


#: Evaluators kept built at once. Options are part of the key and a tenant chooses them (a brand
#: palette), so the cache is bounded: the least recently used evaluator goes first.
MAX_INSTANCES = 32


class EvaluatorRegistry:
    """Names to factories, plus a bounded cache (LRU) of the evaluators built from them."""

    def __init__(self, max_instances: int = MAX_INSTANCES) -> None:
        self._factories: dict[str, Factory] = {}
        self._needs: dict[str, Needs] = {}
        self._descriptions: dict[str, str] = {}
        # An OrderedDict as the LRU: lookups and inserts already happen under our lock (the
        # per-key build locks need that), so a cache library would add nothing.
        self._instances: OrderedDict[tuple[str, str, str], Evaluator] = OrderedDict()
        self.max_instances = max_instances
        # One lock for the maps, held briefly; one per key, held while that model loads, so a
        # slow load neither blocks scoring with models already built nor happens twice.
        self._lock = threading.Lock()
        self._building: dict[tuple[str, str, str], threading.Lock] = {}

    def register(self, name: str, factory: Factory, *, replace: bool = False,
                 needs: Needs = (), description: str | None = None) -> None:
        """Make ``factory`` reachable as ``name``; ``replace=True`` to override an existing one.
        ``needs``: the options it cannot be built without (see :meth:`needs`);
        ``description``: what it scores (default: the factory's docstring)."""
        if not isinstance(name, str) or not name.strip():
            raise Permanent(f"evaluator name must be a non-empty string, got {name!r}")
        with self._lock:
            if name in self._factories and not replace and self._factories[name] is not factory:
                raise Permanent(f"evaluator {name!r} is already registered; pass replace=True")
            self._factories[name] = factory
            self._needs[name] = needs
            self._descriptions.pop(name, None)
            if description is not None:
                self._descriptions[name] = description
            for key in [k for k in self._instances if k[0] == name]:
                del self._instances[key]

    def unregister(self, name: str) -> None:
        """Forget ``name`` and any evaluator built from it."""
        with self._lock:
            self._factories.pop(name, None)
            self._needs.pop(name, None)
            self._descriptions.pop(name, None)
            for key in [k for k in self._instances if k[0] == name]:
                del self._instances[key]

    def names(self) -> list[str]:
        """Registered names, sorted."""
        with self._lock:
            return sorted(self._factories)

    def describe(self, name: str) -> str:
        """The description ``name`` was registered with, else the first paragraph of its
        factory's docstring, on one line (published in the spec schema)."""
        with self._lock:
            factory = self._factories[name]
            if name in self._descriptions:
                return self._descriptions[name]
        doc = getattr(getattr(factory, "func", factory), "__doc__", None) or ""
        return " ".join(doc.strip().split("\n\n")[0].split())

    def needs(self, name: str) -> list[str]:
        """What ``name`` cannot be built without and no one has supplied yet: options a caller
        must give (``hf-clip``'s ``path``), or operator settings missing now (``vlm-judge``'s
        environment). Empty for a name that works alone; published in the spec schema, so an
        agent's tools can leave out what a call could not use."""
        with self._lock:
            needs = self._needs.get(name, ())
        return list(needs() if callable(needs) else needs)

    def listing(self) -> dict[str, Named]:
        """Every name with its description and needs, as the spec schema lists them."""
        return {name: Named(name=name, description=self.describe(name), needs=self.needs(name))
                for name in self.names()}

    def get(self, name: str, device: str | None = None, **options: Any) -> Evaluator:
        """The evaluator for ``name`` on ``device``, built on first use and cached afterwards.

        ``device=None`` means CUDA if available, else CPU. ``options`` go to the factory (for
        ``clip``: ``model``, ``pretrained``, ``dtype``...) and are part of the cache key.
        """
        with self._lock:
            factory = self._factories.get(name)
            known = ", ".join(sorted(self._factories)) or "none"
        if factory is None:
            raise Permanent(f"unknown evaluator {name!r}; known evaluators: {known}")
        resolved = _default_device() if device is None else str(device)
        key = (name, resolved, json.dumps(options, sort_keys=True, default=repr))
        with self._lock:
            if key in self._instances:
                self._instances.move_to_end(key)
                return self._instances[key]
            building = self._building.setdefault(key, threading.Lock())
        with building:
            with self._lock:
                if key in self._instances:  # another thread built it while we waited
                    return self._instances[key]
            built = factory(resolved, **options)
            if not isinstance(built, Evaluator):
                raise Permanent(
                    f"factory of {name!r} returned {type(built).__name__}, not an Evaluator"
                )
            with self._lock:
                if self._factories.get(name) is factory:  # not replaced while it loaded
                    self._instances[key] = built
                    while len(self._instances) > self.max_instances:
                        self._instances.popitem(last=False)
                self._building.pop(key, None)
            return built

    def clear_cache(self) -> None:
        """Drop every built evaluator (and its model); factories stay registered."""
        with self._lock:
            self._instances.clear()


class FunctionEvaluator(Evaluator):
    """A plain function ``fn(images, text) -> scores`` wearing the Evaluator interface.

    Its identity is ``"{name}:{version}"``: bump ``version`` whenever the function's numbers
    change, or results stored under the old identity will be reused.
    """

    def __init__(
        self,
        name: str,
        fn: Callable[[list[Image.Image], str], Sequence[float]],
        *,
        version: str = "1",
        needs_text: bool = True,
        device: str = "cpu",
    ) -> None:
        self.fn = fn
        self.identity = f"{name}:{version}"
        self.needs_text = needs_text
        self.device = device

    def _score(self, images: list[Image.Image], text: str) -> Scores:
        values = [float(v) for v in self.fn(images, text)]
        if len(values) != len(images):
            raise Permanent(
                f"{self.identity} returned {len(values)} scores for {len(images)} images"
            )
        check_finite(values)
        return Scores(values=values, embeddings=None, evaluator=self.identity)


def evaluator(
    name: str,
    *,
    version: str = "1",
    needs_text: bool = True,
    registry: EvaluatorRegistry | None = None,
) -> Callable[[T], T]:
    """Register a user evaluator under ``name``; returns the decorated object unchanged.

    Decorate either an :class:`Evaluator` subclass (built as ``cls(device=..., **options)``) or a
    function ``fn(images, text) -> list[float]`` (wrapped in :class:`FunctionEvaluator`)::

        @evaluator("brightness", version="2", needs_text=False)
        def brightness(images, text):
            return [ImageStat.Stat(im.convert("L")).mean[0] for im in images]
    """

    def register(target: T) -> T:
        factory: Factory
        if isinstance(target, type) and issubclass(target, Evaluator):
            cls: Callable[..., Evaluator] = target  # a subclass's __init__ takes the device

            def factory(device: str, **options: Any) -> Evaluator:
                return cls(device=device, **options)
        elif callable(target):
            fn = target

            def factory(device: str, **options: Any) -> Evaluator:
                if options:
                    raise Permanent(f"evaluator {name!r} takes no options, got {sorted(options)}")
                return FunctionEvaluator(
                    name, fn, version=version, needs_text=needs_text, device=device
                )
        else:
            raise Permanent(f"@evaluator({name!r}) needs an Evaluator subclass or a function")
        factory.__doc__ = target.__doc__  # what the schema says it scores
        (registry if registry is not None else default_registry).register(name, factory)
        return target

    return register


def _default_device() -> str:
    try:
        import torch
    except ImportError:  # user evaluators may run where torch is not installed
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _clip(device: str, **options: Any) -> Evaluator:
    """open_clip; random-weight tiny config unless given weights: for tests."""
    from .openclip import OpenClipEvaluator

    return OpenClipEvaluator(device=device, **options)


def _shapes_clip(device: str, **options: Any) -> Evaluator:
    """open_clip trained on the shapes world (shipped): scores shapes images, about 0-40."""
    from genloop import shapes

    from .openclip import OpenClipEvaluator

    return OpenClipEvaluator(
        model=shapes.register_clip_config(), pretrained=str(shapes.clip_checkpoint_path()),
        device=device, **options,
    )


def _hf_clip(device: str, **options: Any) -> Evaluator:
    """transformers CLIP from a local path given by the operator."""
    from .hf_clip import HFClipEvaluator

    return HFClipEvaluator(device=device, **options)


def _aesthetic(registry: EvaluatorRegistry, device: str, **options: Any) -> Evaluator:
    """A LAION-style aesthetic head on CLIP image embeddings (ignores the text)."""
    from .aesthetic import AestheticEvaluator

    return AestheticEvaluator.from_registry(registry, device, **options)


def _composite(registry: EvaluatorRegistry, device: str, **options: Any) -> Evaluator:
    """A weighted sum of other evaluators' scores."""
    from .composite import CompositeEvaluator

    return CompositeEvaluator.from_registry(registry, device, **options)


def _clause_critic(registry: EvaluatorRegistry, default_base: str, name: str, device: str,
                   base: str | None = None, **options: Any) -> Evaluator:
    """Scores each clause of the prompt on its own (clause-critic over clip, shapes-critic over
    shapes-clip) and names the weakest, for critic-driven refiners."""
    from .critic import ClauseCritic

    return ClauseCritic(registry.get(base or default_base, device, **options), name=name)


def _ensemble(registry: EvaluatorRegistry, device: str, **options: Any) -> Evaluator:
    """Other evaluators combined with learned weights into a probability (x100) of being
    right."""
    from .ensemble import LearnedEnsemble

    return LearnedEnsemble.from_registry(registry, device, **options)


def _brand_palette(device: str, **options: Any) -> Evaluator:
    """How close an image's dominant colours are to a brand palette (options: palette,
    max_distance)."""
    from .palette import BrandPaletteEvaluator

    return BrandPaletteEvaluator(device=device, **options)


def _vlm_judge(device: str, **options: Any) -> Evaluator:
    """Asks a hosted vision-language model (OpenAI-compatible API) one yes/no question per
    clause; needs GENLOOP_VLM_BASE_URL and GENLOOP_VLM_MODEL set by the operator."""
    from .vlm_judge import VlmJudge

    return VlmJudge.from_env(device=device, **options)


def _shapes_vqa(registry: EvaluatorRegistry, device: str, **options: Any) -> Evaluator:
    """A small model trained on the shapes world (shipped) asked one yes/no question per clause
    of a shapes caption: 100 x the product of its P(yes), with per-clause details; other
    prompts are scored by shapes-critic."""
    from .vqa import ShapesVqa

    return ShapesVqa(device=device, fallback=lambda: registry.get("shapes-critic", device),
                     **options)


def _shapes_reader(registry: EvaluatorRegistry, device: str, **options: Any) -> Evaluator:
    """A small model trained on the shapes world (shipped) that predicts the pixel checker's
    reading: 100 x the probability that it matches every clause of a shapes caption, with
    per-clause details; other prompts are scored by shapes-critic."""
    from .reader import ShapesReader

    return ShapesReader(device=device, fallback=lambda: registry.get("shapes-critic", device),
                        **options)


def register_builtins(registry: EvaluatorRegistry) -> EvaluatorRegistry:
    """Register ``clip``, ``shapes-clip``, ``hf-clip``, ``aesthetic``, ``composite``,
    ``ensemble``, ``brand-palette``, ``clause-critic`` (over ``clip``, or ``base=...``),
    ``shapes-critic`` (the clause critic over ``shapes-clip``), ``shapes-vqa`` (per-clause
    questions to a small trained model), ``shapes-reader`` (a small model's reading of the image,
    as the checker's) and ``vlm-judge`` (factories only; like ``hf-clip`` without a path, an
    unconfigured ``vlm-judge`` is listed and fails with :class:`Permanent` when built, naming
    the environment variables to set)."""
    registry.register("clip", _clip)
    registry.register("shapes-clip", _shapes_clip)
    registry.register("hf-clip", _hf_clip, needs=("path",))
    registry.register("aesthetic", functools.partial(_aesthetic, registry), needs=("head",))
    registry.register("composite", functools.partial(_composite, registry), needs=("weights",))
    registry.register("ensemble", functools.partial(_ensemble, registry), needs=("weights",))
    registry.register("brand-palette", _brand_palette, needs=("palette",))
    registry.register("clause-critic",
                      functools.partial(_clause_critic, registry, "clip", "clause-critic"))
    registry.register("shapes-critic",
                      functools.partial(_clause_critic, registry, "shapes-clip", "shapes-critic"))
    registry.register("shapes-vqa", functools.partial(_shapes_vqa, registry))
    registry.register("shapes-reader", functools.partial(_shapes_reader, registry))
    registry.register("vlm-judge", _vlm_judge, needs=vlm_unset)
    return registry


#: Where ``@evaluator`` and :func:`register_evaluator` register by default, with the built-ins:
#: what a runtime uses unless given another registry (``Resources(evaluators=...)``,
#: ``Client.local(evaluators=...)``), like :data:`genloop.workers.default_registry` for ops.
default_registry = register_builtins(EvaluatorRegistry())


def get_evaluator(name: str = "clip", device: str | None = None, **options: Any) -> Evaluator:
    """``default_registry.get(name, device, **options)``."""
    return default_registry.get(name, device, **options)


def register_evaluator(name: str, factory: Factory, *, replace: bool = False) -> None:
    """``default_registry.register(name, factory, replace=replace)``."""
    default_registry.register(name, factory, replace=replace)
