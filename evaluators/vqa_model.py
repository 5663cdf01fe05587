"""The ``shapes-vqa`` model: a yes/no answer to one question about a shapes image.

A question is one clause of a shapes caption ("is the first object's shape a star?"), encoded
as a fixed vector: the clause asked, the value it names, and (two objects only) the rest of the
caption, which is how the model finds *which* object is "first". One-object questions carry no
context: the checker grades the largest object, so "is it a star?" needs nothing else, and a
colour-shape pair never seen together in training is then never seen at all by the question.

The network reads the image once (a small CNN down to a 16x16 map with learned positions) and
answers any number of questions about it by cross-attention from the question to the map, then
compares what it read with what was asked (their product feeds the answer): a question costs a
few thousand multiply-adds beyond the image's share, so training asks ~40 questions per image
and scoring asks a prompt's 5-9 for every candidate in one call. The map's
mean and maximum join the question first: counting is a global question attention answers
badly, and a maximum keeps a small object's colour that a mean dilutes.
"""

from __future__ import annotations

import numpy as np
import torch
from PIL import Image
from torch import nn

from genloop.shapes.dataset import IMAGE_SIZE
from genloop.shapes.scene import (
    ATTRIBUTE_NAMES,
    BACKGROUNDS,
    COLOURS,
    PAIR_CLAUSES,
    POSITIONS,
    RELATIONS,
    SHAPES,
    SIZES,
    Attributes,
    Scene,
)

#: Every clause the model is asked about: one object's, two objects' (the critic's names) and
#: ``count`` (exactly two objects seen), which the checker grades and a pair's clauses miss.
CLAUSES = (*ATTRIBUTE_NAMES, *(c for c in PAIR_CLAUSES if c != "background"), "count")
VALUES = (*COLOURS, *SHAPES, *SIZES, *POSITIONS, *RELATIONS, *BACKGROUNDS)
#: Context groups of a two-object question, in vector order: (owner, field, choices).
CONTEXT = (("first", "colour", tuple(COLOURS)), ("first", "shape", SHAPES),
           ("first", "size", SIZES), ("", "relation", RELATIONS),
           ("second", "colour", tuple(COLOURS)), ("second", "shape", SHAPES),
           ("second", "size", SIZES))
_CONTEXT_START = len(CLAUSES) + len(VALUES)
#: Where each context group lies in a question vector (training drops groups at random).
CONTEXT_SLICES: tuple[slice, ...] = tuple(
    slice(_CONTEXT_START + sum(len(c) for *_, c in CONTEXT[:k]),
          _CONTEXT_START + sum(len(c) for *_, c in CONTEXT[:k + 1]))
    for k in range(len(CONTEXT)))
QUESTION_SIZE = CONTEXT_SLICES[-1].stop
#: The text a ``count`` clause shows in a critique.
COUNT_TEXT = "two objects"


def clause_names(scene: Scene) -> tuple[str, ...]:
    """The clauses asked about ``scene``: the critic's, plus ``count`` for two objects."""
    return ATTRIBUTE_NAMES if isinstance(scene, Attributes) else (*PAIR_CLAUSES, "count")


def clause_text(scene: Scene, name: str) -> str:
    """The words of clause ``name`` in ``scene``'s caption ("red", "left of")."""
    if name == "count":
        return COUNT_TEXT
    owner, _, field = name.rpartition(".")
    return str(getattr(getattr(scene, owner) if owner else scene, field))


def encode_question(scene: Scene, name: str) -> np.ndarray:
    """uint8 ``(QUESTION_SIZE,)``: clause one-hot, value one-hot, two-object context without
    the slot asked about."""
    vector = np.zeros(QUESTION_SIZE, dtype=np.uint8)
    vector[CLAUSES.index(name)] = 1
    if name != "count":
        vector[len(CLAUSES) + VALUES.index(clause_text(scene, name))] = 1
    if isinstance(scene, Attributes) or name in ("count", "background"):
        return vector
    for (owner, field, choices), where in zip(CONTEXT, CONTEXT_SLICES, strict=True):
        if name != (f"{owner}.{field}" if owner else field):
            value = getattr(getattr(scene, owner) if owner else scene, field)
            vector[where.start + choices.index(value)] = 1
    return vector


class VqaNet(nn.Module):
    """Image ``(B, 3, 64, 64)`` uint8 and questions ``(B, Q, QUESTION_SIZE)`` -> logits
    ``(B, Q)`` of "yes"."""

    def __init__(self, width: int = 64, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.config = {"width": width, "heads": heads, "layers": layers}

        def block(cin: int, cout: int, kernel: int, stride: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2),
                    nn.GroupNorm(8, cout), nn.ReLU()]

        # Stride 2 at once: a small shape is ~12 px across, and 32x32 keeps its outline.
        self.stem = nn.Sequential(*block(5, 32, 5, 2), *block(32, width, 3, 2),
                                  *block(width, width, 3, 1), *block(width, width, 3, 1))
        self.position = nn.Parameter(torch.zeros(1, 16 * 16, width))
        self.question = nn.Sequential(nn.Linear(QUESTION_SIZE, width), nn.ReLU(),
                                      nn.Linear(width, width))
        self.summary = nn.Linear(2 * width, width)
        self.attend = nn.ModuleList(nn.MultiheadAttention(width, heads, batch_first=True)
                                    for _ in range(layers))
        self.think = nn.ModuleList(nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 2 * width),
                                                 nn.ReLU(), nn.Linear(2 * width, width))
                                   for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(layers))
        self.head = nn.Sequential(nn.LayerNorm(2 * width), nn.Linear(2 * width, width), nn.ReLU(),
                                  nn.Linear(width, 1))

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """``(B, 256, width)``: the image's map, read once however many questions follow."""
        x = images.float() / 127.5 - 1.0
        b, _, h, w = x.shape
        ys = torch.linspace(-1, 1, h, device=x.device).view(1, 1, h, 1).expand(b, 1, h, w)
        xs = torch.linspace(-1, 1, w, device=x.device).view(1, 1, 1, w).expand(b, 1, h, w)
        grid = self.stem(torch.cat([x, xs, ys], dim=1))
        return grid.flatten(2).transpose(1, 2) + self.position

    def answer(self, grid: torch.Tensor, questions: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, Q)`` for questions ``(B, Q, QUESTION_SIZE)`` about ``grid``'s images."""
        asked = self.question(questions.float())
        pooled = torch.cat([grid.mean(dim=1), grid.amax(dim=1)], dim=-1)
        q = asked + self.summary(pooled).unsqueeze(1)
        for attend, think, norm in zip(self.attend, self.think, self.norms, strict=True):
            q = q + attend(norm(q), grid, grid, need_weights=False)[0]
            q = q + think(q)
        # The product lets "what was read" meet "what was asked" multiplicatively (is the
        # colour read the colour named?); summed alone, the two barely interact.
        return self.head(torch.cat([q, asked * q], dim=-1)).squeeze(-1)

    def forward(self, images: torch.Tensor, questions: torch.Tensor) -> torch.Tensor:
        return self.answer(self.features(images), questions)


def to_pixels(image: Image.Image) -> np.ndarray:
    """uint8 ``(64, 64, 3)``; other sizes resized as the checker resizes them."""
    image = image.convert("RGB")
    if image.size != (IMAGE_SIZE, IMAGE_SIZE):
        resample = (Image.Resampling.BOX if image.size[0] >= IMAGE_SIZE
                    else Image.Resampling.BILINEAR)
        image = image.resize((IMAGE_SIZE, IMAGE_SIZE), resample)
    return np.asarray(image, dtype=np.uint8)


def to_batch(images: list[np.ndarray] | np.ndarray) -> torch.Tensor:
    """uint8 ``(N, 64, 64, 3)`` (arrays of RGB images) as the net's ``(N, 3, 64, 64)``."""
    return torch.from_numpy(np.ascontiguousarray(np.stack(list(images)))).permute(0, 3, 1, 2)
