"""The VAE's training batch and loss: crops that hold the objects, outlines weighted up; and
the UNet's per-cell loss weights, from the same object masks."""

from __future__ import annotations

import numpy as np
import torch

from genloop.shapes import dataset
from genloop.shapes.scene import Attributes
from genloop.shapes.training.train_sd import (
    SDTrainConfig,
    crops_around,
    latent_weights,
    object_centres,
    reconstruction_loss,
    to_pixels,
    training_timesteps,
)


def _render(position: str, size: str = "small") -> np.ndarray:
    scene = Attributes(colour="red", shape="star", size=size, position=position,
                       background="white")
    return dataset.to_array(dataset.render(scene))


def test_object_centres_find_the_shape_where_the_scene_put_it() -> None:
    pool = np.stack([_render("left"), _render("top"), _render("centre", "large")])
    centres = object_centres(pool).numpy()
    (ly, lx), (ty, tx), (cy, cx) = centres
    assert lx < 22 and abs(ly - 32) < 3
    assert ty < 22 and abs(tx - 32) < 3
    assert abs(cy - 32) < 3 and abs(cx - 32) < 3


def test_crops_around_objects_hold_the_object_and_stay_inside_the_image() -> None:
    # Given small shapes near the border, cropped at 32 px with 8 px of jitter
    pool = np.stack([_render(p) for p in ("left", "right", "top", "bottom")])
    images = torch.from_numpy(pool)
    centres = object_centres(pool)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        pick = torch.arange(4)
        crops = crops_around(images, pick, centres, 32, 8, gen)
        assert crops.shape == (4, 32, 32, 3)
        # Then every crop holds most of its object's pixels (red on white)
        red = (crops[..., 0] > 200) & (crops[..., 1] < 80)
        full = (images[..., 0] > 200) & (images[..., 1] < 80)
        assert (red.sum(dim=(1, 2)) >= 0.9 * full.sum(dim=(1, 2))).all()


def test_the_foreground_weight_counts_an_error_on_the_shape_more_than_on_the_background() -> None:
    x = to_pixels(_render("centre", "large")[None])
    background = x[:, :, :1, :1]
    on_shape, off_shape = x.clone(), x.clone()
    on_shape[:, :, 32, 32] += 0.5
    off_shape[:, :, 2, 2] -= 0.5
    weighted = SDTrainConfig(vae_foreground_weight=4.0, vae_edge_weight=0.0)
    plain = SDTrainConfig(vae_foreground_weight=0.0, vae_edge_weight=0.0)
    assert reconstruction_loss(on_shape, x, background, plain) == reconstruction_loss(
        off_shape, x, background, plain)
    assert reconstruction_loss(on_shape, x, background, weighted) > 4 * reconstruction_loss(
        off_shape, x, background, weighted)


def test_unet_latent_weights_mark_the_cells_under_the_shape_and_only_those() -> None:
    # Given a small star on the left (64 px image, 16x16 latents: a cell is 4x4 pixels)
    pool = np.stack([_render("left"), _render("top")])
    weights = latent_weights(pool, 16, 10.0, "cpu")
    assert weights.shape == (2, 1, 16, 16)
    assert set(weights.unique().tolist()) == {1.0, 11.0}
    # Then the marked cells sit where the object is, and the far corners are plain
    (ly, lx), (ty, tx) = (object_centres(pool) / 4).long().tolist()
    assert weights[0, 0, ly, lx] == 11.0 and weights[1, 0, ty, tx] == 11.0
    assert weights[:, 0, 0, 0].eq(1.0).all() and weights[:, 0, 15, 15].eq(1.0).all()
    # and a small shape marks a few cells, not the field
    assert 4 <= int(weights[0].eq(11.0).sum()) <= 25
    assert latent_weights(pool, 16, 0.0, "cpu") is None


def _one_unet_step(tmp_path):
    """``trained(**fields)``: the UNet's weights after one seeded step on four renders, with
    those SDTrainConfig fields."""
    from genloop.shapes.models import build_tokenizer, build_vae
    from genloop.shapes.training.train_sd import train_unet

    pool = np.stack([_render(p) for p in ("left", "top", "centre", "right")])
    captions = [f"a small red star {p}, white background"
                for p in ("on the left", "at the top", "in the centre", "on the right")]
    tokenizer = build_tokenizer(tmp_path / "tokenizer")
    torch.manual_seed(0)
    vae = build_vae().eval().requires_grad_(False)

    def trained(**fields) -> torch.Tensor:
        cfg = SDTrainConfig(unet_steps=1, unet_batch=4, warmup=1, ema_decay=0.0, **fields)
        unet, _, _ = train_unet(cfg, vae, tokenizer, pool, captions, "cpu")
        return torch.cat([p.detach().flatten() for p in unet.parameters()])

    return trained


def test_the_unet_step_is_trained_on_the_weighted_loss(tmp_path) -> None:
    # Given one seeded UNet step on a few renders, with and without the object weights
    trained = _one_unet_step(tmp_path)

    # Then the step is reproducible, and the weight changes what it learns
    assert torch.equal(trained(unet_foreground_weight=0.0), trained(unet_foreground_weight=0.0))
    assert not torch.equal(trained(unet_foreground_weight=0.0),
                           trained(unet_foreground_weight=10.0))


def test_the_unet_step_draws_its_timesteps_as_configured(tmp_path) -> None:
    trained = _one_unet_step(tmp_path)
    assert not torch.equal(trained(unet_timestep_logit=None),
                           trained(unet_timestep_logit=(1.0, 1.0)))


def test_logit_normal_timesteps_lean_where_their_mean_says_and_stay_in_range() -> None:
    gen = torch.Generator().manual_seed(0)
    uniform = training_timesteps(None, 4000, 1000, gen, "cpu")
    noisy = training_timesteps((1.0, 1.0), 4000, 1000, gen, "cpu")
    clean = training_timesteps((-1.0, 1.0), 4000, 1000, gen, "cpu")
    for t in (uniform, noisy, clean):
        assert t.dtype == torch.long and 0 <= t.min() and t.max() <= 999
    assert abs((uniform >= 500).float().mean().item() - 0.5) < 0.05
    # sigmoid(N(1, 1)) > 0.5 with probability P(N(0, 1) > -1) = 0.84
    assert abs((noisy >= 500).float().mean().item() - 0.84) < 0.03
    assert abs((clean < 500).float().mean().item() - 0.84) < 0.03
