"""WeightAverage: the EMA of the weights, against the recursion written out by hand."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from skdml._training import WeightAverage


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))


def _step(net, generator):
    """A random change of every parameter and of the batch-norm statistics."""
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn(p.shape, generator=generator))
        net[0].train()
        net(torch.randn(8, 3, generator=generator))  # updates running_mean/var and the count


def _averaged(horizon, seed, n_steps):
    """A network changed ``n_steps`` times, each change folded into its average."""
    net, gen = _net(), torch.Generator().manual_seed(seed)
    average = WeightAverage(net, horizon=horizon)
    for _ in range(n_steps):
        _step(net, gen)
        average.update(net)
    return net, average


def test_average_follows_the_warmed_up_ema_recursion():
    net, gen = _net(), torch.Generator().manual_seed(1)
    average = WeightAverage(net, horizon=6)
    expected = None
    for t in range(1, 61):
        _step(net, gen)
        average.update(net)
        current = {k: v.clone() for k, v in net.state_dict().items()}
        if expected is None:
            expected = current  # the first step copies
            continue
        decay = min(1 - 1 / 6, (1 + t) / (10 + t))
        assert decay == average.decay(t)
        for k, v in current.items():
            expected[k] = v if not v.is_floating_point() else decay * expected[k] + (1 - decay) * v
    got = average.module.state_dict()
    assert average.decay(60) == pytest.approx(5 / 6)  # the steady decay is reached
    for k, v in expected.items():
        torch.testing.assert_close(got[k], v, rtol=1e-5, atol=1e-5, msg=k)
    assert int(got["1.num_batches_tracked"]) == 60  # a counter is copied, not averaged
    # the averaged copy is not the trained network
    assert not torch.equal(got["0.weight"], net.state_dict()["0.weight"])


def test_state_round_trip_continues_identically():
    net, average = _averaged(horizon=3, seed=2, n_steps=5)
    saved, net_saved = average.state_dict(), {k: v.clone() for k, v in net.state_dict().items()}
    resumed = WeightAverage(_net(), horizon=3)
    resumed.load_state_dict(saved)
    assert resumed.steps == 5
    gen_a, gen_b = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    net_b = _net()
    net_b.load_state_dict(net_saved)
    for _ in range(4):
        _step(net, gen_a)
        average.update(net)
        _step(net_b, gen_b)
        resumed.update(net_b)
    for k, v in average.module.state_dict().items():
        assert torch.equal(resumed.module.state_dict()[k], v), k


def test_horizon_one_keeps_the_last_weights_and_below_one_is_refused():
    net, average = _averaged(horizon=1, seed=4, n_steps=3)
    for k, v in net.state_dict().items():
        assert torch.equal(average.module.state_dict()[k], v), k
    with pytest.raises(ValueError, match="at least 1 step"):
        WeightAverage(net, horizon=0.5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_update_never_synchronises_with_the_device():
    net = _net().cuda()
    average = WeightAverage(net, horizon=3)
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")  # any host-device synchronisation raises
    try:
        for _ in range(3):
            with torch.no_grad():
                for p in net.parameters():
                    p.add_(1.0)
            average.update(net)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    assert average.module[0].weight.is_cuda and average.steps == 3
