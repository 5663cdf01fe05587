"""The models an operator allows: name -> weights (a local directory or a hub id) and defaults.

A tenant names a model; the operator decides what that name loads. The config is a TOML (or
JSON) file that ``genloop worker --models``, ``genloop serve --models`` and
``Client.local(models=...)`` read::

    [models.sd15]
    source = "/srv/models/stable-diffusion-v1-5"   # or a hub id already in the HF cache
    steps = 30
    width = 512
    height = 512

The built-in models (``tiny``, ``shapes``) are always allowed and need no entry; an entry may
carry a ``description`` (what the model draws), published in the spec schema. Any other name
is unknown: the gateway refuses it at submit (422, listing the allowed names) and a worker fails
it as ``Permanent`` without touching the file system, so a tenant's string is never a path.
Trusted code that wants any local path or cached hub id passes ``models=None`` to the registry
(the behaviour of a bare ``ModelRegistry()``).

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
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from genloop.sdk.errors import GenloopError

#: Models every registry builds in code, with the defaults a request gets (steps, size).
BUILTIN_MODELS = ("tiny", "shapes")
#: What the random-weight built-in draws (published in the spec schema).
TINY_DESCRIPTION = "random weights, 32 px: for tests, draws noise"
#: A configured model's description when its entry gives none.
CONFIGURED_DESCRIPTION = "configured by the operator"
#: A simulated model's description when its entry gives none.
SIMULATED_DESCRIPTION = "simulated for load tests: draws one plain colour"

_Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
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


class ModelEntry(BaseModel):
    """One allowed model. Unset defaults fall back to the engine's (25 steps, 512 x 512)."""

    model_config = ConfigDict(extra="forbid")

    source: str | None = Field(
        None, min_length=1,
        description="local pipeline directory or hub id in the HF cache; None for a built-in",
    )
    steps: int | None = Field(None, ge=1, le=200)
    guidance: float | None = Field(None, ge=0.0, le=50.0, allow_inf_nan=False)
    width: int | None = Field(None, ge=8, le=4096, multiple_of=8)
    height: int | None = Field(None, ge=8, le=4096, multiple_of=8)
    description: str = Field("", max_length=500,
                             description="what the model draws, for the spec schema")
    simulated: SimulatedModel | None = Field(
        None, description="a model that sleeps instead of computing, for load tests")

    @model_validator(mode="after")
    def _one_kind(self) -> ModelEntry:
        if self.source is not None and self.simulated is not None:
            raise ValueError("an entry is either loaded from a source or simulated; "
                             "remove source or simulated")
        return self


class ModelsConfig(BaseModel):
    """The operator's allow-list of models, by name."""

    model_config = ConfigDict(extra="forbid")

    models: dict[str, ModelEntry] = Field(default_factory=dict)

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
            if entry.source and entry.source.startswith("."):
                entry.source = str((file.parent / entry.source).resolve())
        return config


class ModelsConfigError(GenloopError, ValueError):
    """The models config file cannot be read or is invalid."""


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
        from genloop.workers import shapes
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
