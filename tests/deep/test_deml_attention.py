"""DeML's object-attention module (Eq. 2-3) and crop-and-zoom, against slow references."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from scipy.spatial.distance import cdist
from sklearn.utils._param_validation import InvalidParameterError

from skdml.deep import random_walk_attention
from skdml.deep.deml import attention_boxes, crop_and_zoom, resize_attention


def transition_matrix(feature_map):
    """Eq. 2 for one (C, H, W) map, row-normalised, in float64 numpy (a slow reference)."""
    u = np.asarray(feature_map, dtype=np.float64).reshape(feature_map.shape[0], -1).T
    D = cdist(u, u)
    return D / D.sum(axis=1, keepdims=True)


def power_iteration(feature_map, n_steps):
    """The Markov-chain reading of Eq. 3, one image at a time, with an explicit loop."""
    P = transition_matrix(feature_map)
    m = np.full(P.shape[0], 1.0 / P.shape[0])
    for _ in range(n_steps):
        m = P.T @ m
    return m.reshape(feature_map.shape[1:])


def stationary(feature_map):
    """The chain's stationary vector: the eigenvector of P^T for the eigenvalue 1."""
    P = transition_matrix(feature_map)
    values, vectors = np.linalg.eig(P.T)
    v = np.real(vectors[:, np.argmin(np.abs(values - 1.0))])
    return (v / v.sum()).reshape(feature_map.shape[1:])


def textured(B=3, C=5, H=6, W=7, seed=0):
    return torch.randn(B, C, H, W, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)


@pytest.mark.parametrize("n_steps", [0, 1, 2, 10])
def test_walk_matches_an_independent_power_iteration(n_steps):
    fmap = textured()
    got = random_walk_attention(fmap, n_steps=n_steps)
    assert got.shape == (3, 6, 7) and got.dtype == torch.float64
    for b in range(3):
        np.testing.assert_allclose(got[b].numpy(), power_iteration(fmap[b].numpy(), n_steps),
                                   rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(got.sum(dim=(1, 2)).numpy(), 1.0, rtol=1e-12)


def test_float32_maps_agree_with_the_float64_reference():
    fmap = textured(seed=3) * 50 + 200  # large, shifted features: cancellation-prone
    got = random_walk_attention(fmap.float())
    assert got.dtype == torch.float32
    for b in range(3):
        np.testing.assert_allclose(got[b].numpy(), power_iteration(fmap[b].numpy(), 10),
                                   rtol=2e-4)


def test_long_walk_reaches_the_stationary_vector():
    fmap = textured(seed=1)
    got = random_walk_attention(fmap, n_steps=200)
    for b in range(3):
        pi = stationary(fmap[b].numpy())
        np.testing.assert_allclose(got[b].numpy(), pi, rtol=1e-8)
        # reversible chain (symmetric distances): pi is proportional to each node's out-mass
        u = fmap[b].numpy().reshape(5, -1).T
        degree = cdist(u, u).sum(axis=1)
        np.testing.assert_allclose(pi.ravel(), degree / degree.sum(), rtol=1e-8)


def test_the_literal_update_leaves_the_uniform_start_unchanged():
    """Why we read Eq. 3 as M <- D^T M: with row-normalised D, D @ uniform == uniform."""
    P = transition_matrix(textured()[0].numpy())
    uniform = np.full(P.shape[0], 1.0 / P.shape[0])
    np.testing.assert_allclose(P @ uniform, uniform, rtol=1e-12)
    assert np.abs(P.T @ uniform - uniform).max() > 1e-3  # the chain moves mass


def test_batched_equals_one_image_at_a_time():
    fmap = textured(B=5, seed=2).float()
    batched = random_walk_attention(fmap)
    single = torch.cat([random_walk_attention(fmap[b:b + 1]) for b in range(5)])
    torch.testing.assert_close(batched, single, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_mass_concentrates_on_a_small_distinct_patch(seed):
    """A textured background with a 3x3 patch unlike it: the walk attends to the patch."""
    g = torch.Generator().manual_seed(seed)
    C, H, W = 8, 16, 16
    base = torch.randn(C, 1, 1, generator=g)
    fmap = base + 0.3 * torch.randn(C, H, W, generator=g)
    y0, x0 = torch.randint(0, H - 3, (2,), generator=g).tolist()
    fmap[:, y0:y0 + 3, x0:x0 + 3] += 2.0 * torch.randn(C, 1, 1, generator=g).sign()
    m = random_walk_attention(fmap[None])[0]
    patch = torch.zeros(H, W, dtype=torch.bool)
    patch[y0:y0 + 3, x0:x0 + 3] = True
    assert patch.flatten()[m.flatten().argmax()]
    assert m[patch].mean() > 3 * m[~patch].mean()
    assert m[patch].min() > m[~patch].max()


def test_patch_on_an_exactly_uniform_background_is_periodic_but_attended_in_the_limit():
    """Why the walk is tested on textured maps: a patch on a constant background.

    The graph is then bipartite (patch <-> background, zero distances inside each),
    so the walk swings: odd steps put the background's mass on the patch, even steps
    bring the uniform start back. The chain's stationary vector (the eigenvector of
    D^T) still gives every patch location more mass than any background location.
    """
    C, H, W = 4, 10, 10
    fmap = torch.zeros(1, C, H, W, dtype=torch.float64)
    fmap[0, :, 2:5, 6:9] = 1.0
    patch = torch.zeros(H, W, dtype=torch.bool)
    patch[2:5, 6:9] = True
    n, n_patch = H * W, 9
    odd = random_walk_attention(fmap, n_steps=1)[0]
    np.testing.assert_allclose(odd[patch].numpy(), (n - n_patch) / n / n_patch, rtol=1e-12)
    np.testing.assert_allclose(odd[~patch].numpy(), n_patch / n / (n - n_patch), rtol=1e-12)
    even = random_walk_attention(fmap, n_steps=10)[0]
    np.testing.assert_allclose(even.numpy(), 1.0 / n, rtol=1e-10)
    pi = torch.as_tensor(stationary(fmap[0].numpy()))
    np.testing.assert_allclose(pi[patch].numpy(), 1 / (2 * n_patch), rtol=1e-8)
    np.testing.assert_allclose(pi[~patch].numpy(), 1 / (2 * (n - n_patch)), rtol=1e-8)
    assert pi[patch].min() > 5 * pi[~patch].max()


def test_a_constant_map_gives_uniform_attention():
    m = random_walk_attention(torch.ones(2, 3, 4, 4))
    torch.testing.assert_close(m, torch.full((2, 4, 4), 1 / 16))


def test_bad_maps_are_refused():
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        random_walk_attention(torch.zeros(3, 4, 4))
    with pytest.raises(ValueError, match="floating"):
        random_walk_attention(torch.zeros(1, 3, 4, 4, dtype=torch.long))
    bad = torch.zeros(1, 2, 3, 3)
    bad[0, 0, 1, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        random_walk_attention(bad)
    with pytest.raises(InvalidParameterError, match="n_steps"):
        random_walk_attention(torch.zeros(1, 2, 3, 3), n_steps=-1)
    with pytest.raises(InvalidParameterError, match="feature_map"):
        random_walk_attention(np.zeros((1, 2, 3, 3)))


def test_resize_keeps_unit_mass():
    m = random_walk_attention(textured(B=2, H=4, W=5))
    big = resize_attention(m, (16, 20))
    assert big.shape == (2, 16, 20)
    torch.testing.assert_close(big.sum(dim=(1, 2)), torch.ones(2, dtype=big.dtype))
    assert big.min() >= 0


@given(st.integers(0, 10_000), st.integers(8, 24), st.integers(8, 24), st.integers(1, 12),
       st.booleans())
def test_boxes_never_leave_the_image_and_hold_the_peak(seed, H, W, min_size, compose):
    g = torch.Generator().manual_seed(seed)
    att = torch.rand(4, H, W, generator=g) ** 8
    within = None
    if compose:
        lo = torch.rand(4, 2, generator=g) * 0.5
        within = torch.cat([lo, lo + 0.5], dim=1)
    boxes = attention_boxes(att, min_size=min_size, within=within, image_size=(H, W))
    assert boxes.shape == (4, 4)
    eps = 1e-6
    assert (boxes >= -eps).all() and (boxes <= 1 + eps).all()
    height, width = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    torch.testing.assert_close(height, width)  # the image's aspect ratio
    assert (height * H >= min(min_size, H) - 1e-4).all() or (height >= 1 - eps).all()
    # the attention peak (a pixel of the current input) lies inside its box
    peak = att.flatten(1).argmax(1)
    py, px = (peak // W + 0.5) / H, (peak % W + 0.5) / W
    if within is not None:
        py = within[:, 0] + py * (within[:, 2] - within[:, 0])
        px = within[:, 1] + px * (within[:, 3] - within[:, 1])
    assert ((boxes[:, 0] <= py + eps) & (py <= boxes[:, 2] + eps)).all()
    assert ((boxes[:, 1] <= px + eps) & (px <= boxes[:, 3] + eps)).all()


def test_box_of_a_block_is_its_bounding_square():
    att = torch.zeros(2, 16, 16)
    att[0, 4:8, 2:10] = 1.0   # 4 x 8 block: an 8 x 8 square around its centre (rows 2-10)
    att[1, 0:2, 14:16] = 1.0  # a corner: the 6-pixel minimum box is pushed inside
    boxes = attention_boxes(att, min_size=6)
    torch.testing.assert_close(boxes[0], torch.tensor([2, 2, 10, 10]) / 16)
    torch.testing.assert_close(boxes[1], torch.tensor([0, 10, 6, 16]) / 16)


def test_crop_and_zoom_samples_the_box_exactly_on_a_ramp():
    H, W = 12, 16
    ramp = torch.arange(W, dtype=torch.float64).expand(1, 1, H, W).clone()
    box = torch.tensor([[0.25, 0.25, 0.75, 0.75]], dtype=torch.float64)
    out = crop_and_zoom(ramp, box)
    i = torch.arange(W, dtype=torch.float64)
    expected = (0.25 + (i + 0.5) / W * 0.5) * W - 0.5  # bilinear is exact on a ramp
    torch.testing.assert_close(out[0, 0], expected.expand(H, W))
    full = torch.tensor([[0.0, 0.0, 1.0, 1.0]], dtype=torch.float64)
    torch.testing.assert_close(crop_and_zoom(ramp, full), ramp)  # the whole image: identity


def test_attention_boxes_compose_with_a_non_square_box():
    # rows scale by the box's height, columns by its width (square boxes cannot tell)
    a = torch.zeros(1, 16, 16)
    a[0, 8:16, 0:4] = 1.0  # bottom half, left quarter of the input
    within = torch.tensor([[0.0, 0.0, 0.25, 1.0]])  # the input: a wide strip of the original
    box = attention_boxes(a, min_size=1, within=within, image_size=(16, 16))[0]
    # in the original the region spans rows [0.125, 0.25] and columns [0, 0.25]: its bounding
    # square has side 0.25, centred at (0.1875, 0.125)
    torch.testing.assert_close(box, torch.tensor([0.0625, 0.0, 0.3125, 0.25]))


# audit 19 (mutation round 4): shift_and_empty
def test_a_float32_map_far_from_zero_gives_the_attention_of_the_centred_map():
    # distances are shift-invariant: an offset of 1e3 (post-ReLU activations of a large
    # backbone) must not drown them in the cancellation of |u|^2 + |v|^2 - 2 u.v
    u = torch.randn(1, 8, 4, 4, generator=torch.Generator().manual_seed(0))
    near = random_walk_attention(u)
    far = random_walk_attention(u + 1e3)
    np.testing.assert_allclose(far.numpy(), near.numpy(), rtol=1e-3, atol=1e-5)


def test_resizing_an_attention_map_without_mass_gives_the_uniform_map():
    out = resize_attention(torch.zeros(2, 4, 4), (8, 8))
    assert torch.isfinite(out).all()
    np.testing.assert_allclose(out.numpy(), np.full((2, 8, 8), 1 / 64), rtol=1e-6)
