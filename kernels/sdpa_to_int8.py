"""INT8 attention inside diffusers' own attention processors, without copying them.

diffusers' processors compute attention inline in ``__call__`` and offer no seam to swap that one
call. What every stock processor genloop switches does have in common is *how* it attends:
``torch.nn.functional.scaled_dot_product_attention`` on (B, H, N, D), with head dim contiguous.

* ``AttnProcessor2_0`` (UNets) and ``JointAttnProcessor2_0`` (SD3, SD3.5) call it directly.
* ``FluxAttnProcessor`` calls diffusers' ``dispatch_attention_fn``; its native backend (the
  default) permutes (B, N, H, D) to (B, H, N, D) views and calls SDPA with keyword arguments. With
  another backend configured (``set_attention_backend("flash")``, ``DIFFUSERS_ATTN_BACKEND``, ...)
  no SDPA call happens and the stock path runs unchanged: that is a decline, not an error. The
  ``_native_math`` backend is native SDPA under ``sdpa_kernel(MATH)`` and is intercepted too.

:class:`Int8AttnProcessor` therefore runs the *stock* processor it replaced, unchanged, inside
:class:`SDPAToInt8Mode`, a ``TorchFunctionMode`` that sends each SDPA call the INT8 kernel can
honour (no mask, no dropout, not causal, no grouped-query heads; any scale) to
:func:`~genloop.kernels.dispatch.int8_attention_or_sdpa`, and passes every other function, and
every SDPA call it cannot honour, through with its own arguments. PyTorch disables a mode while
its own handler runs, so the fallback SDPA inside the handler is the real one (no recursion).
Where dispatch declines (CPU without ``force``, short sequences, Hopper's faster cuDNN SDPA), the
real SDPA runs on the same tensors with the same arguments: bit for bit the stock output.
Joint attention concatenates text and image tokens, so the kernel sees image + text keys
(4096 + 333 for SD3 at 1024 px).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from .dispatch import int8_attention_or_sdpa


def _sdpa_arguments(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
                    scale=None, enable_gqa=False) -> dict[str, Any]:
    """SDPA's arguments by name, however the caller passed them (diffusers' native backend uses
    keywords, the UNet and SD3 processors positions)."""
    return dict(query=query, key=key, value=value, attn_mask=attn_mask, dropout_p=dropout_p,
                is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


class SDPAToInt8Mode(TorchFunctionMode):
    """While active, ``F.scaled_dot_product_attention`` calls the INT8 kernel can honour go to
    :func:`~genloop.kernels.dispatch.int8_attention_or_sdpa`; everything else runs as called."""

    def __init__(self, *, force: bool = False) -> None:
        super().__init__()
        self.force = force

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            a = _sdpa_arguments(*args, **kwargs)
            if (a["attn_mask"] is None and a["dropout_p"] == 0.0 and not a["is_causal"]
                    and not a["enable_gqa"]):
                return int8_attention_or_sdpa(a["query"], a["key"], a["value"],
                                              sm_scale=a["scale"], force=self.force)
        return func(*args, **kwargs)


class Int8AttnProcessor:
    """A stock diffusers attention processor (``previous``) run unchanged, its SDPA calls sent to
    INT8 attention where it runs (see the module docstring).

    ``previous`` is also what :func:`~genloop.kernels.remove_int8_attention` restores. Instances
    belong to a subclass per stock class whose ``__call__`` shows the stock signature: diffusers'
    ``Attention`` and ``FluxAttention`` hand a processor only the extra kwargs that
    ``inspect.signature(processor.__call__)`` names, so the wrapped processor gets exactly what
    it would get unwrapped. (A class, not an instance attribute, so that torch.compile traces the
    call like any method.)
    """

    def __new__(cls, previous: Any, *, force: bool = False) -> Int8AttnProcessor:
        if cls is Int8AttnProcessor:
            stock: type = type(previous)
            cls = _showing_signature_of(stock)
        return super().__new__(cls)

    def __init__(self, previous: Any, *, force: bool = False) -> None:
        self.previous = previous
        self.force = force

    def __call__(self, *args, **kwargs) -> Any:
        with SDPAToInt8Mode(force=self.force):
            return self.previous(*args, **kwargs)

    # diffusers configures processors through their attributes (``set_attention_backend`` sets
    # ``_attention_backend`` where ``hasattr`` finds it, context parallelism ``_parallel_config``):
    # every attribute but the wrapper's own two is the stock processor's, read and written there.
    def __getattr__(self, name: str) -> Any:
        if name in _OWN_ATTRIBUTES:  # not set yet (copy, pickle): no lookup through previous
            raise AttributeError(name)
        return getattr(self.previous, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN_ATTRIBUTES:
            object.__setattr__(self, name, value)
        else:
            setattr(self.previous, name, value)


_OWN_ATTRIBUTES = frozenset({"previous", "force"})


@functools.cache
def _showing_signature_of(stock: type) -> type[Int8AttnProcessor]:
    def __call__(self, *args, **kwargs):
        return Int8AttnProcessor.__call__(self, *args, **kwargs)

    __call__.__dict__["__signature__"] = inspect.signature(stock.__call__)
    return type(f"Int8{stock.__name__}", (Int8AttnProcessor,), {"__call__": __call__})
