"""The classic learners' and SUML's progress bar (skdml/_training/_progress.py)."""

import re
import warnings

import numpy as np
import pytest

from skdml._training._progress import IterationBar
from skdml.linear import (ITML_Supervised, LMNN, LSML_Supervised, MLKR, MMC_Supervised,
                          SCML_Supervised)


def _data():
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(3), 15)
    return rng.randn(45, 4) + 1.5 * y[:, None], y


LEARNERS = {
    "LMNN": lambda v: LMNN(max_iter=50, verbose=v, random_state=0),
    "ITML_Supervised": lambda v: ITML_Supervised(n_constraints=60, verbose=v, random_state=0),
    "MLKR": lambda v: MLKR(max_iter=50, verbose=v),
    "LSML_Supervised": lambda v: LSML_Supervised(n_constraints=60, verbose=v, random_state=0),
    "MMC_Supervised": lambda v: MMC_Supervised(n_constraints=60, verbose=v, random_state=0),
    "MMC_Supervised diagonal": lambda v: MMC_Supervised(n_constraints=60, diagonal=True,
                                                        verbose=v, random_state=0),
    "SCML_Supervised": lambda v: SCML_Supervised(n_basis=20, max_iter=400, output_iter=100,
                                                 verbose=v, random_state=0),
}


@pytest.mark.parametrize("name", LEARNERS)
def test_verbose_shows_one_bar_that_ends_at_its_total(name, capsys):
    # the classic learners printed metric-learn's lines at verbose=1 and showed no bar
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = LEARNERS[name](1).fit(X, y)
    captured = capsys.readouterr()
    err = captured.err.replace("\r", "\n")
    label = name.split()[0]
    label = "ITML" if label == "ITML_Supervised" else label
    always_max_iter = label == "SCML_Supervised"  # dual averaging runs every iteration
    desc = re.escape(label if always_max_iter else f"{label} (at most)")
    ends = re.findall(desc + r": 100%\|[^|]*\| (\d+)/(\d+)", err)
    assert ends, err
    assert ends[-1][0] == ends[-1][1] == str(est.n_iter_)  # stopped early: ends at n_iter_
    assert captured.out == ""  # the per-iteration lines are verbose=2's
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        LEARNERS[name](2).fit(X, y)
    assert capsys.readouterr().out.strip()


def test_the_bar_counts_and_prints_nothing_at_verbose_0(capsys):
    with IterationBar(0, 10, "X") as bar:
        bar.update(3)
        bar.to(7)
        bar.line("a line")
    assert bar.n == 7 and bar.bar is None
    assert capsys.readouterr() == ("", "")


def test_an_interrupted_fit_closes_its_bar_where_it_was(capsys):
    # closing an interrupted bar set its total to where it was: 100 %, as if finished;
    # SUML's bar was not closed at all
    from tqdm.auto import tqdm

    with pytest.raises(KeyboardInterrupt):
        with IterationBar(1, 100, "X") as bar:
            bar.update(7)
            raise KeyboardInterrupt
    assert "7/100" in capsys.readouterr().err.replace("\r", "\n").splitlines()[-1]
    assert not [b for b in tqdm._instances if b.desc.startswith("X")]
