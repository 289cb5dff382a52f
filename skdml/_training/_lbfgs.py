"""The one L-BFGS runner of skdml (scipy's L-BFGS-B), shared by LMNN, MLKR, LSML and MMC.

:func:`run_lbfgs` runs at most ``max_iter`` iterations, stops on scipy's relative
decrease test (``ftol``; the gradient test is off), advances a progress bar once
per accepted iteration, and says whether the iteration budget cut the run short.
"""

from __future__ import annotations

from dataclasses import dataclass

from scipy.optimize import minimize

__all__ = ["LbfgsRun", "run_lbfgs"]


@dataclass
class LbfgsRun:
    """What :func:`run_lbfgs` found.

    Attributes
    ----------
    x : ndarray
        The last accepted point.
    value : float
        The value at ``x``.
    n_iter : int
        Iterations run, at least 1 (a start already optimal takes one checking iteration).
    cut_short : bool
        ``max_iter`` stopped the run while its last step still fell by more than ``tol``.
    """

    x: object
    value: float
    n_iter: int
    cut_short: bool


def run_lbfgs(fun, x0, *, max_iter, tol, bar=None, label=None):
    """Minimise ``fun`` (returning ``(value, gradient)``) from ``x0`` with L-BFGS-B.

    The run stops when an iteration lowers the value by at most ``tol`` relative to
    ``max(|f_k|, |f_k+1|, 1)`` (scipy's ``ftol``), or after ``max_iter`` iterations.
    scipy counts the iterations before it tests the decrease, so a run whose last
    allowed iteration met the test is reported with the budget's status; here it is
    not ``cut_short``: its result is the one a larger ``max_iter`` returns. With
    ``tol=0`` the budget is what was asked for, never a cut.

    Parameters
    ----------
    fun : callable
        ``fun(x) -> (float, ndarray)``: the value and its gradient.
    x0 : ndarray of shape (n,)
        The start.
    max_iter : int
        At least 1.
    tol : float
        The relative decrease that ends the run.
    bar : IterationBar, default=None
        Advanced once per accepted iteration.
    label : str, default=None
        When given, each accepted iteration's value is printed through ``bar`` (its
        ``verbose >= 2`` line) as ``"<label> iteration <n>: loss <value>"``.

    Returns
    -------
    run : LbfgsRun

    Examples
    --------
    >>> import numpy as np
    >>> run = run_lbfgs(lambda x: (float(x @ x), 2 * x), np.ones(3), max_iter=50, tol=1e-9)
    >>> run.cut_short, bool(np.allclose(run.x, 0.0))
    (False, True)
    """
    values, first = [], []

    def evaluated(x):  # L-BFGS-B evaluates the start first: its value, for a one-step run
        out = fun(x)
        if not first:
            first.append(float(out[0]))
        return out

    def accepted(intermediate_result):  # scipy passes the new point and its value
        values.append(float(intermediate_result.fun))
        if bar is not None:
            bar.update()
            if label is not None:
                bar.line(f"{label} iteration {bar.n}: loss {values[-1]:.6g}")

    result = minimize(evaluated, x0, jac=True, method="L-BFGS-B", callback=accepted,
                      options={"maxiter": max_iter, "ftol": tol, "gtol": 0.0})
    cut_short = False
    if result.status == 1 and tol > 0:
        before = values[-2] if len(values) >= 2 else first[0]
        after = values[-1] if values else before
        # scipy's own test of the last step, which it skipped for the budget
        cut_short = not (before - after <= tol * max(abs(before), abs(after), 1.0))
    return LbfgsRun(x=result.x, value=float(result.fun), n_iter=max(int(result.nit), 1),
                    cut_short=cut_short)
