"""The model registry seam: model name -> resident diffusers pipeline, and its identity.

``tiny`` (and other built-in names, registered by code) are built in-process; any other name
is a diffusers model id or a local directory loaded with ``from_pretrained`` from local files
only. The identity of a model goes into every result key, so replacing the weights behind a
name invalidates stored results instead of silently reusing them.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from genloop.sdk.errors import Permanent

from .tiny import TINY_VERSION, build_tiny_pipeline


@dataclass(frozen=True)
class ModelDefaults:
    """What a request gets for the settings it leaves out."""

    steps: int = 25
    guidance: float = 7.5
    width: int = 512
    height: int = 512


@dataclass(frozen=True)
class BuiltinModel:
    build: Callable[[], Any]
    identity: str
    defaults: ModelDefaults


class ModelRegistry:
    """Loads each model once per process and keeps it resident."""

    def __init__(self, device: str | None = None) -> None:
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.dtype = torch.float16 if self.device.startswith("cuda") else torch.float32
        self._builtin: dict[str, BuiltinModel] = {}
        self._loaded: dict[str, Any] = {}
        self._in_use: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.register("tiny", build_tiny_pipeline, TINY_VERSION,
                      ModelDefaults(steps=4, guidance=5.0, width=32, height=32))

    def register(self, name: str, build: Callable[[], Any], identity: str,
                 defaults: ModelDefaults) -> None:
        """Make ``name`` a built-in model built by ``build()``."""
        self._builtin[name] = BuiltinModel(build, identity, defaults)

    def identity(self, name: str) -> str:
        """A string that changes whenever the weights behind ``name`` change."""
        if name in self._builtin:
            return self._builtin[name].identity
        path = Path(name)
        if path.is_dir():
            return f"path:{path.resolve()}@{_tree_fingerprint(path)}"
        return f"hub:{name}@{_hub_revision(name)}"

    def defaults(self, name: str) -> ModelDefaults:
        return self._builtin[name].defaults if name in self._builtin else ModelDefaults()

    def pipeline(self, name: str) -> Any:
        """The resident pipeline for ``name``, loading it on first use."""
        pipe = self._loaded.get(name)
        if pipe is not None:
            return pipe
        with self._lock:
            pipe = self._loaded.get(name)
            if pipe is None:
                pipe = self._load(name)
                self._in_use[name] = threading.Lock()
                self._loaded[name] = pipe
        return pipe

    @contextmanager
    def acquire(self, name: str) -> Iterator[Any]:
        """The pipeline for ``name``, for this thread alone while the block runs.

        A diffusers pipeline is not thread-safe (its scheduler keeps the step index), and worker
        threads share one resident copy, so calls on one model take turns.
        """
        pipe = self.pipeline(name)
        with self._in_use[name]:
            yield pipe

    def _load(self, name: str) -> Any:
        if name in self._builtin:
            pipe = self._builtin[name].build()
        else:
            pipe = _from_pretrained(name, self.dtype)
        pipe.set_progress_bar_config(disable=True)
        # Casting a float32 model to float32 is a no-op that diffusers warns about; skip it.
        if self.dtype == torch.float32:
            return pipe.to(self.device)
        return pipe.to(self.device, self.dtype)


def _from_pretrained(name: str, dtype) -> Any:
    from diffusers import DiffusionPipeline

    try:
        return DiffusionPipeline.from_pretrained(name, torch_dtype=dtype, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise Permanent(
            f"model {name!r} is neither a built-in model nor a diffusers pipeline in a local "
            f"directory or the Hugging Face cache (downloads are off): {exc}"
        ) from exc


def _tree_fingerprint(path: Path) -> str:
    """Hash of relative paths, sizes and mtimes: cheap, and changes when any file does."""
    h = hashlib.sha256()
    for root, _, files in sorted(os.walk(path)):
        for f in sorted(files):
            st = (Path(root) / f).stat()
            h.update(f"{Path(root, f).relative_to(path)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def _hub_revision(name: str) -> str:
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(name, "model_index.json")
    if isinstance(cached, str):
        return Path(cached).parent.name  # the snapshot's commit hash
    raise Permanent(
        f"model {name!r} is not a built-in model, a local directory, or in the Hugging Face "
        "cache; genloop does not download weights at run time"
    )
