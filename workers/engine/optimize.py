"""Per-model speed settings applied once when a pipeline becomes resident.

* Attention through PyTorch SDPA (``AttnProcessor2_0``) on every ``Attention`` module that still
  runs the classic processor; custom processors are left alone.
* ``channels_last`` for the UNet and the VAE on CUDA, where cuDNN's NHWC convolutions are faster;
  off on CPU by default, where oneDNN chooses its own layout and NHWC measured no faster here.
* The Triton kernels of :mod:`genloop.kernels` through :func:`apply_kernels`, a small optional
  adapter: off unless asked for, never on CPU, and a missing or failing kernels package only logs.

The dtype (fp16/bf16 on CUDA, fp32 on CPU) is the registry's choice at load time.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class KernelOptions:
    """Which :mod:`genloop.kernels` hooks to put on a resident model (CUDA only)."""

    int8_attention: bool = False
    fused_groupnorm_silu: bool = False

    @property
    def any(self) -> bool:
        return self.int8_attention or self.fused_groupnorm_silu


@functools.cache
def cpu_computes_bf16() -> bool:
    """Whether this CPU has native bf16 arithmetic (Linux's CPU flags; elsewhere no), which
    :mod:`.cpu_bf16` needs to pay. torch offers no public check: oneDNN's own says yes wherever
    it can emulate bf16, slowly."""
    try:
        with open("/proc/cpuinfo") as info:
            flags = next((line for line in info if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def use_sdpa(pipe) -> int:
    """Switch classic attention processors to SDPA; returns how many modules changed."""
    from diffusers.models.attention_processor import Attention, AttnProcessor, AttnProcessor2_0

    changed = 0
    for name in ("unet", "transformer", "vae"):
        model = getattr(pipe, name, None)
        if model is None:
            continue
        for module in model.modules():
            if isinstance(module, Attention) and type(module.processor) is AttnProcessor:
                # diffusers annotates the argument as AttnProcessor, though it takes any
                # processor (its own set_default_attn_processor passes AttnProcessor2_0)
                module.set_processor(AttnProcessor2_0())  # type: ignore[arg-type]
                changed += 1
    return changed


def use_channels_last(pipe) -> None:
    for name in ("unet", "vae"):
        model = getattr(pipe, name, None)
        if model is not None:
            model.to(memory_format=torch.channels_last)


def apply_kernels(pipe, device: str, options: KernelOptions) -> list[str]:
    """Put the requested kernel hooks on ``pipe``'s denoiser; returns the ones applied.

    Off on CPU whatever ``options`` say: the kernels are Triton GPU kernels and their dispatch
    would take the PyTorch path there anyway.
    """
    if not options.any or not device.startswith("cuda"):
        return []
    try:
        from genloop import kernels
    except ImportError as exc:
        log.warning("genloop.kernels is not importable; running without kernels: %s", exc)
        return []
    model = getattr(pipe, "unet", None) or getattr(pipe, "transformer", None)
    applied = []
    for wanted, name, fn in (
        (options.int8_attention, "int8_attention", "apply_int8_attention"),
        (options.fused_groupnorm_silu, "fused_groupnorm_silu", "apply_fused_groupnorm_silu"),
    ):
        if not wanted or model is None:
            continue
        try:
            getattr(kernels, fn)(model)
            applied.append(name)
        except Exception as exc:  # noqa: BLE001  (an optional speed-up must not stop the worker)
            log.warning("could not apply %s: %s", name, exc)
    return applied

