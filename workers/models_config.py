"""The models an operator allows: name -> weights (a local directory or a hub id) and defaults.

A tenant names a model; the operator decides what that name loads. The config is a TOML (or
JSON) file that ``genloop worker --models``, ``genloop serve --models`` and
``Client.local(models=...)`` read::

    [models.sd15]
    source = "/srv/models/stable-diffusion-v1-5"   # or a hub id already in the HF cache
    steps = 30
    width = 512
    height = 512

The built-in models (``tiny``, ``shapes``) are always allowed and need no entry. Any other name
is unknown: the gateway refuses it at submit (422, listing the allowed names) and a worker fails
it as ``Permanent`` without touching the file system, so a tenant's string is never a path.
Trusted code that wants any local path or cached hub id passes ``models=None`` to the registry
(the behaviour of a bare ``ModelRegistry()``).

No torch here: the gateway validates names and costs specs with it.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from genloop.sdk.errors import GenloopError

#: Models every registry builds in code, with the defaults a request gets (steps, size).
BUILTIN_MODELS = ("tiny", "shapes")


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


class ModelsConfig(BaseModel):
    """The operator's allow-list of models, by name."""

    model_config = ConfigDict(extra="forbid")

    models: dict[str, ModelEntry] = Field(default_factory=dict)

    def names(self) -> list[str]:
        """Every name a spec may use: the built-ins and the configured ones, sorted."""
        return sorted(set(BUILTIN_MODELS) | set(self.models))

    def allows(self, name: str) -> bool:
        return name in BUILTIN_MODELS or name in self.models

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
