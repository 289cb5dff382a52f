"""skdml/_training/_schedules.py: the warm-up + cosine and warm-up-stable-decay schedules, and
their callback."""

import math

import pytest
import torch

from skdml._training import LRSchedule, warmup_cosine, warmup_stable_decay


def rates(optimizer, schedule, n):
    out = []
    for _ in range(n):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    return out


def sgd(lr=0.4):
    return torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)


def test_linear_warmup_then_cosine_to_zero():
    opt = sgd()
    got = rates(opt, warmup_cosine(opt, n_steps=12, n_warmup=4), 12)
    want = [0.4 * (s + 1) / 4 for s in range(4)] + [
        0.4 * 0.5 * (1 + math.cos(math.pi * (s - 4) / 8)) for s in range(4, 12)]
    assert got == pytest.approx(want)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0)  # ends at 0 at n_steps
    assert max(got) == pytest.approx(0.4)


def test_each_group_keeps_its_own_base_rate():
    params = [torch.zeros(1, requires_grad=True) for _ in range(2)]
    opt = torch.optim.SGD([{"params": [params[0]], "lr": 1.0},
                           {"params": [params[1]], "lr": 0.1}])
    schedule = warmup_cosine(opt, n_steps=10, n_warmup=0)
    for _ in range(5):
        opt.step()
        schedule.step()
    a, b = (g["lr"] for g in opt.param_groups)
    assert a == pytest.approx(10 * b) and a == pytest.approx(0.5)


def test_a_resumed_schedule_continues_where_it_stopped():
    whole = sgd()
    full = rates(whole, warmup_cosine(whole, n_steps=10, n_warmup=2), 10)
    resumed = sgd()  # a fresh optimiser with the base rate, 6 steps done
    tail = rates(resumed, warmup_cosine(resumed, n_steps=10, n_warmup=2, steps_done=6), 4)
    assert tail == pytest.approx(full[6:])


def test_lr_schedule_steps_per_batch_and_records_the_rate():
    opt = sgd()
    callback = LRSchedule(warmup_cosine(opt, n_steps=4, n_warmup=0))

    class Loop:
        optimizer = opt

    for _ in range(2):
        callback.on_step_end(Loop)
    record = {}
    callback.on_epoch_end(Loop, record)
    assert record["learning_rate"] == pytest.approx(0.4 * 0.5 * (1 + math.cos(math.pi / 2)))


def test_warmup_then_peak_then_one_minus_sqrt_decay_to_zero():
    opt = sgd()
    got = rates(opt, warmup_stable_decay(opt, n_steps=20, n_warmup=2, n_decay=4), 20)
    want = [0.4 * (s + 1) / 2 for s in range(2)] + [0.4] * 14 + [
        0.4 * (1 - math.sqrt(t / 4)) for t in range(4)]  # hand-computed: 0.4, 0.2, 0.117, 0.054
    assert got == pytest.approx(want)
    assert got[-3:] == pytest.approx([0.2, 0.4 * (1 - math.sqrt(0.5)), 0.4 * (1 - math.sqrt(0.75))])
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0)  # ends at 0 at n_steps


def test_warmup_stable_decay_clips_a_decay_longer_than_the_run():
    opt = sgd()
    got = rates(opt, warmup_stable_decay(opt, n_steps=4, n_warmup=2, n_decay=10), 4)
    assert got == pytest.approx([0.2, 0.4, 0.4, 0.4 * (1 - math.sqrt(0.5))])
    flat = sgd()  # no decay: the peak rate to the end
    assert rates(flat, warmup_stable_decay(flat, n_steps=5, n_warmup=0, n_decay=0), 5) == \
        pytest.approx([0.4] * 5)


def test_a_resumed_warmup_stable_decay_continues_where_it_stopped():
    whole = sgd()
    full = rates(whole, warmup_stable_decay(whole, n_steps=12, n_warmup=2, n_decay=5), 12)
    resumed = sgd()
    tail = rates(resumed, warmup_stable_decay(resumed, n_steps=12, n_warmup=2, n_decay=5,
                                              steps_done=7), 5)
    assert tail == pytest.approx(full[7:])
