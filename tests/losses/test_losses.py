"""Tests of skdml.losses: hand-written loops, gradient checks, PML parity, edge cases.

The reference implementations below are plain Python/numpy loops written
directly from the papers' formulas (ECAML Eq. 3, 8-11; DeML Eq. 5; JRD Eq.
8-11), independent of the vectorised torch code under test.
"""

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.autograd import gradcheck

from skdml.losses import (
    LOSSES,
    REGULARIZERS,
    AMSoftmaxLoss,
    BinomialDevianceLoss,
    EnergyConfusion,
    JRSRegularizer,
    LMNNLoss,
    MultiSimilarityLoss,
    NPairLoss,
    TripletLoss,
    class_pair_energies,
    deml_pair_weights,
    get_loss,
    get_regularizer,
)

pml = pytest.importorskip("pytorch_metric_learning")
from pytorch_metric_learning import distances as pml_distances  # noqa: E402
from pytorch_metric_learning import losses as pml_losses  # noqa: E402
from pytorch_metric_learning import reducers as pml_reducers  # noqa: E402

SEEDS = [0, 1, 2]


def make_batch(seed, n_classes=3, per_class=3, dim=4, shuffle=True, dtype=torch.float64):
    """A small random P x K batch (shuffled, so classes are interleaved)."""
    rng = np.random.RandomState(seed)
    y = np.repeat(np.arange(n_classes), per_class)
    if shuffle:
        y = rng.permutation(y)
    x = rng.randn(len(y), dim)
    return torch.tensor(x, dtype=dtype), torch.tensor(y)


def unequal_batch(seed, dim=3):
    """Classes of sizes 1, 2 and 4 (a singleton class has no positive)."""
    rng = np.random.RandomState(seed)
    y = rng.permutation(np.array([5, 7, 7, 2, 2, 2, 2]))
    return torch.tensor(rng.randn(len(y), dim)), torch.tensor(y)


# ----------------------------------------------------------------- reference loops
def _unit(v):
    return v / np.linalg.norm(v)


def loop_triplet(x, y, margin, reduction):
    x, y = x.detach().numpy(), y.numpy()
    n = len(y)
    losses = []
    for a, p, q in itertools.product(range(n), repeat=3):
        if a != p and y[a] == y[p] and y[q] != y[a]:
            xa, xp, xn = _unit(x[a]), _unit(x[p]), _unit(x[q])
            d_ap = np.sum((xa - xp) ** 2)
            d_an = np.sum((xa - xn) ** 2)
            losses.append(max(0.0, d_ap - d_an + margin))
    if not losses:
        return 0.0
    if reduction == "mean":
        return float(np.mean(losses))
    active = [v for v in losses if v > 0]
    return float(np.mean(active)) if active else 0.0


def loop_npair_all(x, y):
    x, y = x.detach().numpy(), y.numpy()
    n = len(y)
    losses = []
    for i in range(n):
        for p in range(n):
            if p == i or y[p] != y[i]:
                continue
            total = 0.0
            for j in range(n):
                if y[j] != y[i]:
                    total += math.exp(x[i] @ x[j] - x[i] @ x[p])
            losses.append(math.log(1.0 + total))
    return float(np.mean(losses)) if losses else 0.0


def loop_npair_sohn(x, y):
    x, y = x.detach().numpy(), y.numpy()
    anchors, positives = [], []
    for c in sorted(set(y.tolist())):
        idx = [i for i in range(len(y)) if y[i] == c]
        if len(idx) >= 2:
            anchors.append(x[idx[0]])
            positives.append(x[idx[1]])
    losses = []
    for i, a in enumerate(anchors):
        logits = [a @ p for p in positives]
        losses.append(-logits[i] + math.log(sum(math.exp(v) for v in logits)))
    return float(np.mean(losses)) if losses else 0.0


def loop_binomial(x, y, scale=2.0, margin=0.5, eta=25.0, mode="mean"):
    x, y = x.detach().numpy(), y.numpy()
    n = len(y)
    n_pos = sum(1 for i in range(n) for j in range(n) if i != j and y[i] == y[j])
    n_neg = sum(1 for i in range(n) for j in range(n) if y[i] != y[j])
    total = 0.0
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            s = 1.0 if y[i] == y[j] else 0.0
            e = 1.0 if s == 1.0 else eta
            d = _unit(x[i]) @ _unit(x[j])
            term = math.log(1.0 + math.exp(-(2 * s - 1) * scale * (d - margin) * e))
            if mode == "balanced":
                term /= n_pos if s == 1.0 else n_neg
            total += term
    if mode == "mean":
        total /= n * (n - 1)
    return total


def loop_amsoftmax(x, y, proxies, scale, margin):
    x, y, w = x.detach().numpy(), y.numpy(), proxies.detach().numpy()
    losses = []
    for i in range(len(y)):
        cos = [_unit(x[i]) @ _unit(w[c]) for c in range(len(w))]
        target = math.exp(scale * (cos[y[i]] - margin))
        others = sum(math.exp(scale * cos[c]) for c in range(len(w)) if c != y[i])
        losses.append(-math.log(target / (target + others)))
    return float(np.mean(losses))


def loop_energy(x, y, log=True, reduction="mean"):
    x, y = x.detach().numpy(), y.numpy()
    classes = sorted(set(y.tolist()))
    terms = []
    for ci in classes:
        for cj in classes:
            if ci == cj:
                continue
            xi, xj = x[y == ci], x[y == cj]
            e = np.mean([np.sum((a - b) ** 2) for a in xi for b in xj])  # p_ij = 1/(n_I n_J)
            terms.append(math.log(1.0 + e) if log else e)
    if not terms:
        return 0.0
    return float(np.sum(terms) if reduction == "sum" else np.mean(terms))


def loop_jrs(reps, y, bandwidths=(0.5, 1.0, 2.0), single=(-1,), taus=None):
    reps = [r.detach().numpy() for r in reps]
    y = y.numpy()
    n, n_layers = len(y), len(reps)
    single = {i % n_layers for i in single}
    if taus is None:
        taus = []
        for r in reps:
            d = [np.sum((r[i] - r[j]) ** 2) for i in range(n) for j in range(n) if i != j]
            taus.append(np.mean(d))
    values = []
    for i in range(n):
        for j in range(n):
            if y[i] == y[j]:
                continue
            prod = 1.0
            for l_, r in enumerate(reps):
                d = np.sum((r[i] - r[j]) ** 2)
                mults = (1.0,) if l_ in single else bandwidths
                prod *= sum(math.exp(-d / (b * taus[l_])) for b in mults)
            values.append(prod)
    return float(np.mean(values)) if values else 0.0


# ------------------------------------------------------------------ vs loops
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("reduction", ["mean", "mean_nonzero"])
@pytest.mark.parametrize("margin", [0.1, 1.0])
def test_triplet_matches_loop(seed, reduction, margin):
    x, y = make_batch(seed)
    got = TripletLoss(margin=margin, reduction=reduction)(x, y).item()
    assert got == pytest.approx(loop_triplet(x, y, margin, reduction), rel=1e-10, abs=1e-12)
    x, y = unequal_batch(seed)
    got = TripletLoss(margin=margin, reduction=reduction)(x, y).item()
    assert got == pytest.approx(loop_triplet(x, y, margin, reduction), rel=1e-10, abs=1e-12)


def test_triplet_active_is_mean_of_positive_terms_only():
    x, y = make_batch(0, per_class=4)
    all_ = TripletLoss(margin=0.1)(x, y).item()
    active = TripletLoss(margin=0.1, reduction="mean_nonzero")(x, y).item()
    assert 0 < all_ < active  # some, not all, triplets are active here


@pytest.mark.parametrize("seed", SEEDS)
def test_npair_all_matches_loop(seed):
    for x, y in (make_batch(seed), make_batch(seed, per_class=2), unequal_batch(seed)):
        assert NPairLoss()(x, y).item() == pytest.approx(loop_npair_all(x, y), rel=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
def test_npair_sohn_matches_loop(seed):
    for x, y in (make_batch(seed), make_batch(seed, per_class=2), unequal_batch(seed)):
        got = NPairLoss(tuples="sohn")(x, y).item()
        assert got == pytest.approx(loop_npair_sohn(x, y), rel=1e-10)


def test_npair_l2_reg_adds_mean_squared_norm():
    x, y = make_batch(0)
    base = NPairLoss()(x, y)
    reg = NPairLoss(l2_reg=0.01)(x, y)
    expected = base + 0.01 * (x**2).sum(dim=1).mean()
    assert reg.item() == pytest.approx(expected.item(), rel=1e-12)


def test_npair_on_two_per_class_batch_is_eq9_over_batch_size():
    # ECAML Eq. 9 (a sum over the N anchors) / N when every class has 2 samples
    x, y = make_batch(3, n_classes=4, per_class=2)
    xs, ys = x.numpy(), y.numpy()
    total = 0.0
    for i in range(len(ys)):
        ip = [k for k in range(len(ys)) if k != i and ys[k] == ys[i]][0]
        s = sum(math.exp(xs[i] @ xs[j] - xs[i] @ xs[ip]) for j in range(len(ys)) if ys[j] != ys[i])
        total += math.log(1 + s)
    assert NPairLoss()(x, y).item() == pytest.approx(total / len(ys), rel=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kwargs, mode, factor", [
    ({"reduction": "mean"}, "mean", 1.0),
    ({"reduction": "sum"}, "sum", 1.0),
    ({"pair_weighting": "balanced", "reduction": "sum"}, "balanced", 1.0),  # DeML Eq. 5
    ({"pair_weighting": "balanced", "reduction": "mean"}, "balanced", 0.5),  # weighted mean
])
def test_binomial_matches_loop(seed, kwargs, mode, factor):
    for x, y in (make_batch(seed), unequal_batch(seed)):
        got = BinomialDevianceLoss(**kwargs)(x, y).item()
        assert got == pytest.approx(factor * loop_binomial(x, y, mode=mode), rel=1e-10)


def test_binomial_custom_parameters_match_loop():
    x, y = make_batch(4)
    loss = BinomialDevianceLoss(scale=3.0, margin=0.2, negative_weight=35.0, reduction="sum")
    assert loss(x, y).item() == pytest.approx(
        loop_binomial(x, y, scale=3.0, margin=0.2, eta=35.0, mode="sum"), rel=1e-10
    )


def test_binomial_pair_weights_deml():
    x, y = unequal_batch(1)
    loss = BinomialDevianceLoss()
    w = deml_pair_weights(y)
    pos = (y[:, None] == y[None, :]) & ~torch.eye(len(y), dtype=torch.bool)
    neg = y[:, None] != y[None, :]
    # 1/w_pq: each positive pair weighs 1/#positive pairs, each negative 1/#negative pairs
    assert torch.allclose(w[pos], torch.full_like(w[pos], 1.0 / pos.sum().item()))
    assert torch.allclose(w[neg], torch.full_like(w[neg], 1.0 / neg.sum().item()))
    assert torch.all(w.diagonal() == 0)
    weighted = loss(x, y, pair_weights=w).item()
    assert weighted == pytest.approx(loop_binomial(x, y, mode="balanced"), rel=1e-10)
    ones = loss(x, y, pair_weights=torch.ones(len(y), len(y))).item()
    assert ones == pytest.approx(loop_binomial(x, y, mode="sum"), rel=1e-10)
    # arbitrary weights: weighted sum of the per-pair losses
    rng = np.random.RandomState(0)
    rw = torch.tensor(rng.rand(len(y), len(y)))
    pl = loss.pair_losses(x, y)
    assert loss(x, y, pair_weights=rw).item() == pytest.approx((pl * rw).sum().item())
    with pytest.raises(ValueError, match="pair_weights"):
        loss(x, y, pair_weights=torch.ones(2, 2))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("margin", [0.1, 0.35])
def test_amsoftmax_matches_loop(seed, margin):
    x, y = make_batch(seed, n_classes=4, dim=5)
    torch.manual_seed(seed)
    loss = AMSoftmaxLoss(4, 5, scale=20.0, margin=margin).double()
    got = loss(x, y).item()
    assert got == pytest.approx(loop_amsoftmax(x, y, loss.proxies, 20.0, margin), rel=1e-10)


def test_amsoftmax_class_cosines():
    x, y = make_batch(0, n_classes=3, dim=4)
    torch.manual_seed(0)
    loss = AMSoftmaxLoss(3, 4).double()
    cos = loss.class_cosines(x)
    assert cos.shape == (len(y), 3)
    w = loss.proxies.detach().numpy()
    for i in range(len(y)):
        for c in range(3):
            assert cos[i, c].item() == pytest.approx(_unit(x[i].numpy()) @ _unit(w[c]))
    # passing precomputed cosines gives the same loss
    assert loss(x, y, cosines=cos).item() == pytest.approx(loss(x, y).item())


def test_amsoftmax_proxies_init_is_seeded_and_learnable():
    torch.manual_seed(3)
    a = AMSoftmaxLoss(5, 7)
    torch.manual_seed(3)
    b = AMSoftmaxLoss(5, 7)
    assert a.proxies.shape == (5, 7)
    assert torch.equal(a.proxies, b.proxies)
    assert [name for name, _ in a.named_parameters()] == ["proxies"]
    g = torch.Generator().manual_seed(1)
    a.reset_parameters(generator=g)
    assert not torch.equal(a.proxies, b.proxies)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("log", [True, False])
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_energy_confusion_matches_loop(seed, log, reduction):
    for x, y in (make_batch(seed), unequal_batch(seed)):
        got = EnergyConfusion(log=log, reduction=reduction)(x, y).item()
        assert got == pytest.approx(loop_energy(x, y, log, reduction), rel=1e-10)


def test_energy_confusion_float32_far_from_origin():
    # the class-mean formula must not lose the small distances to cancellation
    x, y = make_batch(25, dim=8)
    x = 1e3 + 0.01 * x
    expected = loop_energy(x, y, log=False)
    got = EnergyConfusion(log=False)(x.float(), y).item()
    assert got == pytest.approx(expected, rel=1e-3)


def test_large_magnitudes_stay_finite():
    x, y = make_batch(26, dim=3)
    for name, loss in _all_losses():
        xg = (1e3 * x).requires_grad_(True)
        value = loss(xg, y)
        value.backward()
        assert torch.isfinite(value), name
        assert torch.all(torch.isfinite(xg.grad)), name


def test_class_pair_energies_diagonal_and_symmetry():
    x, y = unequal_batch(2)
    e = class_pair_energies(x, y)
    assert torch.allclose(e, e.T)
    xs, ys = x.numpy(), y.numpy()
    for k, c in enumerate(sorted(set(ys.tolist()))):
        xc = xs[ys == c]
        within = np.mean([np.sum((a - b) ** 2) for a in xc for b in xc])
        assert e[k, k].item() == pytest.approx(within, abs=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
def test_jrs_matches_loop(seed):
    x, y = make_batch(seed, dim=5)
    rng = np.random.RandomState(seed + 10)
    h = torch.tensor(rng.randn(len(y), 3))
    c = torch.tensor(rng.randn(len(y), 2))
    reps = [x, h, c]
    assert JRSRegularizer()(reps, y).item() == pytest.approx(loop_jrs(reps, y), rel=1e-10)
    # the single-kernel layer is configurable
    got = JRSRegularizer(single_kernel_layers=(0, 1))(reps, y).item()
    assert got == pytest.approx(loop_jrs(reps, y, single=(0, 1)), rel=1e-10)
    got = JRSRegularizer(single_kernel_layers=())(reps, y).item()
    assert got == pytest.approx(loop_jrs(reps, y, single=()), rel=1e-10)
    got = JRSRegularizer(bandwidths=(0.25, 4.0))(reps, y).item()
    assert got == pytest.approx(loop_jrs(reps, y, bandwidths=(0.25, 4.0)), rel=1e-10)


def test_jrs_single_kernel_layer_differs_from_mixture_and_is_bounded():
    x, y = make_batch(5)
    single = JRSRegularizer(single_kernel_layers=(-1,))([x], y).item()
    mixture = JRSRegularizer(single_kernel_layers=())([x], y).item()
    assert 0 < single <= 1.0  # one Gaussian kernel
    assert single < mixture <= 3.0  # sum of three Gaussian kernels
    # the single kernel's bandwidth is tau itself: same as bandwidths=(1.0,)
    one = JRSRegularizer(bandwidths=(1.0,), single_kernel_layers=())([x], y).item()
    assert single == pytest.approx(one, rel=1e-12)


def test_jrs_self_adaptive_bandwidth_is_scale_invariant():
    x, y = make_batch(6)
    h = torch.tensor(np.random.RandomState(0).randn(len(y), 3))
    jrs = JRSRegularizer()
    ref = jrs([x, h], y).item()
    assert jrs([10.0 * x, 0.1 * h], y).item() == pytest.approx(ref, rel=1e-10)


def test_jrs_layer_weights():
    x, y = make_batch(7)
    h = torch.tensor(np.random.RandomState(1).randn(len(y), 3))
    jrs = JRSRegularizer(layer_weights=(1.0, 0.0))
    # a weight of 0 drops the layer (then [x] alone, whose kernel is the mixture)
    assert jrs([x, h], y).item() == pytest.approx(
        JRSRegularizer(single_kernel_layers=())([x], y).item(), rel=1e-12
    )
    jrs2 = JRSRegularizer(layer_weights=(2.0, 1.0))
    k0 = JRSRegularizer().layer_kernel(x, multi=True)
    k1 = JRSRegularizer().layer_kernel(h, multi=False)
    neg = y[:, None] != y[None, :]
    assert jrs2([x, h], y).item() == pytest.approx((k0**2 * k1)[neg].mean().item(), rel=1e-12)
    with pytest.raises(ValueError, match="layer_weights"):
        jrs2([x], y)


def test_jrs_detach_tau_gradient():
    """detach_tau=True: the gradient is that of the kernel with tau frozen."""
    x, y = make_batch(8, dim=3)
    h = torch.tensor(np.random.RandomState(2).randn(len(y), 2))
    taus = []
    for r in (x, h):
        d = torch.cdist(r, r) ** 2
        taus.append(d[~torch.eye(len(y), dtype=torch.bool)].mean().item())

    xg = x.clone().requires_grad_(True)
    JRSRegularizer(detach_tau=True)([xg, h], y).backward()
    # central finite differences of the frozen-tau loop
    eps = 1e-6
    num = np.zeros(x.shape)
    for i, j in itertools.product(range(x.shape[0]), range(x.shape[1])):
        xp, xm = x.clone(), x.clone()
        xp[i, j] += eps
        xm[i, j] -= eps
        num[i, j] = (loop_jrs([xp, h], y, taus=taus) - loop_jrs([xm, h], y, taus=taus)) / (2 * eps)
    np.testing.assert_allclose(xg.grad.numpy(), num, rtol=1e-5, atol=1e-8)

    xg2 = x.clone().requires_grad_(True)
    JRSRegularizer(detach_tau=False)([xg2, h], y).backward()
    assert not torch.allclose(xg.grad, xg2.grad)


@settings(max_examples=20, deadline=None)
@given(
    labels=st.lists(st.integers(0, 3), min_size=2, max_size=9),
    dim=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_property_random_batches_match_loops(labels, dim, seed):
    """Arbitrary label patterns (singletons, one class, unequal sizes) vs the loops."""
    y = torch.tensor(labels)
    x = torch.tensor(np.random.RandomState(seed).randn(len(labels), dim))
    assert TripletLoss()(x, y).item() == pytest.approx(loop_triplet(x, y, 0.1, "mean"), rel=1e-9, abs=1e-10)
    assert NPairLoss()(x, y).item() == pytest.approx(loop_npair_all(x, y), rel=1e-9, abs=1e-10)
    assert NPairLoss(tuples="sohn")(x, y).item() == pytest.approx(loop_npair_sohn(x, y), rel=1e-9, abs=1e-10)
    assert BinomialDevianceLoss()(x, y).item() == pytest.approx(loop_binomial(x, y), rel=1e-9, abs=1e-10)
    assert EnergyConfusion()(x, y).item() == pytest.approx(loop_energy(x, y), rel=1e-9, abs=1e-9)
    assert JRSRegularizer()([x, x[:, :1]], y).item() == pytest.approx(
        loop_jrs([x, x[:, :1]], y), rel=1e-9, abs=1e-10
    )


# --------------------------------------------------------------- gradient checks
def _grad_inputs(seed, **kw):
    x, y = make_batch(seed, **kw)
    return x.clone().requires_grad_(True), y


@pytest.mark.parametrize(
    "loss",
    [
        TripletLoss(margin=0.5),
        TripletLoss(margin=0.5, reduction="mean_nonzero"),
        NPairLoss(),
        NPairLoss(tuples="sohn", l2_reg=0.01),
        BinomialDevianceLoss(),
        BinomialDevianceLoss(pair_weighting="balanced"),
        EnergyConfusion(),
        EnergyConfusion(log=False, reduction="sum"),
    ],
    ids=repr,
)
def test_gradcheck_losses(loss):
    x, y = _grad_inputs(11)
    assert gradcheck(lambda e: loss(e, y), (x,), eps=1e-6, atol=1e-5)


def test_gradcheck_amsoftmax_embeddings_and_proxies():
    x, y = _grad_inputs(12, n_classes=3)
    torch.manual_seed(0)
    loss = AMSoftmaxLoss(3, x.shape[1], scale=5.0).double()
    w = loss.proxies.detach().clone().requires_grad_(True)

    def f(e, proxies):
        with torch.no_grad():
            loss.proxies.copy_(proxies)
        normalize = torch.nn.functional.normalize
        cos = normalize(e, dim=1) @ normalize(proxies, dim=1).T
        return loss(e, y, cosines=cos)

    assert gradcheck(f, (x, w), eps=1e-6, atol=1e-5)
    # and the module's own parameter receives the same gradient
    loss.zero_grad()
    loss(x, y).backward()
    w.grad = None
    f(x, w).backward()
    assert torch.allclose(loss.proxies.grad, w.grad)


def test_gradcheck_jrs_with_tau_in_graph():
    x, y = _grad_inputs(13, dim=3)
    h = torch.tensor(np.random.RandomState(3).randn(len(y), 2), requires_grad=True)
    jrs = JRSRegularizer(detach_tau=False)
    assert gradcheck(lambda a, b: jrs([a, b], y), (x, h), eps=1e-6, atol=1e-5)


# ------------------------------------------------------------- PML parity
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    "reduction, reducer",
    [("mean", pml_reducers.MeanReducer), ("mean_nonzero", pml_reducers.AvgNonZeroReducer)],
)
def test_triplet_parity_with_pml(seed, reduction, reducer):
    x, y = make_batch(seed, n_classes=4, per_class=4, dim=6)
    ours = TripletLoss(margin=0.1, reduction=reduction)
    theirs = pml_losses.TripletMarginLoss(
        margin=0.1, distance=pml_distances.LpDistance(power=2), reducer=reducer()
    )
    xa = x.clone().requires_grad_(True)
    xb = x.clone().requires_grad_(True)
    la, lb = ours(xa, y), theirs(xb, y)
    la.backward()
    lb.backward()
    assert la.item() == pytest.approx(lb.item(), rel=1e-9, abs=1e-12)
    assert torch.allclose(xa.grad, xb.grad, rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("seed", SEEDS)
def test_npair_sohn_parity_with_pml(seed):
    for x, y in (make_batch(seed, n_classes=4, per_class=2), make_batch(seed), unequal_batch(seed)):
        theirs = pml_losses.NPairsLoss(
            distance=pml_distances.DotProductSimilarity(normalize_embeddings=False)
        )
        xa = x.clone().requires_grad_(True)
        xb = x.clone().requires_grad_(True)
        la, lb = NPairLoss(tuples="sohn")(xa, y), theirs(xb, y)
        la.backward()
        lb.backward()
        assert la.item() == pytest.approx(lb.item(), rel=1e-10)
        assert torch.allclose(xa.grad, xb.grad, atol=1e-12)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("margin, scale", [(0.1, 20.0), (0.35, 64.0)])
def test_amsoftmax_parity_with_pml_cosface(seed, margin, scale):
    x, y = make_batch(seed, n_classes=5, per_class=3, dim=6)
    torch.manual_seed(seed)
    ours = AMSoftmaxLoss(5, 6, scale=scale, margin=margin).double()
    theirs = pml_losses.CosFaceLoss(num_classes=5, embedding_size=6, margin=margin, scale=scale)
    with torch.no_grad():
        theirs.W.data = ours.proxies.detach().clone().T.contiguous()  # PML stores (d, C)
    xa = x.clone().requires_grad_(True)
    xb = x.clone().requires_grad_(True)
    la, lb = ours(xa, y), theirs(xb, y)
    la.backward()
    lb.backward()
    assert la.item() == pytest.approx(lb.item(), rel=1e-9)
    assert torch.allclose(xa.grad, xb.grad, atol=1e-10)
    assert torch.allclose(ours.proxies.grad, theirs.W.grad.T, atol=1e-10)


# --------------------------------------------------- behaviour the papers rely on
def test_energy_confusion_gradient_pulls_classes_together():
    x, y = make_batch(21, n_classes=2, per_class=4, dim=3)
    for log in (False, True):
        xg = x.clone().requires_grad_(True)
        EnergyConfusion(log=log)(xg, y).backward()
        for i in range(len(y)):
            other_mean = x[y != y[i]].mean(dim=0)
            step = -xg.grad[i]  # gradient descent direction of +lambda * EC
            # exactly along (mu_J - x_i) for two classes
            cos = torch.nn.functional.cosine_similarity(step, other_mean - x[i], dim=0)
            assert cos.item() == pytest.approx(1.0, abs=1e-10)
        # a small descent step brings the class means closer
        with torch.no_grad():
            moved = x - 0.01 * xg.grad
        gap_before = (x[y == 0].mean(0) - x[y == 1].mean(0)).norm()
        gap_after = (moved[y == 0].mean(0) - moved[y == 1].mean(0)).norm()
        assert gap_after < gap_before


def test_energy_confusion_sum_counts_ordered_class_pairs():
    x, y = make_batch(22, n_classes=4)
    e = class_pair_energies(x, y)
    off = ~torch.eye(4, dtype=torch.bool)
    assert EnergyConfusion(log=False, reduction="sum")(x, y).item() == pytest.approx(
        e[off].sum().item())
    assert EnergyConfusion(log=False, reduction="mean")(x, y).item() == pytest.approx(
        e[off].sum().item() / 12
    )


def test_triplet_invariant_to_embedding_scale():
    x, y = make_batch(23)
    assert TripletLoss()(3.0 * x, y).item() == pytest.approx(TripletLoss()(x, y).item())


def test_binomial_invariant_to_embedding_scale():
    x, y = make_batch(24)
    loss = BinomialDevianceLoss()
    assert loss(5.0 * x, y).item() == pytest.approx(loss(x, y).item())


# ----------------------------------------------------------- degenerate batches
def _all_losses():
    return [
        ("triplet", TripletLoss()),
        ("triplet-nonzero", TripletLoss(reduction="mean_nonzero")),
        ("npair", NPairLoss()),
        ("npair-sohn", NPairLoss(tuples="sohn")),
        ("binomial", BinomialDevianceLoss()),
        ("binomial-balanced", BinomialDevianceLoss(pair_weighting="balanced")),
        ("ec", EnergyConfusion()),
        ("jrs", lambda e, lab: JRSRegularizer()([e, e[..., :2]], lab)),
        ("amsoftmax", AMSoftmaxLoss(10, 3).double()),
    ]


DEGENERATE = {
    "one-class": [0, 0, 0, 0],
    "no-positives": [0, 1, 2, 3],
    "one-sample": [2],
    "duplicates": [0, 0, 1, 1],
}


@pytest.mark.parametrize("case", sorted(DEGENERATE))
@pytest.mark.parametrize("name, loss", _all_losses(), ids=[n for n, _ in _all_losses()])
def test_degenerate_batches_finite(case, name, loss):
    labels = torch.tensor(DEGENERATE[case])
    rng = np.random.RandomState(0)
    x = torch.tensor(rng.randn(len(labels), 3))
    if case == "duplicates":  # zero distances within and between classes
        x = torch.tensor([[1.0, 2.0, 0.5]] * len(labels), dtype=torch.float64)
    x.requires_grad_(True)
    value = loss(x, labels)
    assert value.ndim == 0
    value.backward()
    assert torch.isfinite(value)
    assert torch.all(torch.isfinite(x.grad))


@pytest.mark.parametrize("name, loss", _all_losses()[:-1], ids=[n for n, _ in _all_losses()[:-1]])
def test_no_valid_tuple_gives_zero_with_graph(name, loss):
    # one class: no negatives for anyone (EC, JRS, binomial negatives) ...
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    labels = torch.zeros(4, dtype=torch.long)
    value = loss(x, labels)
    value.backward()
    assert value.requires_grad
    if name.startswith(("triplet", "ec", "jrs", "npair")):
        assert value.item() == 0.0
        assert torch.all(x.grad == 0)


def test_empty_batch_gives_zero():
    x = torch.zeros(0, 3, dtype=torch.float64, requires_grad=True)
    labels = torch.zeros(0, dtype=torch.long)
    for name, loss in _all_losses():
        value = loss(x, labels)
        assert value.item() == 0.0, name


# ---------------------------------------------------------- dtypes and devices
@pytest.mark.parametrize(
    "label_dtype", [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]
)
def test_any_integer_label_dtype(label_dtype):
    x, y = make_batch(30, dim=3)
    for name, loss in _all_losses():
        ref = loss(x, y).item()
        assert loss(x, y.to(label_dtype)).item() == pytest.approx(ref), name
    # numpy labels are accepted too
    assert TripletLoss()(x, y.numpy().astype(np.int32)).item() == pytest.approx(
        TripletLoss()(x, y).item()
    )


def test_float_labels_rejected():
    x, y = make_batch(31, dim=3)
    for name, loss in _all_losses():
        with pytest.raises(ValueError, match="integer"):
            loss(x, y.double())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_output_dtype_follows_input(dtype):
    x, y = make_batch(32, dim=3, dtype=dtype)
    for name, loss in _all_losses():
        assert loss(x, y).dtype == dtype, name


def test_float32_close_to_float64():
    x, y = make_batch(33, dim=3)
    for name, loss in _all_losses():
        v64 = loss(x, y).item()
        v32 = loss(x.float(), y).item()
        assert v32 == pytest.approx(v64, rel=1e-4, abs=1e-6), name


def test_bad_shapes_raise():
    x, y = make_batch(34, dim=3)
    for name, loss in _all_losses():
        with pytest.raises(ValueError):
            loss(x, y[:-1])
        with pytest.raises(ValueError):
            loss(x[:, 0], y)
        with pytest.raises(ValueError):
            loss(x, y[:, None])
    with pytest.raises(TypeError):
        TripletLoss()(x.numpy(), y)


def test_amsoftmax_bad_labels_and_dims():
    loss = AMSoftmaxLoss(3, 4)
    x = torch.randn(5, 4)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        loss(x, torch.tensor([0, 1, 2, 3, 0]))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        loss(x, torch.tensor([0, 1, 2, -1, 0]))
    with pytest.raises(ValueError, match="shape"):
        loss(torch.randn(5, 3), torch.tensor([0, 1, 2, 1, 0]))
    with pytest.raises(ValueError):
        AMSoftmaxLoss(0, 4)


def test_jrs_bad_input():
    x, y = make_batch(35)
    with pytest.raises(ValueError, match="non-empty"):
        JRSRegularizer()([], y)
    with pytest.raises(ValueError, match="out of range"):
        JRSRegularizer(single_kernel_layers=(3,))([x, x], y)
    with pytest.raises(ValueError, match="representations\\[1\\]"):
        JRSRegularizer()([x, x[:-1]], y)
    with pytest.raises(ValueError, match="bandwidths"):
        JRSRegularizer(bandwidths=(0.5, -1.0))
    # a single tensor is taken as a one-layer list
    assert JRSRegularizer()(x, y).item() == pytest.approx(JRSRegularizer()([x], y).item())


def test_invalid_constructor_options():
    with pytest.raises(ValueError, match="reduction"):
        TripletLoss(reduction="active")
    with pytest.raises(ValueError, match="pair_weighting"):
        BinomialDevianceLoss(pair_weighting="dense")
    with pytest.raises(ValueError, match="tuples"):
        NPairLoss(tuples="some")
    with pytest.raises(ValueError, match="reduction"):
        BinomialDevianceLoss(reduction="none")
    with pytest.raises(ValueError, match="reduction"):
        EnergyConfusion(reduction="max")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    x, y = make_batch(40, dim=3)
    for name, loss in _all_losses():
        ref = loss(x, y).item()
        if isinstance(loss, torch.nn.Module):
            loss = loss.cuda()
        got = loss(x.cuda(), y.cuda())
        assert got.device.type == "cuda", name
        assert got.item() == pytest.approx(ref, rel=1e-9, abs=1e-12), name


# ---------------------------------------------------------------- registry
def test_get_loss_names():
    assert isinstance(get_loss("triplet"), TripletLoss)
    with pytest.raises(ValueError, match="Unknown loss"):
        get_loss("TRIPLET")  # one spelling per name, as scikit-learn's string options
    assert get_loss("triplet", margin=0.3).margin == 0.3
    assert isinstance(get_loss("npair"), NPairLoss)
    assert isinstance(get_loss("binomial"), BinomialDevianceLoss)
    assert isinstance(get_loss("amsoftmax", n_classes=3, embedding_dim=2), AMSoftmaxLoss)
    for name, cls in LOSSES.items():
        kwargs = {"n_classes": 2, "embedding_dim": 2} if cls is AMSoftmaxLoss else {}
        assert type(get_loss(name, **kwargs)) is cls
    # fresh instances each call
    assert get_loss("triplet") is not get_loss("triplet")
    # a class is instantiated with the kwargs
    assert get_loss(TripletLoss, margin=0.7).margin == 0.7


def test_get_loss_callables_pass_through():
    def my_loss(embeddings, labels):
        return embeddings.sum()

    assert get_loss(my_loss) is my_loss
    inst = TripletLoss()
    assert get_loss(inst) is inst
    pml_loss = pml_losses.TripletMarginLoss()
    assert get_loss(pml_loss) is pml_loss
    with pytest.raises(ValueError, match="already built"):
        get_loss(pml_loss, margin=0.3)  # parameters of a built loss would be ignored
    x, y = make_batch(50)
    assert torch.isfinite(get_loss(pml_loss)(x, y))


def test_get_loss_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match="triplet") as exc:
        get_loss("contrastive")
    for name in ("npair", "binomial", "amsoftmax"):
        assert name in str(exc.value)
    with pytest.raises(ValueError):
        get_loss(3)


def test_get_regularizer():
    assert isinstance(get_regularizer("ec"), EnergyConfusion)
    assert get_regularizer("ec", log=False).log is False
    assert isinstance(get_regularizer("jrs"), JRSRegularizer)
    assert get_regularizer("jrs", detach_tau=False).detach_tau is False
    for name, cls in REGULARIZERS.items():
        assert type(get_regularizer(name)) is cls
    assert get_regularizer(None) is None
    reg = EnergyConfusion()
    assert get_regularizer(reg) is reg
    with pytest.raises(ValueError, match="'ec'"):
        get_regularizer("mmd")


# ------------------------------------------------------ base, scale, objective
@pytest.mark.parametrize("norm", [1e-20, 1e20, 1e30])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_extreme_norms_give_the_scaled_value_never_nan(norm, dtype):
    """NPair and EC were NaN for embeddings of norm 1e20; scale-free losses must not move."""
    x, y = make_batch(60, dim=3)
    x = x / x.norm(dim=1, keepdim=True)
    big = (x * norm).to(dtype).requires_grad_(True)
    for name, loss in _all_losses():
        value = loss(big, y)
        assert not torch.isnan(value), name
        value.backward()
        assert not torch.isnan(big.grad).any(), name
        big.grad = None
    # scale-free losses: the same value at any norm
    for loss in (TripletLoss(), BinomialDevianceLoss(), JRSRegularizer()):
        assert loss(x.to(dtype) * norm, y).item() == pytest.approx(loss(x, y).item(), rel=1e-4)
    # EC, log form: log(1 + s^2 E) stays finite and exact
    expected = loop_energy(x.double() * norm, y)
    assert EnergyConfusion()(x.to(dtype) * norm, y).item() == pytest.approx(expected, rel=1e-4)
    # N-pair, raw dot products: l = softplus(s^2 * ...) is huge or tiny, but not NaN
    npair = NPairLoss()(x.to(dtype) * norm, y).item()
    assert np.isfinite(npair) or npair == np.inf


def test_reductions_are_one_vocabulary():
    x, y = make_batch(61)
    t = TripletLoss(margin=0.5)
    tl, w = t.tuple_losses(t.prepare(x), y)
    assert t(x, y).item() == pytest.approx(((tl * w).sum() / w.sum()).item())
    assert TripletLoss(margin=0.5, reduction="sum")(x, y).item() == pytest.approx(
        (tl * w).sum().item())
    n_active = ((tl > 0) & w).sum().item()
    assert TripletLoss(margin=0.5, reduction="mean_nonzero")(x, y).item() == pytest.approx(
        (tl * w).sum().item() / n_active)
    for loss_cls in (TripletLoss, NPairLoss, BinomialDevianceLoss, EnergyConfusion,
                     JRSRegularizer):
        assert "mean" in loss_cls.reductions and "sum" in loss_cls.reductions


def test_losses_declare_their_normalisation():
    assert TripletLoss.normalize_embeddings and BinomialDevianceLoss.normalize_embeddings
    assert AMSoftmaxLoss.normalize_embeddings
    assert not NPairLoss.normalize_embeddings and not EnergyConfusion.normalize_embeddings


def test_triplet_dense_and_gathered_forms_agree(monkeypatch):
    from skdml.losses import triplet

    x, y = make_batch(62, n_classes=4, per_class=5)
    gathered = TripletLoss(margin=0.3)(x, y).item()  # the CPU form
    losses, weights = TripletLoss(margin=0.3).tuple_losses(
        torch.nn.functional.normalize(x, dim=1), y)
    assert losses.ndim == 2  # (anchor-positive pairs, candidates)
    # the dense (n, n, n) form of accelerators, forced on the CPU through a fake device
    dist = triplet.pairwise_sq_dists(torch.nn.functional.normalize(x, dim=1))
    pos, neg = triplet.same_class_masks(y)
    dense = torch.relu(dist[:, :, None] - dist[:, None, :] + 0.3)
    mask = (pos[:, :, None] & neg[:, None, :]).to(dense.dtype)
    assert (dense * mask).sum().item() / mask.sum().item() == pytest.approx(gathered, rel=1e-12)


def test_metric_objective_gives_the_regularizer_the_loss_representation():
    from skdml.losses import MetricObjective

    x, y = make_batch(63, n_classes=3, per_class=3)
    ec = EnergyConfusion()
    unit = torch.nn.functional.normalize(x, dim=1)
    # a spherical loss: EC on unit-norm embeddings
    total, terms = MetricObjective(BinomialDevianceLoss(), ec, weight=0.3)(x, y)
    assert terms["regularizer"].item() == pytest.approx(ec(unit, y).item())
    assert total.item() == pytest.approx(
        BinomialDevianceLoss()(x, y).item() + 0.3 * ec(unit, y).item())
    # a raw dot-product loss: EC on the embeddings as given
    _, terms = MetricObjective(NPairLoss(), ec, weight=0.3)(x, y)
    assert terms["regularizer"].item() == pytest.approx(ec(x, y).item())
    # JRS: [layers..., embedding as the loss sees it (unit rows, JRD Eq. 9), class cosines]
    torch.manual_seed(0)
    am = AMSoftmaxLoss(3, x.shape[1]).double()
    jrs = JRSRegularizer()
    layer = x[:, :2] * 3
    _, terms = MetricObjective(am, jrs, weight=1.0)(x, y, layers=[layer])
    expected = jrs([layer, unit, am.class_cosines(x)], y).item()
    assert terms["regularizer"].item() == pytest.approx(expected)
    # weight 0: no regulariser term at all
    _, terms = MetricObjective(am, jrs, weight=0.0)(x, y)
    assert set(terms) == {"metric_loss"}


def test_metric_objective_refuses_a_non_scalar_loss():
    from skdml.losses import MetricObjective

    x, y = make_batch(64)
    with pytest.raises(TypeError, match=r"scalar torch.Tensor.*shape \(9,\)"):
        MetricObjective(lambda z, labels: z.sum(dim=1))(x, y)
    with pytest.raises(TypeError, match="returned float"):
        MetricObjective(lambda z, labels: 1.0)(x, y)


def test_build_loss_names_the_keys_of_a_loss_given_options_it_does_not_take():
    from skdml.losses import build_loss
    with pytest.raises(ValueError, match=r"'npair' does not accept \['margin'\]; its keys"):
        build_loss("npair", {"margin": 0.5})  # was NPairLoss's TypeError (ECAML's path)


def test_a_linear_learner_with_options_left_from_another_loss_names_its_keys():
    import warnings
    from skdml import ECAML
    rng = np.random.RandomState(0)
    X, y = rng.randn(40, 4), np.repeat([0, 1, 2, 3], 10)
    est = ECAML(max_iter=1, loss="lmnn").set_params(loss__margin=0.5).set_params(loss="npair")
    with warnings.catch_warnings(), pytest.raises(ValueError, match="its keys are"):
        warnings.simplefilter("ignore")
        est.fit(X, y)


@pytest.mark.parametrize("scale, expected", [(1.0, 3.75), (1e15, 3.25e30), (1e19, 3.25e38),
                                             (1e20, math.inf), (1e30, math.inf)])
def test_lmnn_loss_of_large_embeddings_is_the_true_value_or_inf(scale, expected):
    # the Gram expansion overflowed to inf - inf: 1e20 and 1e30 gave 0.0, a perfect loss
    z = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 1.5], [0.0, 3.0]])
    value = LMNNLoss(n_neighbors=1, reduction="sum")(z * scale, torch.tensor([0, 0, 1, 1]))
    if math.isinf(expected):
        assert math.isinf(value.item())
    else:
        assert value.item() == pytest.approx(expected, rel=1e-6)


def test_unit_rows_of_a_zero_row_has_bounded_gradients_and_subnormal_rows_unit_norm():
    from skdml.losses._base import unit_rows
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    x[0] = 0.0
    x.requires_grad_()
    TripletLoss()(x, torch.tensor([0, 0, 1])).backward()
    assert x.grad.abs().max() < 10.0  # was 1.2e38
    z = torch.zeros(4, 3, requires_grad=True)
    AMSoftmaxLoss(4, 3)(z, torch.tensor([0, 0, 1, 1])).backward()
    assert torch.isfinite(z.grad).all()  # was non-finite with a finite value
    assert unit_rows(torch.tensor([[1e-40, 0.0]])).norm().item() == pytest.approx(1.0)
    assert unit_rows(torch.tensor([[1e-6, 0.0]], dtype=torch.float16))[0, 0].item() == 1.0


@pytest.mark.parametrize("make", [
    lambda: BinomialDevianceLoss(scale=float("nan")), lambda: BinomialDevianceLoss(scale=0),
    lambda: BinomialDevianceLoss(negative_weight=-1), lambda: MultiSimilarityLoss(alpha=math.nan),
    lambda: MultiSimilarityLoss(epsilon=-1), lambda: MultiSimilarityLoss(mining="no"),
    lambda: LMNNLoss(margin=math.nan), lambda: LMNNLoss(n_neighbors=2.5),
    lambda: LMNNLoss(normalize="no"), lambda: AMSoftmaxLoss(2.5, 2),
    lambda: AMSoftmaxLoss(2, 3, scale=math.inf), lambda: AMSoftmaxLoss(2, 3, margin=-1),
    lambda: NPairLoss(l2_reg=math.nan), lambda: EnergyConfusion(log="no"),
    lambda: JRSRegularizer(bandwidths=(math.nan,)), lambda: JRSRegularizer(layer_weights=(-1.0,)),
])
def test_loss_options_that_would_give_nan_or_a_reversed_objective_are_refused(make):
    with pytest.raises(ValueError):  # each was accepted: NaN losses, truncation, reversal
        make()


def test_labels_an_empty_list_and_strings():
    x = torch.randn(3, 4)
    assert TripletLoss()(x[:0], []).item() == 0.0  # [] read as float labels before
    with pytest.raises(ValueError, match="labels must be integer class codes"):
        TripletLoss()(x, ["a", "b", "a"])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sixteen_bit_batches_are_summed_in_float32_and_returned_in_their_dtype(dtype):
    # counts and sums over a batch's tuples overflowed float16's 65,504 (107,520 triplets
    # in 128 samples): the loss read 0, NaN or inf
    from skdml.losses import JRSRegularizer

    torch.manual_seed(0)
    y = torch.arange(32).repeat_interleave(8)
    x = torch.randn(256, 16)
    y2 = torch.arange(2).repeat_interleave(300)
    x2 = torch.randn(600, 8) + y2[:, None]
    cases = [(TripletLoss(), x, y), (TripletLoss(reduction="mean_nonzero"), x, y),
             (LMNNLoss(), x, y), (EnergyConfusion(), x2, y2), (BinomialDevianceLoss(), x2, y2),
             (BinomialDevianceLoss(pair_weighting="balanced"), x2, y2)]
    for loss, batch, labels in cases:
        want = loss(batch.to(dtype).float(), labels)  # the same rounded inputs, in float32
        got = loss(batch.to(dtype), labels)
        assert got.dtype == dtype, loss
        assert float(got) == pytest.approx(float(want), rel=1e-2), loss
    jrs = JRSRegularizer()
    got = jrs([x.to(dtype), x[:, :4].to(dtype)], y)
    assert got.dtype == dtype
    assert float(got) == pytest.approx(float(jrs([x.to(dtype).float(), x[:, :4].to(dtype).float()],
                                                 y)), rel=1e-2)


def test_lmnn_and_jrs_do_not_move_with_a_float32_offset():
    # the Gram expansion of uncentred float32 points cancelled their offset's squares: at an
    # offset of 1e4, LMNN read 43.8 and JRS 1.906 for 11.42 and 1.121
    from skdml.losses import JRSRegularizer

    torch.manual_seed(0)
    y = torch.tensor([0, 0, 1, 1, 2, 2])
    x = torch.randn(6, 8, dtype=torch.float64)
    jrs = JRSRegularizer(single_kernel_layers=())
    for offset in (1e3, 1e4):
        z = (x + offset).float()
        exact = z.double()  # the float32 points themselves, in float64
        assert float(LMNNLoss()(z, y)) == pytest.approx(float(LMNNLoss()(exact, y)), rel=1e-3)
        assert float(jrs([z], y)) == pytest.approx(float(jrs([exact], y)), rel=1e-3)


def test_class_pair_energies_of_huge_values_are_infinite_not_nan():
    from skdml.losses import class_pair_energies

    x, y = torch.tensor([[0.0], [2.0], [5.0]]), [0, 0, 1]
    big = class_pair_energies(x * 1e20, y)
    assert not torch.isnan(big).any()
    assert torch.isinf(big[0, 1]) and big[1, 1] == 0
    small = class_pair_energies(x * 1e-20, y).double()
    assert small[0, 1].item() == pytest.approx(17e-40, rel=1e-5)  # float32 subnormal, kept


def test_centring_never_overflows_on_huge_finite_batches():
    # the batch mean of 128 rows of about 1e37 overflowed float32 (x.mean sums first):
    # LMNN read 0.0 (a silent pass of the non-finite guard), JRS and EC NaN
    from skdml.losses import JRSRegularizer, class_pair_energies

    torch.manual_seed(0)
    y = torch.arange(8).repeat_interleave(16)
    x = torch.randn(128, 4) * 1e37
    assert torch.isinf(LMNNLoss()(x, y))  # the true value exceeds float32: +inf, never 0
    assert torch.isfinite(JRSRegularizer(single_kernel_layers=())([x], y))
    assert torch.isfinite(EnergyConfusion()(x, y))  # the log of a finite energy
    E = class_pair_energies(torch.tensor([[0.0], [0.0], [0.0], [3e38]]), [0, 0, 1, 1])
    assert not torch.isnan(E).any() and torch.isinf(E[0, 1])


def test_seventh_audit_loss_edges():
    from skdml.losses import DecoupledLoss, DistancePreservation, MetricObjective, \
        deml_pair_weights

    # JRS sees the unit rows AM-Softmax works on: rescaling a row changes nothing
    torch.manual_seed(0)
    z, y = torch.randn(6, 4, dtype=torch.float64), torch.tensor([0, 0, 1, 1, 2, 2])
    z2 = z * torch.tensor([[1.0], [10.0], [0.1], [3.0], [1.0], [5.0]], dtype=torch.float64)
    am = AMSoftmaxLoss(n_classes=3, embedding_dim=4).double()
    objective = MetricObjective(am, JRSRegularizer(), 1.0)
    assert objective(z, y)[1]["regularizer"].item() == pytest.approx(
        objective(z2, y)[1]["regularizer"].item(), rel=1e-12)
    # rows a learner normalised already are used bit for bit (linear JRD's fits unchanged)
    unit = torch.nn.functional.normalize(z, dim=1)
    value = objective(unit, y)[1]["regularizer"]
    assert torch.equal(value, JRSRegularizer()([unit, am.class_cosines(unit)], y))
    # float labels refused, integer embeddings refused (not truncated)
    with pytest.raises(ValueError, match="integer dtype"):
        deml_pair_weights(torch.tensor([0.2, 0.7, 1.0]))
    with pytest.raises(ValueError, match="floating dtype"):
        DistancePreservation()(torch.tensor([[0], [1], [5]]), torch.tensor([[0.0], [1.0], [2.0]]))
    # beyond float64's range: inf (N-pair) or the right finite value (EC, log), never NaN
    x = torch.randn(6, 4, dtype=torch.float64)
    for tuples in ("all", "sohn"):
        assert NPairLoss(tuples=tuples)(x * 1e160, y).item() == math.inf
    # Sohn's form is the cross-entropy of the anchor-positive dot products (first two of
    # each class), computed around each row's largest
    logits = x[[0, 2, 4]] @ x[[1, 3, 5]].T
    expected = torch.nn.functional.cross_entropy(logits, torch.arange(3)).item()
    assert NPairLoss(tuples="sohn")(x, y).item() == pytest.approx(expected, rel=1e-12)
    pair = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    assert EnergyConfusion()(pair * 1e160, torch.tensor([0, 1])).item() == pytest.approx(
        2 * math.log(1e160), rel=1e-12)
    # constructor checks
    for bad in (True, float("nan"), None):
        with pytest.raises(ValueError, match="n_learners"):
            DecoupledLoss(n_learners=bad)
    with pytest.raises(ValueError, match="integers"):
        JRSRegularizer(single_kernel_layers=(0.5,))
    with pytest.raises(ValueError, match="sequence of numbers"):
        JRSRegularizer(bandwidths="124")
