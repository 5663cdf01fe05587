"""The models an operator allows: name -> weights (a local directory or a hub id) and defaults.

A tenant names a model; the operator decides what that name loads. The config is a TOML (or
JSON) file that ``genloop worker --models``, ``genloop serve --models`` and
``Client.local(models=...)`` read::

    memory_budget_gib = 40                    # what resident models may hold on the worker

    [models.sdxl]
    source = "/srv/models/sdxl-house"        # a pipeline folder, or a hub id in the HF cache
    dtype = "float16"                         # float16 | bfloat16 | float32
    steps = 30
    guidance = 6.0                            # width / height: omit for the native size
    cache = "deepcache:3"                     # what a request's cache "default" runs with
    memory_gib = 9.5                          # its share of the budget while resident
    engine = { max_batch = 4 }                # over the worker's engine options

Every field is described on :class:`ModelEntry`; ``docs/own-models.md`` has whole examples.
An entry's ``pipeline`` names the diffusers class where the folder's ``model_index.json`` does
not (a folder saved from a subclass of one). Without ``width`` / ``height`` a model draws its
native size, read from the folder's configs (:mod:`.model_folder`).

The built-in models (``tiny``, ``shapes``) are always allowed and need no entry; an entry may
carry a ``description`` (what the model draws), published in the spec schema. Any other name
is unknown: the gateway refuses it at submit (422, listing the allowed names) and a worker fails
it as ``Permanent`` without touching the file system, so a tenant's string is never a path.
Trusted code that wants any local path or cached hub id passes ``models=None`` to the registry
(the behaviour of a bare ``ModelRegistry()``).

A worker checks its config when it starts (:func:`config_problems`: every folder and component
there, each size readable) and refuses to start, naming every problem at once; a tenant's spec
never sees a path. The same file may name the operator's own judges (``[evaluators.NAME]``,
:mod:`genloop.evaluators.config`).

For load tests an entry may be ``simulated`` instead of having a ``source``: a model that sleeps
instead of computing, so a pool of many workers and models runs on a few CPU cores
(``benchmarks/pool.py``; see :mod:`genloop.workers.engine.simulated`)::

    [models.sim-a]
    steps = 10
    width = 64
    height = 64

    [models.sim-a.simulated]
    load_seconds = 3.0                        # each load sleeps this long
    step_seconds = { 1 = 0.02, 8 = 0.008 }    # per image step, at batch sizes 1 and 8
    resident_bytes = 2_000_000_000            # its share of the worker's memory budget

Only an operator's entry makes one: no name a tenant sends is read as a simulation, and a
built-in name cannot be simulated.

No torch here: the gateway validates names and costs specs with it, and a back end lists the
models it serves from it (:func:`served_models`) without importing diffusers.
"""

from __future__ import annotations

import functools
import json
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from genloop.evaluators.config import JudgeEntry, resolve_paths
from genloop.sdk.errors import GenloopError
from genloop.sdk.ops import GenerateParams

from .model_folder import FolderProblem, read_folder

#: Models every registry builds in code, with the defaults a request gets (steps, size).
BUILTIN_MODELS = ("tiny", "shapes")
#: What the random-weight built-in draws (published in the spec schema).
TINY_DESCRIPTION = "random weights, 32 px: for tests, draws noise"
#: A configured model's description when its entry gives none.
CONFIGURED_DESCRIPTION = "configured by the operator"
#: A simulated model's description when its entry gives none.
SIMULATED_DESCRIPTION = "simulated for load tests: draws one plain colour"

_Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
_GiB = Annotated[float, Field(gt=0, allow_inf_nan=False)]
#: A cache mode as a request may name one (which modes an architecture runs is the engine's).
_CacheMode = Annotated[str, *GenerateParams.model_fields["cache"].metadata]
#: Precisions a model may run in; float16 only on a GPU.
DTYPES = ("float16", "bfloat16", "float32")
_BatchSize = Annotated[int, Field(ge=1, le=4096)]


class SimulatedModel(BaseModel):
    """A model that sleeps instead of computing (load tests only). Its time per image step is
    given at some batch sizes, since a real model's falls as its batches grow; between them it
    is interpolated (see :func:`genloop.workers.engine.simulated.step_seconds_at`)."""

    model_config = ConfigDict(extra="forbid")

    load_seconds: float = Field(ge=0, allow_inf_nan=False,
                                description="how long a load takes (a worker's cold start)")
    step_seconds: dict[_BatchSize, _Seconds] = Field(
        min_length=1, description="seconds per image per denoising step, by batch size: the "
        "figure the workers measure and the pool's backlog estimate reads")
    resident_bytes: int = Field(gt=0, description="memory it holds while resident, counted "
                                "in the worker's memory budget like a real model's weights")


class EngineSettings(BaseModel):
    """How the engine runs one model, over the worker's own options (its
    :class:`~genloop.workers.engine.engine.EngineOptions`); an unset field keeps the worker's."""

    model_config = ConfigDict(extra="forbid")

    max_batch: int | None = Field(
        None, ge=1, le=4096, description="images per denoiser call at most (default: by "
        "device and image size)")
    compile: bool | None = Field(
        None, description="torch.compile its denoiser's blocks (default: the worker's "
        "engine options', off unless set in code)")
    channels_last: bool | None = Field(
        None, description="channels-last memory format (default: on a GPU)")
    cpu_bf16: bool | None = Field(
        None, description="bf16 autocast of the denoiser on a CPU after its first steps "
        "(default: where the CPU computes bf16 natively)")

    def overrides(self) -> dict[str, int | bool]:
        """The fields set, by name (those of the engine's options they replace)."""
        return self.model_dump(exclude_none=True)


class ModelEntry(BaseModel):
    """One allowed model. Unset defaults fall back to the engine's (25 steps, guidance 7.5)
    and the size to the folder's native one."""

    model_config = ConfigDict(extra="forbid")

    source: str | None = Field(
        None, min_length=1,
        description="local pipeline directory (absolute, or relative to the config file) or "
        "hub id in the HF cache; None for a built-in",
    )
    pipeline: str | None = Field(
        None, pattern=r"^[A-Za-z_]\w*$",
        description="diffusers pipeline class, where the folder's model_index.json names "
        "none or one diffusers lacks (default: the folder's)")
    dtype: Literal["float16", "bfloat16", "float32"] | None = Field(
        None, description="precision of its weights and compute (default: float16 on a GPU, "
        "float32 on a CPU; bfloat16 where float16 overflows, as Flux's and T5's do)")
    device: str | None = Field(
        None, pattern=r"^(cpu|cuda(:\d+)?|mps)$",
        description="where it runs (default: the worker's device)")
    steps: int | None = Field(None, ge=1, le=200)
    guidance: float | None = Field(None, ge=0.0, le=50.0, allow_inf_nan=False)
    width: int | None = Field(None, ge=8, le=4096, multiple_of=8)
    height: int | None = Field(None, ge=8, le=4096, multiple_of=8)
    cache: _CacheMode | None = Field(
        None, description="the step cache a request's cache 'default' runs with here")
    memory_gib: _GiB | None = Field(
        None, description="its share of the worker's memory budget while resident (default: "
        "its weights' bytes in its dtype); more reserves room for activations")
    engine: EngineSettings | None = Field(
        None, description="how the engine runs this model, over the worker's options")
    description: str = Field("", max_length=500,
                             description="what the model draws, for the spec schema")
    simulated: SimulatedModel | None = Field(
        None, description="a model that sleeps instead of computing, for load tests")

    @model_validator(mode="after")
    def _one_kind(self) -> ModelEntry:
        if self.source is not None and self.simulated is not None:
            raise ValueError("an entry is either loaded from a source or simulated; "
                             "remove source or simulated")
        if self.simulated is not None and (self.pipeline or self.dtype or self.device
                                           or self.engine):
            raise ValueError("a simulated model loads and runs nothing: remove pipeline, "
                             "dtype, device, engine")
        return self

    @property
    def folder(self) -> Path | None:
        """The local folder it loads from (``None`` for a hub id, a built-in or a
        simulation). A source that is an absolute path is a folder, never a hub id."""
        return Path(self.source) if self.source and Path(self.source).is_absolute() else None

    def size(self) -> tuple[int | None, int | None]:
        """(width, height): as configured, else the folder's native size where it can be
        read here, else ``None`` (the engine's default applies)."""
        if (self.width is not None and self.height is not None) or self.folder is None:
            return self.width, self.height
        try:
            width, height = _native_size(self.folder)
        except FolderProblem:
            return self.width, self.height
        return self.width or width, self.height or height


@functools.cache
def _native_size(folder: Path) -> tuple[int, int]:
    """Read once per folder: admission costs every submit with it."""
    return read_folder(folder).native_size()


class ModelsConfig(BaseModel):
    """The operator's allow-list of models, by name."""

    model_config = ConfigDict(extra="forbid")

    memory_budget_gib: _GiB | None = Field(
        None, description="what resident models may hold on a worker (default: 70% of the "
        "GPU's memory, or half the host's RAM); ``genloop worker --memory-budget`` overrides")
    models: dict[str, ModelEntry] = Field(default_factory=dict)
    evaluators: dict[str, JudgeEntry] = Field(
        default_factory=dict, description="the operator's own judges, by name")

    @model_validator(mode="after")
    def _no_simulated_builtin(self) -> ModelsConfig:
        if clash := [n for n in BUILTIN_MODELS if n in self.models and self.models[n].simulated]:
            raise ValueError(f"built-in model {clash[0]!r} cannot be simulated; give the "
                             "simulated model a name of its own")
        return self

    def names(self) -> list[str]:
        """Every name a spec may use: the built-ins and the configured ones, sorted."""
        return sorted(set(BUILTIN_MODELS) | set(self.models))

    def allows(self, name: str) -> bool:
        return name in BUILTIN_MODELS or name in self.models

    def described(self) -> dict[str, str]:
        """The configured names (built-ins aside) and their descriptions."""
        return {name: entry.description or (SIMULATED_DESCRIPTION if entry.simulated
                                            else CONFIGURED_DESCRIPTION)
                for name, entry in self.models.items() if name not in BUILTIN_MODELS}

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ModelsConfig:
        """Read a ``.toml`` or ``.json`` file; relative ``source`` paths are relative to it."""
        file = Path(path)
        try:
            text = file.read_text()
            raw = json.loads(text) if file.suffix == ".json" else tomllib.loads(text)
            config = cls.model_validate(raw)
        except (OSError, ValueError, ValidationError) as exc:
            raise ModelsConfigError(f"models config {file}: {exc}") from exc
        for entry in config.models.values():
            # "./x", "~/x", or a folder beside the file ("weights/x", which would otherwise
            # read as the hub id of user "weights")
            if entry.source and (entry.source.startswith((".", "~"))
                                 or (file.parent / entry.source).is_dir()):
                entry.source = str((file.parent / Path(entry.source).expanduser()).resolve())
        resolve_paths(config.evaluators, file.parent)
        return config


class ModelsConfigError(GenloopError, ValueError):
    """The models config file cannot be read or is invalid."""


def config_problems(config: ModelsConfig) -> list[str]:
    """What stops ``config``'s models from loading, one line each with its path (for the
    operator): a folder or component missing, a size that cannot be read, a hub id not in
    the HF cache, a model larger than the budget. Reads files only; imports no torch."""
    problems = []
    for name, entry in config.models.items():
        if entry.folder is not None:
            try:
                folder = read_folder(entry.folder)
                if entry.width is None or entry.height is None:
                    folder.native_size()
            except FolderProblem as exc:
                problems.append(f"models.{name}: {exc}")
        elif entry.source is not None and not _in_hub_cache(entry.source):
            problems.append(f"models.{name}: {entry.source!r} is neither an absolute folder "
                            "path nor a hub id in the Hugging Face cache (no downloads)")
        budget = config.memory_budget_gib
        if entry.memory_gib is not None and budget is not None and entry.memory_gib > budget:
            problems.append(f"models.{name}: memory_gib {entry.memory_gib:g} is more than "
                            f"memory_budget_gib {budget:g}")
    return problems


def refuse(problems: list[str]) -> None:
    """Raise :class:`ModelsConfigError` naming every problem, if there are any."""
    if problems:
        raise ModelsConfigError("the models config cannot be served here:\n  "
                                + "\n  ".join(problems))


def _in_hub_cache(repo: str) -> bool:
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError

    try:
        return isinstance(try_to_load_from_cache(repo, "model_index.json"), str)
    except HFValidationError:
        return False


def models_config(value: str | os.PathLike[str] | ModelsConfig | None) -> ModelsConfig:
    """A config from a path or a config; ``None`` gives the built-ins only."""
    if value is None:
        return ModelsConfig()
    if isinstance(value, ModelsConfig):
        return value
    return ModelsConfig.load(value)


@dataclass(frozen=True)
class ShippedShapes:
    """The trained ``shapes`` pipeline in the package: where it is and what it draws."""

    path: Path
    size: int

    @property
    def description(self) -> str:
        return (f"trained here on the shapes world ({self.size} px): one coloured circle, "
                "square or triangle, of a size and position, on a plain background")


def shipped_shapes() -> ShippedShapes | None:
    """The shapes pipeline when its weights are in the package (else ``None``); its image size
    is read from its UNet and VAE configs, so nothing is loaded."""
    try:
        from genloop import shapes
    except ImportError:
        return None
    return _shapes_at(shapes.pipeline_path())


@functools.cache
def _shapes_at(path: Path) -> ShippedShapes | None:
    """Read once per path: every submit lists the served models, and a package's weights do
    not change while the process runs."""
    if not (path / "model_index.json").is_file():
        return None
    unet = json.loads((path / "unet" / "config.json").read_text())
    vae = json.loads((path / "vae" / "config.json").read_text())
    return ShippedShapes(path, unet["sample_size"] * 2 ** (len(vae["block_out_channels"]) - 1))


def builtin_models() -> dict[str, str]:
    """What a fresh :class:`~genloop.workers.engine.registry.ModelRegistry` registers (name ->
    description), read without building one: listing models must not import diffusers."""
    models = {"tiny": TINY_DESCRIPTION}
    if (found := shipped_shapes()) is not None:
        models["shapes"] = found.description
    return models


def served_models(builtin: dict[str, str], config: ModelsConfig | None) -> dict[str, str]:
    """The names a spec may use (name -> description): ``builtin`` (a registry's, or
    :func:`builtin_models`) and the names ``config`` adds."""
    return {**(config.described() if config is not None else {}), **builtin}
