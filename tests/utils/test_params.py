"""skdml/_utils/_params.py: the constraint helpers and the one routing of nested parameters."""

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone
from sklearn.pipeline import Pipeline

from skdml._utils._params import NestedParamsMixin, constructor_keys, rebuild_with


class Toy(NestedParamsMixin, BaseEstimator):
    _nested_params = {"opt": "opt_params", "loss": {"margin": "margin"}}

    def __init__(self, opt_params=None, margin=0.1, kind="a"):
        self.opt_params = opt_params
        self.margin = margin
        self.kind = kind

    def _nested_keys(self, prefix):
        if prefix == "opt":
            return ["decay", "rate"] if self.kind == "a" else ["decay"]
        return super()._nested_keys(prefix)


def test_a_nested_key_sets_one_key_of_a_copy_of_its_dict():
    mine = {"decay": 1.0}
    toy = Toy(opt_params=mine).set_params(opt__rate=0.5)
    assert toy.opt_params == {"decay": 1.0, "rate": 0.5} and mine == {"decay": 1.0}
    assert clone(toy).get_params()["opt_params"] == {"decay": 1.0, "rate": 0.5}


def test_an_alias_route_sets_the_parameter_it_names():
    assert Toy().set_params(loss__margin=0.3).margin == 0.3


def test_keys_are_checked_after_the_plain_parameters_of_the_same_call():
    with pytest.raises(ValueError, match=r"opt__rate.*Valid opt__ keys are \['opt__decay'\]"):
        Toy().set_params(kind="b", opt__rate=0.5)
    toy = Toy(kind="b")
    with pytest.raises(ValueError, match="opt__rat"):
        toy.set_params(kind="a", margin=9.0, opt__rat=0.5)
    assert toy.kind == "b" and toy.margin == 0.1 and toy.opt_params is None  # nothing set
    assert Toy(kind="b").set_params(kind="a", opt__rate=0.5).opt_params == {"rate": 0.5}


def test_nested_keys_reach_a_step_of_a_pipeline_and_plain_errors_stay_sklearns():
    pipe = Pipeline([("toy", Toy())]).set_params(toy__opt__decay=2.0)
    assert pipe.named_steps["toy"].opt_params == {"decay": 2.0}
    with pytest.raises(ValueError, match="Invalid parameter 'nope'"):
        Toy().set_params(nope=1)


def test_constructor_keys_and_rebuild_with():
    class Loss:
        def __init__(self, margin=0.1, scale=2.0):
            self.margin, self.scale = margin, scale

    assert constructor_keys(Loss) == ["margin", "scale"]
    rebuilt = rebuild_with(Loss(scale=3.0), margin=0.7)
    assert (rebuilt.margin, rebuilt.scale) == (0.7, 3.0)

    class Opaque:
        def __init__(self, hidden=1):
            pass

    with pytest.raises(ValueError, match="does not keep its options"):
        rebuild_with(Opaque(), hidden=2)


def test_ecaml_and_jrd_route_the_same_nested_names_as_the_deep_learner():
    from sklearn.model_selection import GridSearchCV

    from skdml import ECAML, JRD

    ecaml = ECAML(loss="triplet").set_params(loss__margin=0.3, regularizer__log=False)
    assert ecaml.loss_params == {"margin": 0.3} and ecaml.ec_log is False
    with pytest.raises(ValueError, match=r"loss__marg.*\['loss__margin', 'loss__reduction'\]"):
        ECAML(loss="triplet").set_params(loss__marg=0.3)
    with pytest.raises(ValueError, match="regularizer__logg"):
        ECAML().set_params(regularizer__logg=False)
    with pytest.raises(ValueError, match="loss='auto' is chosen by the learner"):
        ECAML(loss="auto").set_params(loss__margin=0.3)
    jrd = JRD().set_params(loss__margin=0.25, loss__scale=16.0)
    assert (jrd.margin, jrd.scale) == (0.25, 16.0)
    with pytest.raises(ValueError, match=r"Valid loss__ keys are \['loss__margin', 'loss__scale'\]"):
        JRD().set_params(loss__alpha=1.0)
    # GridSearchCV searches a nested loss option of a linear learner as well
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(4), 10)
    X = rng.randn(40, 5) + 2 * y[:, None]
    search = GridSearchCV(
        ECAML(n_components=2, loss="triplet", max_iter=2, early_stopping=False,
              random_state=0),
        {"loss__margin": [0.05, 0.5]}, cv=2, scoring=lambda est, X, y: 0.0).fit(X, y)
    assert search.best_estimator_.loss_params in ({"margin": 0.05}, {"margin": 0.5})


def test_set_params_copies_no_fitted_state_to_check_a_key():
    class Heavy(Toy):
        def __getstate__(self):  # a fitted deep model copies its network here
            raise AssertionError("set_params must not pickle or copy the estimator")

    heavy = Heavy()
    heavy.fitted_ = object()
    assert heavy.set_params(opt__decay=1.0).opt_params == {"decay": 1.0}
