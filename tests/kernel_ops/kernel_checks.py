"""Comparisons the kernel tests share."""

from __future__ import annotations

import torch


def psnr(out: torch.Tensor, ref: torch.Tensor) -> float:
    peak = (ref.max() - ref.min()).float()
    mse = ((out.float() - ref.float()) ** 2).mean()
    return (10 * torch.log10(peak**2 / mse)).item()
