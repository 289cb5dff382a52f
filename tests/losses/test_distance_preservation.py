"""DistancePreservation: a hand-computed value, a Python loop, autograd, scale and bad input.

pytorch-metric-learning has no distance-wise RKD term, so the loop below is the
independent reference.
"""

import math

import pytest
import torch

from skdml.losses import DistancePreservation, relative_distances


def loop_reference(z, x):
    """RKD-D written pair by pair in Python floats (Park et al. 2019, Eq. 3-5, Huber delta 1)."""
    z, x = z.flatten(1).tolist(), x.flatten(1).tolist()
    n = len(z)
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]

    def rel(a):
        d = {(i, j): math.dist(a[i], a[j]) for i, j in pairs}
        mean = sum(d.values()) / len(pairs)
        return {p: v / mean for p, v in d.items()}

    dz, dx = rel(z), rel(x)
    huber = lambda t: 0.5 * t * t if abs(t) < 1 else abs(t) - 0.5  # noqa: E731
    return sum(huber(dz[p] - dx[p]) for p in pairs) / len(pairs)


def test_hand_computed_value():
    # z: gaps 1, 2, 1 -> mean 4/3 -> 0.75, 1.5, 0.75; x: gaps 1, 3, 2 -> mean 2 -> 0.5, 1.5, 1
    # differences +-0.25 on two unordered pairs: 4 ordered pairs x 0.5 * 0.25^2 over 6
    z, x = torch.tensor([[0.0], [1.0], [2.0]]), torch.tensor([[0.0], [1.0], [3.0]])
    assert DistancePreservation()(z, x).item() == pytest.approx(4 * 0.5 * 0.0625 / 6, rel=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_matches_a_python_loop_including_the_linear_huber_branch(seed):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(7, 3, generator=g, dtype=torch.float64)
    x = torch.randn(7, 1, 4, 4, generator=g, dtype=torch.float64)
    x[0] *= 20.0  # one far outlier: some relative gaps exceed 1 (the L1 branch)
    ours = DistancePreservation()(z, x).item()
    assert ours == pytest.approx(loop_reference(z, x), rel=1e-9)
    assert abs(ours) > 0.05


def test_zero_for_a_similar_copy_and_positive_otherwise():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(10, 4, generator=g, dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(4, 4, generator=g, dtype=torch.float64))
    assert DistancePreservation()(3.0 * x @ q + 5.0, x).item() == pytest.approx(0.0, abs=1e-12)
    assert DistancePreservation()(x * torch.tensor([1.0, 1.0, 1.0, 10.0]), x).item() > 1e-3


def test_gradient_matches_finite_differences():
    g = torch.Generator().manual_seed(1)
    z = torch.randn(6, 3, generator=g, dtype=torch.float64, requires_grad=True)
    x = torch.randn(6, 5, generator=g, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: DistancePreservation()(t, x), (z,))


def test_reference_gets_no_gradient_and_coincident_points_stay_finite():
    x = torch.randn(5, 4, requires_grad=True)
    z = torch.zeros(5, 2)
    z[1:] = torch.randn(4, 2)
    z[1] = z[2]  # two coincident embeddings
    z.requires_grad_(True)
    loss = DistancePreservation()(z, x)
    loss.backward()
    assert x.grad is None
    assert torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0


@pytest.mark.parametrize("scale", [1e-30, 1e-6, 1.0, 1e6, 1e30])
def test_any_input_scale_gives_the_same_finite_value(scale):
    g = torch.Generator().manual_seed(2)
    z, x = torch.randn(8, 3, generator=g), torch.randn(8, 6, generator=g)
    base = DistancePreservation()(z, x).item()
    scaled = DistancePreservation()(z, x * scale).item()
    assert math.isfinite(scaled) and scaled == pytest.approx(base, rel=1e-5)
    assert torch.isfinite(relative_distances(x * scale)).all()


def test_one_sample_is_zero_and_attached():
    z = torch.randn(1, 3, requires_grad=True)
    loss = DistancePreservation()(z, torch.randn(1, 4))
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(z.grad, torch.zeros(1, 3))


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="same samples"):
        DistancePreservation()(torch.randn(4, 3), torch.randn(5, 3))
    with pytest.raises(ValueError, match="embeddings"):
        DistancePreservation()(torch.randn(4), torch.randn(4, 3))


def test_a_collapsed_batch_has_no_relative_distances_and_costs_the_term():
    # every clamped distance equal made every ratio 1: a collapsed embedding matched any
    # reference and cost 0, the failure this term exists to prevent
    from skdml.losses import DistancePreservation, relative_distances

    for batch in (torch.zeros(3, 2), torch.full((3, 2), 5.0)):
        assert torch.equal(relative_distances(batch), torch.zeros(3, 3))
    z = torch.full((3, 2), 0.7, requires_grad=True)
    loss = DistancePreservation()(z, torch.eye(3))  # equilateral reference: ratios 1
    assert float(loss) == pytest.approx(0.5)  # huber(0 - 1) on every pair
    loss.backward()
    assert torch.isfinite(z.grad).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_distance_preservation_returns_the_embeddings_dtype(dtype):
    from skdml.losses import DistancePreservation

    torch.manual_seed(0)
    z, x = torch.randn(8, 3), torch.randn(8, 5)
    got = DistancePreservation()(z.to(dtype), x)
    assert got.dtype == dtype
    assert float(got) == pytest.approx(float(DistancePreservation()(z.to(dtype).float(), x)),
                                       rel=1e-2)
