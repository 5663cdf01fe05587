"""Optional ``torch.compile`` of a resident pipeline's denoiser, with a clean eager fallback.

Regional compilation: the repeated blocks of the denoiser (diffusers' ``_repeated_blocks``, plus
``ResnetBlock2D`` in UNets) are compiled each with ``Module.compile(dynamic=False)``, not the
whole model. The DeepCache hooks sit on the UNet's down/mid/up blocks, above the compiled
regions, so their Python-side state never becomes a dynamo guard. ``dynamic=False`` compiles once
per input shape (batch, height, width); dynamo reuses the code for a shape it has seen.

Compilation is lazy, so a failure (no C compiler, an unsupported op, a broken backend) surfaces
at the first call with a new shape. :meth:`Compiler.call` catches dynamo's errors, switches the
model back to eager for good, logs why, and runs the call again eagerly.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import torch

log = logging.getLogger(__name__)

R = TypeVar("R")
_UNET_REGIONS = ("ResnetBlock2D",)


def _denoiser(pipe) -> Any:
    return getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)


def _regions(model) -> list[torch.nn.Module]:
    names = set(getattr(model, "_repeated_blocks", None) or ())
    if hasattr(model, "down_blocks"):
        names.update(_UNET_REGIONS)
    return [m for m in model.modules() if type(m).__name__ in names]


class Compiler:
    """Compiles pipelines' denoisers once and falls back to eager when compiling fails.

    ``backend`` and ``mode`` go to ``torch.compile``; ``backend`` may be a callable (tests pass
    one that raises, to exercise the fallback).
    """

    def __init__(self, backend: str | Callable = "inductor", mode: str | None = None) -> None:
        self.backend = backend
        self.mode = mode
        # Keyed by the model itself, weakly: an evicted model must not be kept alive here (nor
        # an id() reused by a later model inherit its entry).
        self.failed: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()
        self._compiled: weakref.WeakKeyDictionary[torch.nn.Module, list[torch.nn.Module]] = (
            weakref.WeakKeyDictionary())
        self.shapes: set[tuple] = set()

    def apply(self, pipe) -> bool:
        """Compile ``pipe``'s denoiser regions (once); False if there is nothing to compile."""
        model = _denoiser(pipe)
        if model is None or model in self.failed:
            return False
        if model in self._compiled:
            return True
        regions = _regions(model)
        for region in regions:
            region.compile(backend=self.backend, mode=self.mode, dynamic=False)
        self._compiled[model] = regions
        return bool(regions)

    def remove(self, pipe) -> None:
        """Back to eager: undo :meth:`apply` on ``pipe``."""
        model = _denoiser(pipe)
        for region in self._compiled.pop(model, []) if model is not None else []:
            # nn.Module.compile() has no public inverse; it only sets this attribute.
            region._compiled_call_impl = None

    def is_compiled(self, pipe) -> bool:
        model = _denoiser(pipe)
        return model is not None and model in self._compiled

    def call(self, pipe, shape: tuple, run: Callable[[], R]) -> R:
        """``run()`` with ``pipe`` compiled; on a compile error, eager from now on and retry."""
        if not self.is_compiled(pipe):
            return run()
        try:
            out = run()
        except Exception as exc:
            if not _is_compile_error(exc):
                raise
            model = _denoiser(pipe)
            log.warning("torch.compile failed for %s at shape %s; running eager from now on: %s",
                        type(model).__name__, shape, exc)
            self.remove(pipe)
            self.failed[model] = f"{type(exc).__name__}: {exc}"
            return run()
        self.shapes.add(shape)
        return out


def _is_compile_error(exc: BaseException) -> bool:
    from torch._dynamo.exc import TorchDynamoException

    if isinstance(exc, TorchDynamoException):
        return True
    return type(exc).__module__.startswith(("torch._inductor", "torch._dynamo"))
