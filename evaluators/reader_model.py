"""The ``shapes-reader`` model: what the pixel checker would read in a shapes image, per slot.

The checker (:func:`genloop.shapes.read`) reads an image as a background and a list of
objects, largest first, each with a colour, a shape, a size and a centroid. This net predicts
that reading as independent categorical heads (:data:`HEADS`): the background, how many
objects, the largest object's colour, shape, size and position (what a one-object caption is
graded on), and for the two largest objects, in the order the relation reads them (the left
one first, or the top one when they lie more above each other than beside), each one's
colour, shape and size and along which axis they lie. A caption is then scored by the
probability that the reading matches it (:func:`caption_probability`).

Why that order and not the checker's largest-first: two objects of one size are either one's
"largest", so largest-first heads must each hedge between both objects, and independent heads
multiply the hedges into a low score for a right image; left-first has no such tie except
on the diagonal, where the checker's relation itself is a coin toss. Colour and shape are read
by separate heads of separate branches (:class:`ReaderNet`), so a colour-shape pair never seen
together is scored from what was seen of each.

The image is read at 64x64, the shipped generator's size (others are resized as the checker
resizes them), with two coordinate channels, so the flattened map keeps where things are. Sizes
are the checker's v2 split (the shipped generator's world).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from genloop.shapes.checker import Reading, scene_of
from genloop.shapes.scene import (
    BACKGROUNDS,
    COLOURS,
    PAIR_CLAUSES,
    POSITIONS,
    SHAPES,
    SIZES,
    Attributes,
    Pair,
    Scene,
)

#: Object counts the ``count`` head tells apart; the last class is "that many or more".
COUNTS = (0, 1, 2, 3)
#: Along which axis two objects lie: ``p`` is left of ``q``, or above it.
AXES = ("left of", "above")
_FIELDS = ("colour", "shape", "size")
_CHOICES = {"colour": tuple(COLOURS), "shape": SHAPES, "size": SIZES}
#: Every head, in logit order: (name, classes). ``a`` is the largest object; ``p`` and ``q`` are
#: the two largest, ``p`` the left (or top) one.
HEADS: tuple[tuple[str, tuple], ...] = (
    ("background", tuple(BACKGROUNDS)), ("count", COUNTS),
    *((f"a.{f}", _CHOICES[f]) for f in _FIELDS), ("a.position", POSITIONS),
    *((f"{o}.{f}", _CHOICES[f]) for o in "pq" for f in _FIELDS), ("axis", AXES),
)
HEAD_NAMES = tuple(name for name, _ in HEADS)
#: Where each head's logits lie in the net's output.
HEAD_SLICES = {name: slice(sum(len(c) for _, c in HEADS[:k]), sum(len(c) for _, c in HEADS[:k + 1]))
               for k, (name, _) in enumerate(HEADS)}
LOGITS = sum(len(c) for _, c in HEADS)
#: A head with no answer in a reading (no second object: no ``q.colour``) is left out of the loss.
IGNORE = -100


def _index(head: str, value: object) -> int:
    return dict(HEADS)[head].index(value)


def targets(reading: Reading) -> np.ndarray:
    """int64 ``(len(HEADS),)``: the class of each head in ``reading``, :data:`IGNORE` where the
    reading has no answer (fewer objects than the head needs)."""
    out = dict.fromkeys(HEAD_NAMES, IGNORE)
    out["background"] = _index("background", reading.background)
    out["count"] = min(len(reading.objects), COUNTS[-1])
    one = scene_of(reading, 1)
    if isinstance(one, Attributes):
        for field in (*_FIELDS, "position"):
            out[f"a.{field}"] = _index(f"a.{field}", getattr(one, field))
    two = scene_of(reading, 2)
    if isinstance(two, Pair):
        two = _ordered(two)
        out["axis"] = _index("axis", two.relation)
        for slot, thing in (("p", two.first), ("q", two.second)):
            for field in _FIELDS:
                out[f"{slot}.{field}"] = _index(f"{slot}.{field}", getattr(thing, field))
    return np.asarray([out[n] for n in HEAD_NAMES], dtype=np.int64)


def _ordered(pair: Pair) -> Pair:
    """The same picture said with the left (or top) object first."""
    return pair if pair.relation in AXES else pair.converse()


def probabilities(logits: torch.Tensor) -> dict[str, torch.Tensor]:
    """Softmax of each head: name -> ``(B, classes)``."""
    return {name: logits[:, where].float().softmax(-1) for name, where in HEAD_SLICES.items()}


def _p(probs: dict[str, torch.Tensor], head: str, value: object) -> torch.Tensor:
    return probs[head][:, _index(head, value)]


def caption_probability(probs: dict[str, torch.Tensor],
                        scene: Scene) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """P(the checker grades ``scene`` all-correct) ``(B,)`` under independent heads, and each
    clause's probability (the critic's clause names; two objects add ``count``).

    One object: the checker grades the largest object, so the product of its heads, the
    background and "at least one object". Two objects: exactly two, the background, the axis
    and each object in the slot the caption's relation puts it (in "a left of b", ``a`` is
    ``p``; in "a right of b", ``q``). The clauses are read that way or with the objects
    swapped (the relation then wrong), whichever matches more of them, as the checker names
    the objects.
    """
    if isinstance(scene, Attributes):
        clauses = {f: _p(probs, f"a.{f}", getattr(scene, f))
                   for f in ("colour", "shape", "size", "position")}
        clauses["background"] = _p(probs, "background", scene.background)
        present = 1 - probs["count"][:, 0]
        return present * torch.stack(list(clauses.values())).prod(0), clauses
    swapped = scene.relation not in AXES
    slot = {"first": "q" if swapped else "p", "second": "p" if swapped else "q"}
    other = {"first": slot["second"], "second": slot["first"]}
    axis = _p(probs, "axis", _ordered(scene).relation)
    named, crossed = {}, {}
    for which in ("first", "second"):
        for field in _FIELDS:
            value = getattr(getattr(scene, which), field)
            named[f"{which}.{field}"] = _p(probs, f"{slot[which]}.{field}", value)
            crossed[f"{which}.{field}"] = _p(probs, f"{other[which]}.{field}", value)
    right = torch.stack(list(named.values())).prod(0) * axis
    named["relation"], crossed["relation"] = axis, torch.zeros_like(axis)
    # The checker names the objects the way that matches the most clauses; the critique does
    # too, by the expected number matched each way.
    as_named = torch.stack(list(named.values())).sum(0) >= torch.stack(
        list(crossed.values())).sum(0)
    clauses = {n: torch.where(as_named, named[n], crossed[n]) for n in PAIR_CLAUSES
               if n != "background"}
    count = probs["count"][:, COUNTS.index(2)]
    background = _p(probs, "background", scene.background)
    clauses["background"], clauses["count"] = background, count
    return count * background * right, clauses


#: Heads read from the colour branch; every other head from the geometry branch, which sees
#: only where the image differs from its background, never a colour.
COLOUR_HEADS = ("background", "a.colour", "p.colour", "q.colour")


def _branch(cin: int, width: int, squeeze: int) -> nn.Sequential:
    def block(cin: int, cout: int, kernel: int, stride: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2), nn.GroupNorm(8, cout),
                nn.ReLU()]

    # 64 -> 32 -> 16 -> 8: a small shape is ~12 px across, so the 5x5 stride-2 stem keeps its
    # outline (a star's points) at 32x32; the flattened 8x8 map keeps every object's place.
    half, most = (max(8, round(width * f / 8) * 8) for f in (0.5, 0.75))  # GroupNorm's 8
    return nn.Sequential(*block(cin, half, 5, 2), *block(half, most, 3, 2),
                         *block(most, width, 3, 2), *block(width, width, 3, 1),
                         *block(width, width, 3, 1), nn.Conv2d(width, squeeze, 1), nn.ReLU(),
                         nn.Flatten())


def _mlp(cin: int, hidden: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(cin, hidden), nn.ReLU(), nn.Dropout(0.1),
                         nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, cout))


class ReaderNet(nn.Module):
    """Images ``(B, 3, 64, 64)`` uint8 -> logits ``(B, LOGITS)``, every head's side by side
    (:data:`HEAD_SLICES`).

    Two branches, so that no head can learn which shapes come in which colours (held-out
    colour-shape pairs are never in training, and a net that sees both learns that a yellow
    thing is never a star): the geometry branch (count, shapes, sizes, places) reads only how
    far each pixel is from the background colour (the checker's foreground measure), the
    colour branch (background and the objects' colours) reads the pixels.
    """

    def __init__(self, width: int = 64, hidden: int = 256, squeeze: int = 24) -> None:
        super().__init__()
        self.config = {"width": width, "hidden": hidden, "squeeze": squeeze}
        colour_width = max(16, width // 2)
        self.geometry = _branch(3, width, squeeze)
        self.colour = _branch(5, colour_width, squeeze // 2)
        self.geometry_head = _mlp(squeeze * 64, hidden, self._size(False))
        self.colour_head = _mlp(squeeze // 2 * 64, hidden // 2, self._size(True))

    @staticmethod
    def _size(colour: bool) -> int:
        return sum(len(c) for name, c in HEADS if (name in COLOUR_HEADS) == colour)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.float() / 127.5 - 1.0
        b, _, h, w = x.shape
        ys = torch.linspace(-1, 1, h, device=x.device).view(1, 1, h, 1).expand(b, 1, h, w)
        xs = torch.linspace(-1, 1, w, device=x.device).view(1, 1, 1, w).expand(b, 1, h, w)
        border = torch.cat([x[:, :, 0], x[:, :, -1], x[:, :, 1:-1, 0], x[:, :, 1:-1, -1]], -1)
        background = border.median(-1).values.view(b, 3, 1, 1)
        # RGB distance from the background in [0, 1] (the checker's foreground starts at 60
        # of 255; every palette colour is >= 100 from every background, so a shape's inside is
        # 1 whatever its colour).
        distance = ((x - background) * 127.5).square().sum(1, keepdim=True).sqrt()
        mask = (distance / 100).clamp(0, 1)
        geometry = self.geometry_head(self.geometry(torch.cat([mask, xs, ys], dim=1)))
        colour = self.colour_head(self.colour(torch.cat([x, xs, ys], dim=1)))
        out, g, c = [], 0, 0
        for name, classes in HEADS:
            if name in COLOUR_HEADS:
                out.append(colour[:, c:c + len(classes)])
                c += len(classes)
            else:
                out.append(geometry[:, g:g + len(classes)])
                g += len(classes)
        return torch.cat(out, dim=1)


class ReaderMembers(nn.Module):
    """Readers trained alike from different seeds, read as one: each head's class
    probabilities are the members' mean (returned as their logarithms, so :func:`probabilities`
    gives that mean back). One training run errs where another does not: on the benchmark's
    images three members rank one prompt's candidates better than any of them alone
    (docs/judges.md)."""

    def __init__(self, members: list[ReaderNet]) -> None:
        super().__init__()
        self.members = nn.ModuleList(members)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        logits = [member(images).float() for member in self.members]
        return torch.cat([
            torch.stack([out[:, where].softmax(-1) for out in logits]).mean(0).log()
            for where in HEAD_SLICES.values()], dim=1)


def loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum over heads of the mean cross-entropy of the heads a reading answers."""
    total = logits.new_zeros(())
    for k, (name, _) in enumerate(HEADS):
        wanted = labels[:, k]
        if (wanted != IGNORE).any():
            total = total + nn.functional.cross_entropy(logits[:, HEAD_SLICES[name]].float(),
                                                        wanted, ignore_index=IGNORE)
    return total
