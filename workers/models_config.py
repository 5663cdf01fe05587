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

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from genloop.sdk.errors import GenloopError

#: Models every registry builds in code, with the defaults a request gets (steps, size).
BUILTIN_MODELS = ("tiny", "shapes")
#: What the random-weight built-in draws (published in the spec schema).
TINY_DESCRIPTION = "random weights, 32 px: for tests, draws noise"
#: A configured model's description when its entry gives none.
CONFIGURED_DESCRIPTION = "configured by the operator"


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


class ModelsConfig(BaseModel):
    """The operator's allow-list of models, by name."""

    model_config = ConfigDict(extra="forbid")

    models: dict[str, ModelEntry] = Field(default_factory=dict)

    def names(self) -> list[str]:
        """Every name a spec may use: the built-ins and the configured ones, sorted."""
        return sorted(set(BUILTIN_MODELS) | set(self.models))

    def allows(self, name: str) -> bool:
        return name in BUILTIN_MODELS or name in self.models

    def described(self) -> dict[str, str]:
        """The configured names (built-ins aside) and their descriptions."""
        return {name: entry.description or CONFIGURED_DESCRIPTION
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
