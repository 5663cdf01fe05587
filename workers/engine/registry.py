"""The model registry seam: model name -> resident diffusers pipeline, and its identity.

Pipelines stay resident in an LRU within a memory budget (:mod:`.residency`); ``preload`` loads
and warms one up before the first request (``genloop worker --preload NAME``).

``tiny`` (and other built-in names, registered by code) are built in-process. With a
:class:`~genloop.workers.models.models_config.ModelsConfig` (what ``genloop worker`` and the gateway
pass), only the configured names resolve, each to its ``source`` or, for a ``simulated`` entry,
to a pipeline that sleeps instead of computing (:mod:`.simulated`, load tests only); any other
name is ``Permanent`` before the file system is touched. Without one (trusted code only), any
other name is a diffusers model id or a local directory loaded with ``from_pretrained`` from
local files only.

A configured model loads in its entry's pipeline class, dtype and device, with its defaults
(the folder's native size where the entry gives none). A configuration problem (a folder or
component gone, a hub id not cached) is ``Permanent`` at once, never retried: its message
names the model and what is wrong, for the tenant; the path goes to this worker's log.
:meth:`ModelRegistry.config_problems` finds every such problem when a worker starts.
The identity of a model goes into every result key, so replacing the weights behind a
name invalidates stored results instead of silently reusing them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from genloop.sdk.errors import Permanent

from ..metrics.prometheus import metrics
from ..models.model_folder import FolderProblem, read_folder
from ..models.model_identity import TINY_VERSION, model_identity, model_source, shapes_identity
from ..models.models_config import (
    TINY_DESCRIPTION,
    ModelEntry,
    ModelsConfig,
    SimulatedModel,
    config_problems,
    shipped_shapes,
)
from .residency import Residency, Resident, default_budget, pipeline_bytes
from .simulated import load_simulated
from .tiny import build_tiny_pipeline

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelDefaults:
    """What a request gets for the settings it leaves out."""

    steps: int = 25
    guidance: float = 7.5
    width: int = 512
    height: int = 512
    #: The step cache a request's cache ``"default"`` runs with.
    cache: str = "default"


@dataclass(frozen=True)
class BuiltinModel:
    build: Callable[[], Any]
    identity: str
    defaults: ModelDefaults
    description: str = ""


class ModelRegistry:
    """Loads models on first use and keeps them resident, least recently used out first.

    ``memory_budget`` (bytes of weights on the device; default: the config's
    ``memory_budget_gib``, else :func:`.residency.default_budget`) bounds what stays resident.
    ``dtype`` defaults to float16 on CUDA and float32 on CPU; a configured model may set its
    own dtype and device.
    ``engine_options`` configure :attr:`engine`, the process's batching generation engine.
    """

    def __init__(self, device: str | None = None, *, dtype: torch.dtype | None = None,
                 memory_budget: int | None = None, engine_options: Any = None,
                 models: ModelsConfig | None = None, batch_threads: int | None = None) -> None:
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        on_cuda = self.device.startswith("cuda")
        self.dtype = dtype or (torch.float16 if on_cuda else torch.float32)
        if not on_cuda and self.dtype == torch.float16:
            raise ValueError("float16 on CPU is slow and inexact here; use float32 or bfloat16")
        self._builtin: dict[str, BuiltinModel] = {}
        configured = models.memory_budget_gib if models is not None else None
        self.residency = Residency(memory_budget or (int(configured * 2**30) if configured
                                                     else default_budget(self.device)))
        self._load_lock = threading.Lock()
        self._engine_lock = threading.Lock()
        self._engine_options = engine_options
        self._engine: Any = None
        self.models = models
        #: Loads so far and the last load's seconds, per model (a pool reports them: routing
        #: is judged by the loads it saves, and waits a load out only when one pays).
        self.loads: dict[str, int] = {}
        self.load_seconds: dict[str, float] = {}
        #: torch threads of the engine's batch thread (``None``: the process's; see
        #: ``workers/models/threads.py``).
        self.batch_threads = batch_threads
        self.register("tiny", build_tiny_pipeline, TINY_VERSION,
                      ModelDefaults(steps=4, guidance=5.0, width=32, height=32), TINY_DESCRIPTION)
        _register_shapes(self)
        metrics().watch_models(self)

    def register(self, name: str, build: Callable[[], Any], identity: str,
                 defaults: ModelDefaults, description: str = "") -> None:
        """Make ``name`` a built-in model built by ``build()``; ``description`` tells a spec's
        author what it draws (published in the spec schema)."""
        self._builtin[name] = BuiltinModel(build, identity, defaults, description)

    def builtin(self) -> dict[str, str]:
        """Built-in model names and their descriptions."""
        return {name: m.description for name, m in self._builtin.items()}

    def _entry_of(self, name: str) -> ModelEntry | None:
        return self.models.models.get(name) if self.models is not None else None

    def dtype_of(self, name: str) -> torch.dtype:
        """The dtype ``name`` runs in: its entry's, else the registry's."""
        entry = self._entry_of(name)
        return getattr(torch, entry.dtype) if entry is not None and entry.dtype else self.dtype

    def engine_settings(self, name: str) -> dict[str, int | bool]:
        """What ``name``'s entry sets of the engine's options (:class:`EngineSettings`)."""
        entry = self._entry_of(name)
        return entry.engine.overrides() if entry is not None and entry.engine else {}

    def device_of(self, name: str) -> str:
        """The device ``name`` runs on: its entry's, else the registry's."""
        entry = self._entry_of(name)
        return entry.device if entry is not None and entry.device else self.device

    def config_problems(self) -> list[str]:
        """Every reason a configured model cannot be served here, one line each with its path
        (a worker checks at start and refuses to start, naming them all): those of
        :func:`~genloop.workers.models.models_config.config_problems`, plus a dtype its device
        cannot run, a pipeline class diffusers lacks, a share larger than the budget."""
        if self.models is None:
            return []
        import diffusers

        problems = config_problems(self.models)
        for name, entry in self.models.models.items():
            if entry.simulated is not None:
                continue
            if (missing := _device_missing(self.device_of(name))) is not None:
                problems.append(f"models.{name}: device {self.device_of(name)}: {missing}")
            if entry.dtype == "float16" and not self.device_of(name).startswith("cuda"):
                problems.append(f"models.{name}: float16 needs a GPU (device "
                                f"{self.device_of(name)}); use bfloat16 or float32")
            if (self.models.memory_budget_gib is None and entry.memory_gib is not None
                    and entry.memory_gib * 2**30 > self.residency.budget):  # the default budget
                problems.append(f"models.{name}: memory_gib {entry.memory_gib:g} is more than "
                                f"the memory budget, {_size(self.residency.budget)}")
            try:
                cls = entry.pipeline or (read_folder(entry.folder).class_name
                                         if entry.folder is not None else None)
            except FolderProblem:
                continue  # already named
            if cls is not None and not hasattr(diffusers, cls):
                problems.append(f"models.{name}: diffusers {diffusers.__version__} has no "
                                f"pipeline class {cls!r}; set pipeline to one it has")
        return problems

    def _simulated(self, name: str) -> SimulatedModel | None:
        """The operator's simulated model called ``name``, if the config declares one."""
        entry = self.models.models.get(name) if self.models is not None else None
        return None if entry is None else entry.simulated

    def identity(self, name: str) -> str:
        """A string that changes whenever the weights behind ``name`` change
        (:func:`~..models.model_identity.model_identity`)."""
        return model_identity(name, self.models,
                              {n: model.identity for n, model in self._builtin.items()})

    def defaults(self, name: str) -> ModelDefaults:
        if name in self._builtin:
            return self._builtin[name].defaults
        entry = self._entry_of(name)
        if entry is None:
            return ModelDefaults()
        base = ModelDefaults()
        width, height = entry.size()
        return ModelDefaults(
            steps=entry.steps or base.steps,
            guidance=base.guidance if entry.guidance is None else entry.guidance,
            width=width or base.width, height=height or base.height,
            cache=entry.cache or base.cache)

    @property
    def engine(self) -> Any:
        """The :class:`~.engine.GenerationEngine` of this registry (made on first use)."""
        with self._engine_lock:
            if self._engine is None:
                from .engine import GenerationEngine

                self._engine = GenerationEngine(self, self._engine_options)
            return self._engine

    @property
    def started_engine(self) -> Any:
        """:attr:`engine` if it has been made, else ``None`` (a status read makes none)."""
        return self._engine

    def pipeline(self, name: str) -> Any:
        """The resident pipeline for ``name``, loading it on first use."""
        return self._entry(name).pipe

    def resident(self) -> list[str]:
        """Names of the resident models, least recently used first."""
        return self.residency.names()

    def preload(self, name: str, warmup: bool = True) -> None:
        """Load ``name`` now and, with ``warmup``, run one 1-step image through the engine, so
        the first request finds lazy initialisation (and compilation, if on) done. The warm-up
        image is no request's: the metrics leave it out."""
        self.pipeline(name)
        if warmup:
            from .generate import ImageSettings

            d = self.defaults(name)
            self.engine.wait(self.engine.submit(name, ["warm-up"], [0], ImageSettings(
                steps=1, guidance=d.guidance, width=d.width, height=d.height, cache="off"),
                metered=False))

    def evict(self, name: str) -> bool:
        """Drop ``name`` from memory unless it is in use; True if it was resident and dropped."""
        return self.residency.evict(name)

    @contextmanager
    def acquire(self, name: str) -> Iterator[Any]:
        """The pipeline for ``name``, for this thread alone while the block runs.

        A diffusers pipeline is not thread-safe (its scheduler keeps the step index), and worker
        threads share one resident copy, so calls on one model take turns. A model in use is
        never evicted.
        """
        entry = self._entry(name, pin=True)
        try:
            with entry.lock:
                yield entry.pipe
        finally:
            self.residency.unpin(entry)

    def _entry(self, name: str, pin: bool = False) -> Resident:
        entry = self.residency.get(name, pin)
        if entry is not None:
            return entry
        with self._load_lock:
            entry = self.residency.get(name, pin)
            if entry is not None:
                return entry
            started = time.perf_counter()
            pipe = self._load(name)  # built on CPU, so eviction can make room before .to()
            configured = self._entry_of(name)
            nbytes = (int(configured.memory_gib * 2**30) if configured and configured.memory_gib
                      else pipeline_bytes(pipe, self.dtype_of(name)))  # as after the cast
            if nbytes > self.residency.budget:
                raise Permanent(
                    f"model {name!r} needs {_size(nbytes)}, more than the memory budget of "
                    f"{_size(self.residency.budget)}; raise the budget (memory_budget_gib, "
                    "genloop worker --memory-budget)")
            self.residency.make_room(nbytes)
            entry = self.residency.add(name, self._to_device(pipe, name), nbytes)
            self.residency.get(name, pin)
            took = time.perf_counter() - started
            self.loads[name] = self.loads.get(name, 0) + 1
            self.load_seconds[name] = took
            metrics().model_loaded(name, took)
            log.info("loaded model %s in %.2f s (%.0f MiB on %s)", name, took, nbytes / 2**20,
                     self.device_of(name))
            return entry

    def _load(self, name: str) -> Any:
        if name in self._builtin:
            pipe = self._builtin[name].build()
        elif (simulated := self._simulated(name)) is not None:
            pipe = load_simulated(simulated)
        else:
            entry = self._entry_of(name)
            pipe = _from_pretrained(model_source(name, self.models), self.dtype_of(name),
                                    entry.pipeline if entry is not None else None,
                                    name if entry is not None else None)
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def _to_device(self, pipe: Any, name: str) -> Any:
        dtype, device = self.dtype_of(name), self.device_of(name)
        # Casting a float32 model to float32 is a no-op that diffusers warns about; skip it.
        if dtype == torch.float32:
            return pipe.to(device)
        return pipe.to(device, dtype)


def _register_shapes(registry: ModelRegistry) -> None:
    """Register the trained shapes pipeline as ``shapes`` once its weights are in the package."""
    found = shipped_shapes()
    if found is None:
        return
    from genloop import shapes

    registry.register(
        shapes.PIPELINE_NAME,
        lambda: _from_pretrained(str(found.path), torch.float32),
        shapes_identity(found),
        ModelDefaults(steps=shapes.DEFAULT_STEPS, guidance=shapes.DEFAULT_GUIDANCE,
                      width=found.size, height=found.size),
        found.description,
    )


def _device_missing(device: str) -> str | None:
    """Why ``device`` cannot run models in this process, ``None`` if it can."""
    kind, _, index = device.partition(":")
    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if int(index or 0) >= count:
            return f"this host has {count} CUDA device(s)"
    if kind == "mps" and not torch.backends.mps.is_available():
        return "MPS is not available on this host"
    return None


def _size(nbytes: int) -> str:
    """Bytes as GiB, or MiB below one (a tiny model is not "0.0 GiB")."""
    return f"{nbytes / 2**30:.1f} GiB" if nbytes >= 2**30 else f"{nbytes / 2**20:.1f} MiB"


def _from_pretrained(source: str, dtype, pipeline: str | None = None,
                     name: str | None = None) -> Any:
    """``source`` loaded as ``pipeline`` (a diffusers class name; default: what the folder's
    index says). ``name``: the configured model's name, for the tenant's message; the source
    (a path) then goes only to the log."""
    import diffusers

    cls = getattr(diffusers, pipeline) if pipeline else diffusers.DiffusionPipeline
    try:
        return cls.from_pretrained(source, dtype=dtype, local_files_only=True)
    except (OSError, ValueError) as exc:
        if name is not None:
            log.error("model %s cannot be loaded from %s: %s", name, source, exc)
            raise Permanent(f"model {name!r} cannot be loaded (a configuration problem; the "
                            "worker's log says what)") from None
        raise Permanent(
            f"model {source!r} is neither a built-in model nor a diffusers pipeline in a local "
            f"directory or the Hugging Face cache (downloads are off): {exc}"
        ) from exc
