"""Training schedules counted in steps or budgeted in seconds, and the device settings that make
a small model's step cheap on a GPU.

A GPU run is lent for minutes, and how many steps fit depends on the chip, so a loop given
``seconds`` times its own first steps and fixes its length from them (:class:`StepPlan`); the
learning rate is a linear warm-up then a cosine to zero over whatever length that gives.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch

#: Written beside a trained model: steps and seconds per step of its training loops (read into
#: the train report, then removed).
LOOPS_FILE = "training-loops.json"
#: Steps run before timing starts (first calls allocate memory and pick kernels), then timed.
SETTLE_STEPS = 5
TIMED_STEPS = 20


def is_cuda(device: str | torch.device) -> bool:
    return torch.device(device).type == "cuda"


def synchronize(device: str | torch.device) -> None:
    if is_cuda(device):
        torch.cuda.synchronize(device)


def autocast(device: str | torch.device) -> AbstractContextManager:
    """bf16 autocast on CUDA (fp32 weights and optimiser, bf16 matmuls and convolutions);
    plain fp32 elsewhere, so CPU runs and tests stay exact."""
    if is_cuda(device):
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return nullcontext()


def adamw(params, lr: float, weight_decay: float, device: str | torch.device):
    """AdamW, fused into one kernel per step on CUDA (the default ``foreach`` elsewhere)."""
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay,
                             fused=True if is_cuda(device) else None)


def update(opt: torch.optim.Optimizer, loss: torch.Tensor, params: list[torch.Tensor],
           ema: list[torch.Tensor], ema_decay: float, step: int) -> None:
    """One optimiser step on ``loss`` (gradients clipped to norm 1), then the EMA copy of
    ``params`` moved towards them, its decay warming up over the first steps."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    decay = min(ema_decay, (1 + step) / (10 + step))
    with torch.no_grad():
        torch._foreach_lerp_(ema, [p.detach() for p in params], 1 - decay)


class StepPlan:
    """How long a training loop runs, and its learning-rate factor at each step.

    Without ``seconds`` the loop runs ``steps``. With it, steps :data:`SETTLE_STEPS` to
    ``SETTLE_STEPS + TIMED_STEPS`` are timed (the device synchronised at both ends, the only
    syncs this adds) and the total becomes as many steps as fit in ``seconds`` from the loop's
    start, at least ``min_steps`` and at most ``max_steps`` (default: no cap). Until then the
    cosine runs over ``steps``; warm-up is usually longer than the timing, so it never does.
    """

    def __init__(self, steps: int, warmup: int, device: str | torch.device = "cpu",
                 seconds: float | None = None, min_steps: int = 1,
                 max_steps: int | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.total = steps
        self.warmup = max(1, min(warmup, steps))
        self.device = device
        self.seconds = seconds
        self.min_steps = min_steps
        self.max_steps = max_steps
        self.seconds_per_step: float | None = None
        self.clock = clock
        self._began = clock()
        self._timed_from = 0.0

    def lr_factor(self, step: int) -> float:
        if step < self.warmup:
            return (step + 1) / self.warmup
        return 0.5 * (1 + math.cos(math.pi * (step - self.warmup)
                                   / max(1, self.total - self.warmup)))

    def after_step(self, step: int) -> None:
        """Call once after each step (``step`` counted from 0)."""
        if self.seconds is None:
            return
        if step == SETTLE_STEPS - 1:
            synchronize(self.device)
            self._timed_from = self.clock()
        elif step == SETTLE_STEPS + TIMED_STEPS - 1:
            synchronize(self.device)
            now = self.clock()
            self.seconds_per_step = (now - self._timed_from) / TIMED_STEPS
            left = self.seconds - (now - self._began)
            total = step + 1 + max(0, int(left / self.seconds_per_step))
            if self.max_steps is not None:
                total = min(total, self.max_steps)
            self.total = max(total, self.min_steps, step + 1)
            self.warmup = min(self.warmup, self.total)

    def summary(self) -> dict[str, float | None]:
        """Steps run (once the loop ended) and the measured seconds per step, if timed."""
        return {"steps": self.total, "seconds_per_step": self.seconds_per_step}
