"""The generation engine: resident pipelines, cross-request batching, step caching, OOM safety.

One module per concern:

* :mod:`.registry` / :mod:`.residency`: model name -> resident pipeline, LRU within a memory
  budget, :meth:`ModelRegistry.preload`.
* :mod:`.engine`: :class:`GenerationEngine`, what the ``generate`` op calls (``registry.engine``).
* :mod:`.batching`: merges concurrent requests with compatible settings into one call.
* :mod:`.generate`: one diffusers call with a generator per candidate.
* :mod:`.step_cache` / :mod:`.deepcache`: per-request cache modes, resolved per architecture
  (:mod:`genloop.workers.models.capabilities`); DeepCache as diffusers hooks; :mod:`.cache_context`
  opens the cache contexts diffusers' caches need where a pipeline does not.
* :mod:`.oom`: split-and-retry on out-of-memory, learned batch caps.
* :mod:`.compile` / :mod:`.optimize`: optional ``torch.compile``, SDPA, channels_last, kernels.
"""

from .deepcache import DeepCacheConfig, apply_deepcache, remove_deepcache, set_deepcache
from .engine import EngineOptions, GenerationEngine
from .generate import ImageSettings, call_pipeline, generate_images, png_bytes
from .oom import OomGuard, SimulatedOutOfMemory
from .optimize import KernelOptions
from .registry import ModelDefaults, ModelRegistry
from .step_cache import DEFAULT_CACHE, prepare_step_cache

__all__ = [
    "DEFAULT_CACHE",
    "DeepCacheConfig",
    "EngineOptions",
    "GenerationEngine",
    "ImageSettings",
    "KernelOptions",
    "ModelDefaults",
    "ModelRegistry",
    "OomGuard",
    "SimulatedOutOfMemory",
    "apply_deepcache",
    "call_pipeline",
    "generate_images",
    "png_bytes",
    "prepare_step_cache",
    "remove_deepcache",
    "set_deepcache",
]
