"""Optional ``torch.compile`` of a resident pipeline's denoiser, with a clean eager fallback.

Regional compilation: the repeated blocks of the denoiser (diffusers' ``_repeated_blocks``, plus
those the capability map names: ``ResnetBlock2D`` in UNets, ``JointTransformerBlock`` in SD3,
whose transformer names none) are compiled each with ``Module.compile(dynamic=False)``, not the
whole model. The DeepCache hooks sit on the UNet's down/mid/up blocks, above the compiled
regions, so their Python-side state never becomes a dynamo guard.

Batch buckets. ``dynamic=False`` compiles once per input shape, and a worker's batches come in
every size from 1 to its cap (times 2 with classifier-free guidance). A :class:`_BatchBucketHook`
on the denoiser pads each call's batch to the next power of two (repeating the last candidate;
every op in a diffusers denoiser is per-sample, so the real rows are unchanged) and slices the
output back: at most ``log2(cap) + 2`` shapes per image size. Buckets rather than a dynamic batch
dimension because the regions' inputs are made inside the model (nothing to ``mark_dynamic``
from outside), because dynamic shapes would make Inductor's kernels generic over the batch, and
because CUDA graphs are recorded per shape anyway. dynamo's per-function recompile limit (8)
counts all regions of one class together: on the tiny UNet the ``ResnetBlock2D`` regions need 9
entries at one batch size, and past the limit dynamo runs the rest eager without an error. So
:meth:`Compiler.call` raises the limit while the pipeline runs; the buckets keep the entries
bounded.

CUDA graphs (``mode="reduce-overhead"``) reuse their output buffers on the next replay, and
DeepCache keeps deep blocks' outputs across steps: the two meet safely because DeepCache keeps a
copy where :func:`replays_cuda_graphs` says so (:mod:`.deepcache`), and the bucket hook marks
each denoiser call as a new CUDA-graph step (``torch.compiler.cudagraph_mark_step_begin``), so
nothing else is expected to outlive it.

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
from diffusers.hooks import HookRegistry, ModelHook

from ..models.capabilities import denoiser_architecture

log = logging.getLogger(__name__)

R = TypeVar("R")
_BUCKET_HOOK = "genloop.compile.batch_bucket"
#: Arguments whose first dimension is not the batch even when it happens to equal it (Flux's
#: position ids: one row per token, shared by the batch).
_SHARED_ARGS = frozenset({"img_ids", "txt_ids"})
#: Compile modes that record CUDA graphs.
_CUDAGRAPH_MODES = frozenset({"reduce-overhead", "max-autotune"})
#: dynamo's recompile limits while a compiled pipeline runs (see the module docstring).
RECOMPILE_LIMIT = 1024


def bucket(n: int) -> int:
    """The batch a denoiser call of ``n`` is padded to: the next power of two."""
    return 1 << max(0, n - 1).bit_length()


def _pad(value: Any, batch: int, size: int) -> Any:
    if isinstance(value, torch.Tensor):
        if value.ndim == 0 or value.shape[0] != batch:
            return value
        return torch.cat([value, value[-1:].expand(size - batch, *value.shape[1:])])
    if isinstance(value, dict):
        return {k: v if k in _SHARED_ARGS else _pad(v, batch, size) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_pad(v, batch, size) for v in value)
    return value


def _unpad(value: Any, size: int, batch: int) -> Any:
    if isinstance(value, torch.Tensor):
        return value[:batch] if value.ndim and value.shape[0] == size else value
    if isinstance(value, tuple):
        return type(value)(_unpad(v, size, batch) for v in value)
    if hasattr(value, "keys"):  # diffusers' BaseOutput
        for key in list(value.keys()):
            value[key] = _unpad(value[key], size, batch)
    return value


class _BatchBucketHook(ModelHook):
    """Pads a denoiser call's batch to :func:`bucket` and slices the output back.

    The batch is the first positional argument's first dimension (``sample`` /
    ``hidden_states``); every tensor argument with that first dimension is padded, in dicts
    (``added_cond_kwargs``) and lists (ControlNet residuals) too, except :data:`_SHARED_ARGS`.
    """

    def __init__(self, cudagraphs: bool) -> None:
        super().__init__()
        self.cudagraphs = cudagraphs
        self.padded: tuple[int, int] | None = None

    def pre_forward(self, module, *args, **kwargs):
        if self.cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        first = args[0] if args else kwargs.get("sample", kwargs.get("hidden_states"))
        if not isinstance(first, torch.Tensor) or first.ndim == 0:
            self.padded = None
            return args, kwargs
        batch = first.shape[0]
        size = bucket(batch)
        self.padded = None if size == batch else (size, batch)
        if self.padded is None:
            return args, kwargs
        return _pad(args, batch, size), _pad(kwargs, batch, size)

    def post_forward(self, module, output):
        if self.padded is None:
            return output
        return _unpad(output, *self.padded)


def replays_cuda_graphs(model) -> bool:
    """Whether ``model`` was compiled here in a CUDA-graph mode: its outputs live in buffers
    that its next call writes again, so what must outlive a call is copied."""
    hook = HookRegistry.check_if_exists_or_initialize(model).get_hook(_BUCKET_HOOK)
    return isinstance(hook, _BatchBucketHook) and hook.cudagraphs


def _denoiser(pipe) -> Any:
    return getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)


def _regions(model) -> list[torch.nn.Module]:
    """The blocks compiled one by one: the model's ``_repeated_blocks`` and those its
    architecture names (:mod:`..models.capabilities`; SD3's transformer names none of its own)."""
    names = set(getattr(model, "_repeated_blocks", None) or ())
    names.update(denoiser_architecture(model).compile_regions)
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
        self.cudagraphs = mode in _CUDAGRAPH_MODES

    def apply(self, pipe) -> bool:
        """Compile ``pipe``'s denoiser regions (once); False if there is nothing to compile."""
        model = _denoiser(pipe)
        if model is None or model in self.failed:
            return False
        if model in self._compiled:
            return True
        regions = _regions(model)
        if not regions:
            return False
        for region in regions:
            region.compile(backend=self.backend, mode=self.mode, dynamic=False)
        HookRegistry.check_if_exists_or_initialize(model).register_hook(
            _BatchBucketHook(self.cudagraphs), _BUCKET_HOOK)
        self._compiled[model] = regions
        return True

    def remove(self, pipe) -> None:
        """Back to eager: undo :meth:`apply` on ``pipe``."""
        model = _denoiser(pipe)
        if model is None or model not in self._compiled:
            return
        for region in self._compiled.pop(model):
            # nn.Module.compile() has no public inverse; it only sets this attribute.
            region._compiled_call_impl = None
        HookRegistry.check_if_exists_or_initialize(model).remove_hook(_BUCKET_HOOK, recurse=False)

    def is_compiled(self, pipe) -> bool:
        model = _denoiser(pipe)
        return model is not None and model in self._compiled

    def call(self, pipe, shape: tuple, run: Callable[[], R]) -> R:
        """``run()`` with ``pipe`` compiled; on a compile error, eager from now on and retry."""
        if not self.is_compiled(pipe):
            return run()
        try:
            with torch._dynamo.config.patch(_recompile_limits()):
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


def _recompile_limits() -> dict[str, int]:
    config = torch._dynamo.config
    if hasattr(config, "recompile_limit"):
        names = ("recompile_limit", "accumulated_recompile_limit")
    else:  # before torch 2.7
        names = ("cache_size_limit", "accumulated_cache_size_limit")
    return {name: RECOMPILE_LIMIT for name in names if hasattr(config, name)}


def _is_compile_error(exc: BaseException) -> bool:
    from torch._dynamo.exc import TorchDynamoException

    if isinstance(exc, TorchDynamoException):
        return True
    return type(exc).__module__.startswith(("torch._inductor", "torch._dynamo"))
