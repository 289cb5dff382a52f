"""DeML's trainable parts and loss terms (Eq. 4, 5, 6) against hand computation or loops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from skdml.deep.deml import (ChannelAttention, DeML, StackedLinear, activation_decay,
                             adversarial_discrepancy, anti_trivial_penalty, grad_reverse)
from skdml.deep.deml import _network as deml_network
from skdml.deep import SmallCNN
from skdml.losses import DecoupledLoss, TripletLoss


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def test_stacked_linear_is_j_linear_layers():
    layer = StackedLinear(3, 5, 4)
    x = torch.randn(3, 7, 5, generator=gen())
    expected = torch.stack([F.linear(x[j], layer.weight[j], layer.bias[j]) for j in range(3)])
    torch.testing.assert_close(layer(x), expected)
    bound = 1 / math.sqrt(5)
    assert layer.weight.abs().max() <= bound and layer.bias.abs().max() <= bound


def test_channel_attention_matches_the_formula_one_cam_at_a_time():
    """cap_j = U * sigmoid(W2_j relu(W1_j mean_hw(U))), per channel."""
    cam = ChannelAttention(channels=6, n_cams=3, hidden=4)
    U = torch.randn(2, 6, 5, 3, generator=gen(1))
    got = cam(U)
    assert got.shape == (3, 2, 6, 5, 3)
    s, q, e = U.mean(dim=(2, 3)), cam.squeeze, cam.excite
    for j in range(3):
        w = torch.sigmoid(F.linear(torch.relu(F.linear(s, q.weight[j], q.bias[j])),
                                   e.weight[j], e.bias[j]))
        torch.testing.assert_close(got[j], U * w[:, :, None, None])
    assert cam.squeeze.weight.shape == (3, 4, 6) and cam.excite.weight.shape == (3, 6, 4)


def test_gradient_reversal_backward_is_minus_the_true_gradient():
    """The hand-written backward against autograd of the identity (the function it reverses)."""
    x = torch.randn(4, 3, dtype=torch.float64, generator=gen(2), requires_grad=True)
    f = lambda t: (t.sin() * torch.arange(3.0, dtype=torch.float64)).sum()  # noqa: E731
    (true,) = torch.autograd.grad(f(x), x)
    (reversed_,) = torch.autograd.grad(f(grad_reverse(x, scale=0.7)), x)
    torch.testing.assert_close(reversed_, -0.7 * true)
    torch.testing.assert_close(grad_reverse(x), x)


def test_adversarial_discrepancy_is_the_sum_over_learner_pairs():
    a = torch.randn(4, 5, 3, dtype=torch.float64, generator=gen(3))
    J, B = a.shape[:2]
    expected = sum(((a[j] - a[k]) ** 2).sum() for j in range(J) for k in range(j + 1, J)) / B
    torch.testing.assert_close(adversarial_discrepancy(a), expected)
    assert float(adversarial_discrepancy(a[:1])) == 0.0  # one learner: nothing to compare


def test_activation_decay_is_eq6_first_term():
    zs = [torch.randn(2, 5, 3, generator=gen(4)), torch.randn(2, 5, 3, generator=gen(5))]
    I, J, N = 2, 2, 5
    expected = sum(float((z[j, n] ** 2).sum()) for z in zs for j in range(J)
                   for n in range(N)) / (2 * I * J * N)
    assert float(activation_decay(zs)) == pytest.approx(expected, rel=1e-6)


def test_anti_trivial_penalty_is_the_literal_trace():
    ws = [torch.randn(3, 4, 6, dtype=torch.float64, generator=gen(6)),
          torch.randn(3, 4, 6, dtype=torch.float64, generator=gen(7))]
    expected = 0.0
    for w in ws:
        for j in range(w.shape[0]):
            A = w[j] @ w[j].T - torch.eye(4, dtype=torch.float64)
            expected += float(torch.trace(A * A))
    assert float(anti_trivial_penalty(ws)) == pytest.approx(expected, rel=1e-12)
    # unit rows: zero, even when they are not orthogonal
    unit = torch.tensor([[[1.0, 0.0], [math.sqrt(0.5), math.sqrt(0.5)]]])
    assert float(anti_trivial_penalty([unit])) == pytest.approx(0.0, abs=1e-6)


def eq5_by_hand(Z, y, n_learners, alpha=2.0, beta=0.5, gamma=35.0):
    """DeML Eq. 5 with explicit loops over learners and ordered pairs."""
    Z, y = np.asarray(Z, dtype=np.float64), np.asarray(y)
    n = len(y)
    n_pos = sum(y[p] == y[q] for p in range(n) for q in range(n) if p != q)
    n_neg = sum(y[p] != y[q] for p in range(n) for q in range(n))
    total = 0.0
    for part in np.split(Z, n_learners, axis=1):
        for p in range(n):
            for q in range(n):
                if p == q:
                    continue
                s = float(y[p] == y[q])
                D = part[p] @ part[q] / np.linalg.norm(part[p]) / np.linalg.norm(part[q])
                g, w = (1.0, n_pos) if s else (gamma, n_neg)
                total += math.log1p(math.exp(-(2 * s - 1) * alpha * (D - beta) * g)) / w
    return total / n_learners


def test_decoupled_loss_on_a_hand_computed_batch():
    """Learner 1 sees [a, a, b], learner 2 sees [a, b, a]: Eq. 5 in closed form."""
    a, b = [1.0, 0.0], [0.0, 1.0]
    Z = torch.tensor([a + a, a + b, b + a])
    y = torch.tensor([0, 0, 1])
    first = math.log1p(math.exp(-1.0)) + math.log1p(math.exp(-35.0))
    second = math.log1p(math.exp(1.0)) + (2 * math.log1p(math.exp(35.0))
                                          + 2 * math.log1p(math.exp(-35.0))) / 4
    assert float(DecoupledLoss(2)(Z, y)) == pytest.approx((first + second) / 2, rel=1e-6)
    assert float(DecoupledLoss(2, reduction="sum")(Z, y)) == pytest.approx(first + second,
                                                                           rel=1e-6)


@pytest.mark.parametrize("n_learners", [1, 3, 4])
def test_decoupled_loss_matches_eq5_loops(n_learners):
    Z = torch.randn(10, 12, dtype=torch.float64, generator=gen(8))
    y = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 3, 3])
    got = DecoupledLoss(n_learners)(Z, y)
    assert float(got) == pytest.approx(eq5_by_hand(Z, y, n_learners), rel=1e-9)
    Zg = Z.clone().requires_grad_(True)  # autograd through the parts: gradient check
    assert torch.autograd.gradcheck(lambda t: DecoupledLoss(n_learners)(t, y), (Zg,))


def test_decoupled_loss_prepare_normalises_each_part_and_checks_width():
    loss = DecoupledLoss(2)
    x = loss.prepare(torch.tensor([[3.0, 4.0, 0.0, 2.0]]))
    torch.testing.assert_close(x, torch.tensor([[0.6, 0.8, 0.0, 1.0]]))
    with pytest.raises(ValueError, match="n_learners=2"):
        loss(torch.randn(4, 5), torch.tensor([0, 0, 1, 1]))
    # an inner loss on raw embeddings: the parts are left as they are
    raw = DecoupledLoss(2, loss=lambda z, y: z.sum())
    torch.testing.assert_close(raw.prepare(torch.full((1, 4), 3.0)), torch.full((1, 4), 3.0))
    assert float(raw(torch.full((2, 4), 3.0), torch.tensor([0, 1]))) == 6 * 2 * 2 / 2
    assert DecoupledLoss(2, loss=TripletLoss()).prepare(torch.ones(1, 4)).norm() == \
        pytest.approx(math.sqrt(2))
    with pytest.raises(ValueError, match="n_learners"):
        DecoupledLoss(0)
    empty = loss(torch.zeros(0, 4, requires_grad=True), torch.zeros(0, dtype=torch.long))
    assert float(empty.detach()) == 0.0


def small_deml(**kw):
    params = dict(n_scales=1, n_cams=2, n_components=8, crop_min_size=4)
    params.update(kw)
    return DeML.from_backbone(SmallCNN(1, widths=(4, 6, 8)), (1, 12, 12), **params)


def _adv_grads(net, x):
    net.zero_grad()
    net.train()
    net(x)[1]["adv"].backward()
    return {n: (p.grad.clone() if p.grad is not None else None)
            for n, p in net.named_parameters()}


def test_gradient_reversal_sign_adversary_against_cams(monkeypatch):
    """For the same term L_adv, F descends it and the CAMs / FNet / GNet ascend it."""
    torch.manual_seed(0)
    net = small_deml()
    x = torch.randn(6, 1, 12, 12, generator=gen(9))
    with_grl = _adv_grads(net, x)
    monkeypatch.setattr(deml_network, "grad_reverse", lambda t, scale=1.0: t)
    plain = _adv_grads(net, x)  # the true gradient of L_adv for every parameter
    checked = {"adversary": 0, "cams": 0, "fnet": 0, "gnet": 0}
    for name, g in with_grl.items():
        part = name.split(".")[2]
        if part == "learners":  # not in the game (Eq. 4): no gradient from L_adv
            assert g is None or float(g.abs().max()) == 0.0
            continue
        assert g is not None, name
        if float(plain[name].abs().max()) == 0.0:
            continue
        checked[part] += 1
        sign = 1.0 if part == "adversary" else -1.0
        torch.testing.assert_close(g, sign * plain[name])
    assert all(checked.values()), checked


def test_one_step_of_the_game_moves_l_adv_both_ways():
    """An SGD step on F lowers L_adv; a step on the CAMs (through the GRL) raises it."""
    torch.manual_seed(1)
    x = torch.randn(6, 1, 12, 12, generator=gen(10))
    for part, direction in (("adversary", -1), ("cams", +1)):
        net = small_deml().double()
        net.eval()  # fixed batch-norm statistics: the same function before and after
        aux = lambda: net.auxiliary_losses(*net._run(x.double())[:2])["adv"]  # noqa: E731
        before = aux()
        net.zero_grad()
        before.backward()
        with torch.no_grad():
            for name, p in net.named_parameters():
                if f".{part}." in name and p.grad is not None:
                    p -= 1e-3 * p.grad
        after = aux()
        change = float((after - before).detach())
        assert direction * change > 0, (part, float(before.detach()), float(after.detach()))


def test_make_deml_names_deml_params_when_it_is_not_a_dict():
    from skdml.deep import make_deml
    with pytest.raises(ValueError, match="deml_params must be a dict"):  # was "argument after **"
        make_deml(2, 2, deml_params="x")
