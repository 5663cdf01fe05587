"""Approximate reuse across prompts: an image starts from the stored intermediate latents of a
similar earlier prompt, and skips the denoising steps that made them.

After NIRVANA (Agarwal et al., NSDI 2024), with one change: latents are reused only between
images drawn with the **same seed** (and the same model identity, size, steps, guidance,
negative prompt and namespace: a :class:`Scope`). A loop's or a campaign's candidates differ by
seed; were any seed's latents taken, the candidates of one prompt would all start from the few
nearest cached states and lose their diversity. With the seed matched, the reused start is what
this image's own first steps would have drawn under a slightly different prompt, and the no-reuse
image of the same seed is what the reused one is measured against (``benchmarks/latent_reuse.py``).

How many steps are skipped follows from the similarity of the two prompts' text embeddings (the
model's own text encoder: the mean of its token states, up to the end token), by
:data:`REUSE_TABLE`. A request asks for reuse with ``reuse="auto"``; the engine stores the
latents of its text-to-image candidates at the steps the table can skip to, in a byte-bounded
LRU (:class:`LatentCache`), and a request that never reuses pays nothing for it. An eviction
only changes where later images start: a stored result never depends on the cache again.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)

#: (least cosine similarity of the prompt embeddings, fraction of the schedule skipped), highest
#: first; below the last row an image starts from noise. Measured on the shapes model
#: (``python benchmarks/latent_reuse.py --mode calibrate``, 20 steps, two seeds a pair; figures
#: in docs/benchmarks.md): for prompts one clause apart, skipping 10% of the schedule kept the
#: checker's all-correct where it was (0.906 against 0.904 over 200 pairs) while 25% lost the
#: position clause (0.300 against 0.912: a shape's place is settled in the first steps) and
#: colour (0.675 against 0.850); a (0.96, 25%) row lost 0.035 on a campaign-shaped stream. The
#: embedding does not tell which clause changed (a changed background is the most similar pair
#: and the safest to skip past), so the table stops at 10%. Its least similarity, 0.8, keeps
#: unrelated prompts apart: at 0.5, a loop's first round started from other loops' latents
#: (same seeds, prompts as little as 0.5 alike), kept none of its own, and its second round
#: lost 0.040 of all-correct; at 0.8, 0.015, with the same speed on the campaign stream.
REUSE_TABLE: tuple[tuple[float, float], ...] = ((0.8, 0.1),)

#: Default bound of an engine's latent cache, in bytes.
DEFAULT_MAX_BYTES = 256 * 2**20


@dataclass(frozen=True)
class Scope:
    """What must be equal for one image's latents to stand in for another's first steps."""

    model: str  # the model's identity (its weights), not its name
    width: int
    height: int
    steps: int
    guidance: float
    cache: str  # the step-cache mode: its latents differ a little from another mode's
    negative_prompt: str
    seed: int
    namespace: str | None


@dataclass(frozen=True)
class Start:
    """Where a reusing image starts: after ``step`` steps, from ``latents`` (the state the
    source image had entering that step), drawn for the prompt ``source``."""

    step: int
    latents: torch.Tensor
    source: str
    similarity: float


def skipped_steps(similarity: float, steps: int) -> int:
    """Steps an image may skip when the nearest stored prompt is this similar (0: none)."""
    for least, fraction in REUSE_TABLE:
        if similarity >= least:
            return int(steps * fraction)
    return 0


def capture_steps(steps: int) -> tuple[int, ...]:
    """The steps after which an image's latents are stored: those :data:`REUSE_TABLE` can
    skip to, at ``steps``."""
    return tuple(sorted({k for _, f in REUSE_TABLE if (k := int(steps * f)) >= 1}))


@dataclass
class _Entry:
    scope: Scope
    prompt: str
    vector: torch.Tensor
    latents: dict[int, torch.Tensor]
    nbytes: int


class LatentCache:
    """Stored intermediate latents by :class:`Scope`, at most ``max_bytes`` (least recently
    used out first). Thread-safe: a worker's engine threads share it."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.nbytes = 0
        self._entries: OrderedDict[tuple[Scope, str], _Entry] = OrderedDict()
        self._by_scope: dict[Scope, dict[str, _Entry]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, scope: Scope, prompt: str, vector: torch.Tensor,
            latents: dict[int, torch.Tensor]) -> None:
        """Store one image's latents (step -> the state after that many steps, on the CPU)."""
        if not latents:
            return
        nbytes = vector.nbytes + sum(t.nbytes for t in latents.values())
        if nbytes > self.max_bytes:
            return
        entry = _Entry(scope, prompt, vector, dict(latents), nbytes)
        with self._lock:
            self._drop((scope, prompt))
            self._entries[(scope, prompt)] = entry
            self._by_scope.setdefault(scope, {})[prompt] = entry
            self.nbytes += nbytes
            while self.nbytes > self.max_bytes:
                self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[Scope, str]) -> None:
        entry = self._entries.pop(key, None)
        if entry is None:
            return
        self.nbytes -= entry.nbytes
        same = self._by_scope[entry.scope]
        del same[entry.prompt]
        if not same:
            del self._by_scope[entry.scope]

    def find(self, scope: Scope, vector: torch.Tensor) -> Start | None:
        """Where an image of ``scope`` whose prompt embeds to ``vector`` may start: from the
        most similar stored prompt of the same scope, at the furthest step it holds that
        :func:`skipped_steps` allows; ``None`` when nothing stored is similar enough."""
        with self._lock:
            entries = list(self._by_scope.get(scope, {}).values())
            if not entries:
                return None
            similarity = torch.stack([e.vector for e in entries]) @ vector
            best = int(similarity.argmax())
            entry, value = entries[best], float(similarity[best])
            self._entries.move_to_end((scope, entry.prompt))
        # The entry may hold only later steps (it started part-way itself): the furthest held.
        step = max((k for k in entry.latents if k <= skipped_steps(value, scope.steps)),
                   default=0)
        if step == 0:
            # Why an image that asked for reuse started from noise (started_from says only that)
            log.debug("no reuse for seed %d: the nearest stored prompt is %.3f similar, it "
                      "holds steps %s", scope.seed, value, sorted(entry.latents))
            return None
        return Start(step, entry.latents[step], entry.prompt, value)


def prompt_vectors(pipe, prompts: list[str]) -> torch.Tensor | None:
    """Unit-length text embeddings of ``prompts`` from ``pipe``'s own (first) text encoder:
    the mean of its last token states up to and including the end token; ``None`` for a
    pipeline without a CLIP-style tokenizer and text encoder (it gets no reuse)."""
    tokenizer = getattr(pipe, "tokenizer", None)
    encoder = getattr(pipe, "text_encoder", None)
    if tokenizer is None or encoder is None:
        return None
    tokens = tokenizer(prompts, padding="max_length", max_length=tokenizer.model_max_length,
                       truncation=True, return_tensors="pt")
    mask = tokens.attention_mask.to(encoder.device)
    with torch.no_grad():
        states = getattr(encoder(tokens.input_ids.to(encoder.device)), "last_hidden_state", None)
    if states is None or states.dim() != 3:
        return None
    states = states.float()
    pooled = (states * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    return torch.nn.functional.normalize(pooled, dim=1).cpu()
