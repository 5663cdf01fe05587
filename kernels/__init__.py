"""Triton kernels for diffusion inference, with PyTorch references, dispatch and diffusers hooks.

* INT8 attention (SageAttention-style: smoothed K, per-block INT8 Q·Kᵀ, fp16/bf16 P·V) and fused
  GroupNorm + SiLU, each as ``@triton.jit`` kernels behind a checking launcher, in the modules
  ``genloop.kernels.int8_attention`` and ``genloop.kernels.groupnorm_silu`` (import the launchers
  from there; the package names those modules, not the functions).
* :func:`int8_attention_or_sdpa` and :func:`groupnorm_silu_or_torch` run the kernel where it can
  run and PyTorch elsewhere; :func:`can_use_int8_attention` / :func:`can_use_groupnorm_silu` say
  which it would be.
* :func:`apply_int8_attention` / :func:`apply_fused_groupnorm_silu` switch a diffusers model to
  them (and the ``remove_*`` functions switch it back), so the engine can choose per request;
  attention wraps the stock SDPA processors of UNets, SD3 and Flux and intercepts their SDPA call
  (:class:`Int8AttnProcessor`, :class:`SDPAToInt8Mode`), copying none of diffusers' code.

Importing this package imports neither Triton nor diffusers: names are loaded on first use, and
the dispatch functions work on machines without Triton (they take the PyTorch path).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "KernelInputError": "errors",
    "attention_reference": "references",
    "groupnorm_silu_reference": "references",
    "int8_attention_emulated": "references",
    "can_use_int8_attention": "dispatch",
    "can_use_groupnorm_silu": "dispatch",
    "int8_attention_or_sdpa": "dispatch",
    "groupnorm_silu_or_torch": "dispatch",
    "triton_available": "dispatch",
    "Int8AttnProcessor": "sdpa_to_int8",
    "SDPAToInt8Mode": "sdpa_to_int8",
    "apply_int8_attention": "diffusers_hooks",
    "remove_int8_attention": "diffusers_hooks",
    "apply_fused_groupnorm_silu": "diffusers_hooks",
    "remove_fused_groupnorm_silu": "diffusers_hooks",
}

__all__ = [
    "Int8AttnProcessor",
    "KernelInputError",
    "SDPAToInt8Mode",
    "apply_fused_groupnorm_silu",
    "apply_int8_attention",
    "attention_reference",
    "can_use_groupnorm_silu",
    "can_use_int8_attention",
    "groupnorm_silu_or_torch",
    "groupnorm_silu_reference",
    "int8_attention_emulated",
    "int8_attention_or_sdpa",
    "remove_fused_groupnorm_silu",
    "remove_int8_attention",
    "triton_available",
]

if TYPE_CHECKING:
    from .diffusers_hooks import (
        apply_fused_groupnorm_silu,
        apply_int8_attention,
        remove_fused_groupnorm_silu,
        remove_int8_attention,
    )
    from .dispatch import (
        can_use_groupnorm_silu,
        can_use_int8_attention,
        groupnorm_silu_or_torch,
        int8_attention_or_sdpa,
        triton_available,
    )
    from .errors import KernelInputError
    from .references import (
        attention_reference,
        groupnorm_silu_reference,
        int8_attention_emulated,
    )
    from .sdpa_to_int8 import Int8AttnProcessor, SDPAToInt8Mode


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if __name__ != "genloop.kernels":  # imported as a bare `kernels` from the checkout's root
    from genloop.sdk.unshadow import hand_over

    hand_over(__name__, __path__[0])
