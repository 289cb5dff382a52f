"""A fit owns torch's global modes: the caller's no_grad, inference mode or default dtype."""

import warnings

import numpy as np
import pytest
import torch

from skdml import ECAML, JRD, DeepMetricTransformer
from skdml._utils import torch_fit_modes
from skdml.linear import LSML_Supervised, MMC_Supervised


def _data():
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(3), 12)
    return rng.randn(36, 4) + 2 * y[:, None], y


LEARNERS = {
    "ecaml": lambda: ECAML(n_components=2, max_iter=2, random_state=0),
    "ecaml-cg": lambda: ECAML(n_components=2, max_iter=2, solver="conjugate_gradient",
                              random_state=0),
    "jrd": lambda: JRD(n_components=2, max_iter=2, random_state=0),
    "deep": lambda: DeepMetricTransformer(n_components=2, max_iter=1, device="cpu",
                                          random_state=0),
    "deep-images": lambda: DeepMetricTransformer(n_components=2, max_iter=1, device="cpu",
                                                 random_state=0),
    "lsml": lambda: LSML_Supervised(n_constraints=40, max_iter=5, random_state=0),
    "mmc-diagonal": lambda: MMC_Supervised(diagonal=True, n_constraints=40, max_iter=5,
                                           random_state=0),
}
MODES = {
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
    "float64_default": None,
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", LEARNERS)
def test_a_fit_trains_under_the_callers_torch_modes(name, mode):
    # each failed: "element 0 of tensors does not require grad" (no_grad, inference mode),
    # the deep learner's float64 network for float32 inputs (a float64 default dtype)
    X, y = _data()
    if name == "deep-images":
        X = np.repeat(X[:, :, None], 4, axis=2).reshape(36, 1, 4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = LEARNERS[name]().fit(X, y).transform(X)
        if mode == "float64_default":
            torch.set_default_dtype(torch.float64)
            try:
                est = LEARNERS[name]().fit(X, y)
            finally:
                assert torch.get_default_dtype() == torch.float64  # the caller's, restored
                torch.set_default_dtype(torch.float32)
        else:
            with MODES[mode]():
                est = LEARNERS[name]().fit(X, y)
                assert not torch.is_grad_enabled()  # the caller's mode, restored
    np.testing.assert_allclose(est.transform(X), want, rtol=1e-5, atol=1e-6)


def test_the_modes_are_restored_after_an_error():
    with torch.no_grad():
        with pytest.raises(RuntimeError, match="boom"), torch_fit_modes():
            assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
            raise RuntimeError("boom")
        assert not torch.is_grad_enabled()
    assert torch.get_default_dtype() == torch.float32


def test_fits_in_several_threads_put_the_callers_dtype_back_once_all_have_left():
    # the default dtype is process-wide: a fit that left first put the caller's float64 back
    # under a fit still running, and the last one to leave left float32 for good
    import threading

    torch.set_default_dtype(torch.float64)
    try:
        entered, release = threading.Barrier(3), threading.Event()
        seen = []

        def fit():
            with torch_fit_modes():
                entered.wait()
                release.wait()
                seen.append(torch.get_default_dtype())

        threads = [threading.Thread(target=fit) for _ in range(2)]
        for t in threads:
            t.start()
        entered.wait()
        assert torch.get_default_dtype() == torch.float32
        release.set()
        for t in threads:
            t.join()
        assert seen == [torch.float32, torch.float32]
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)


def test_the_default_dtype_is_not_touched_when_it_is_float32(monkeypatch):
    # torch's default dtype is process-wide: a fit set it (and put it back) even when it
    # was float32 already, so a thread that changed it during the fit saw it reset
    calls = []
    monkeypatch.setattr(torch, "set_default_dtype", lambda dtype: calls.append(dtype))
    with torch_fit_modes():
        pass
    assert calls == []


def test_a_float64_backbone_is_refused_by_name():
    # torch's error named matrices: "mat1 and mat2 must have the same dtype"
    backbone = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()).double()
    X, y = _data()
    with pytest.raises(ValueError, match=r"float64 parameters .* pass backbone.float\(\)"):
        DeepMetricTransformer(backbone=backbone, n_components=2, max_iter=1, device="cpu",
                              random_state=0).fit(X, y)


def test_a_fit_entering_while_another_threads_runs_still_gets_float32():
    # thread-safety audit (22): the caller's dtype was read only when the first fit entered,
    # so a fit started under float64 while another thread's fit ran trained under float64
    import threading

    inside, release = threading.Event(), threading.Event()

    def long_fit():
        with torch_fit_modes():
            inside.set()
            release.wait(30)

    other = threading.Thread(target=long_fit)
    other.start()
    inside.wait(30)
    try:
        torch.set_default_dtype(torch.float64)  # the caller's choice, while the other runs
        with torch_fit_modes():
            seen = torch.get_default_dtype()
    finally:
        release.set()
        other.join()
        after = torch.get_default_dtype()
        torch.set_default_dtype(torch.float32)
    assert seen == torch.float32 and after == torch.float64  # the caller's choice came back


def test_a_dtype_the_caller_sets_during_a_fit_is_the_one_left():
    # review of audit 22: the last section put back the dtype saved at entry, over the
    # caller's own change made while it ran
    try:
        torch.set_default_dtype(torch.float64)
        with torch_fit_modes():
            torch.set_default_dtype(torch.float16)
        after = torch.get_default_dtype()
    finally:
        torch.set_default_dtype(torch.float32)
    assert after == torch.float16
