"""Cache contexts for pipelines that do not open them.

diffusers' transformer caches (First-Block Cache, TaylorSeer) keep their state per *cache
context*, which the pipeline opens around each denoiser call (``transformer.cache_context(
"cond")``); a call outside one fails with ``ValueError: No cache context is set``. Flux's
text-to-image pipeline opens them; its img2img and inpaint pipelines (diffusers 0.42) and every
SD3 pipeline do not. :func:`apply_cache_context` puts a hook on the transformer that opens one
for any call the pipeline left without: the ``k``-th such call of a denoising step gets context
``call-k``, so a pipeline that runs its conditional and unconditional passes as two calls keeps
a cache state for each, as the pipelines that name them do. The step count comes from the
pipeline's step callback (:func:`cache_context_step_end`), like DeepCache's.
"""

from __future__ import annotations

from diffusers.hooks import HookRegistry, ModelHook
from diffusers.hooks.hooks import CacheContext, StateManager, _set_cache_context

_CONTEXT_HOOK = "genloop.cache_context"


class _ContextHook(ModelHook):
    """Opens ``call-k`` around a transformer call that runs without a cache context."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0  # calls this step that this hook gave a context
        self.opened = False

    def pre_forward(self, module, *args, **kwargs):
        self.opened = not _context_open(module)
        if self.opened:
            _set_cache_context(module, CacheContext(f"call-{self.calls}"))
            self.calls += 1
        return args, kwargs

    def post_forward(self, module, output):
        if self.opened:
            _set_cache_context(module, None)
            self.opened = False
        return output


def _context_open(module) -> bool:
    """Whether the pipeline has opened a cache context on ``module``'s cache hooks. diffusers
    keeps the context in each stateful hook's ``StateManager`` and offers no public read."""
    registry = HookRegistry.check_if_exists_or_initialize(module)
    for child in (registry, *registry._get_child_registries()):
        for hook in child.hooks.values():
            for attr in vars(hook).values():
                if isinstance(attr, StateManager):
                    return attr._context is not None
    return False


def apply_cache_context(transformer) -> None:
    """Install the context hook on ``transformer``; idempotent."""
    registry = HookRegistry.check_if_exists_or_initialize(transformer)
    if registry.get_hook(_CONTEXT_HOOK) is None:
        registry.register_hook(_ContextHook(), _CONTEXT_HOOK)


def cache_context_step_end(transformer) -> None:
    """A denoising step has ended: the next call without a context is ``call-0`` again."""
    hook = HookRegistry.check_if_exists_or_initialize(transformer).get_hook(_CONTEXT_HOOK)
    if isinstance(hook, _ContextHook):
        hook.calls = 0


def reset_cache_context(transformer) -> None:
    """Before a pipeline call: no context left open by a call that raised, counting from 0."""
    hook = HookRegistry.check_if_exists_or_initialize(transformer).get_hook(_CONTEXT_HOOK)
    if isinstance(hook, _ContextHook):
        _set_cache_context(transformer, None)
        hook.calls, hook.opened = 0, False
