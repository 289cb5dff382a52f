"""The one pymanopt runner of skdml, shared by SUML and the linear ``batch`` solver.

:func:`run_manopt` builds the optimiser, runs it under the thread policy, shows
a tqdm bar at ``verbose >= 1`` (pymanopt's own table at ``verbose >= 2``), and
reads *why* it stopped from the fields of pymanopt's result (iterations,
gradient norm, step size), never from its message text.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._progress import IterationBar

__all__ = ["ManoptRun", "SOLVERS", "run_manopt"]

SOLVERS = ("conjugate_gradient", "steepest_descent", "trust_regions")


@dataclass
class ManoptRun:
    """The outcome of :func:`run_manopt`.

    Attributes
    ----------
    point : array or list of arrays
        The final point.
    n_iter : int
        Steps taken (pymanopt's conjugate gradient counts its starting point as
        an iteration; this does not).
    history : list of dict
        ``{"iteration", "loss", "gradient_norm"}`` per logged iteration (the
        start included; trust regions logs nothing per iteration).
    stop_reason : {"gradient_norm", "step_size", "max_iter", "other"}
        Why the optimiser stopped.
    converged : bool
        ``True`` when it stopped on the gradient norm or on a step too small to
        make progress (a stationary point to working precision), ``False`` when
        the iteration budget cut it short.
    """

    point: object
    n_iter: int
    history: list = field(default_factory=list)
    stop_reason: str = "other"
    converged: bool = False


def _stop_reason(result, max_iterations, min_gradient_norm, min_step_size):
    gradient_norm = result.gradient_norm
    if gradient_norm is not None and np.isfinite(gradient_norm) and \
            gradient_norm < min_gradient_norm:
        return "gradient_norm"
    if result.step_size is not None and result.step_size < min_step_size:
        return "step_size"
    if result.iterations >= max_iterations:
        return "max_iter"
    return "other"


def run_manopt(manifold, cost, euclidean_gradient, initial_point, *, euclidean_hessian=None,
               solver="conjugate_gradient", max_iter=100, tol=1e-6, min_step_size=1e-10,
               verbose=0, desc="pymanopt", bar=None):
    """Minimise ``cost`` on ``manifold`` from ``initial_point`` with a pymanopt optimiser.

    Parameters
    ----------
    manifold : pymanopt.manifolds.manifold.Manifold
        The search space (a product manifold for several blocks).
    cost : callable
        ``cost(*blocks) -> float`` on numpy arrays, one argument per block of
        the manifold's points.
    euclidean_gradient : callable
        ``euclidean_gradient(*blocks)`` -> the gradient (a tuple of arrays for a
        product manifold).
    initial_point : array or list of arrays
        Start.
    euclidean_hessian : callable, default=None
        ``euclidean_hessian(*blocks, *directions)`` for trust regions.
    solver : {"conjugate_gradient", "steepest_descent", "trust_regions"}
        The optimiser.
    max_iter : int
        Steps at most.
    tol : float
        Stop when the Riemannian gradient norm falls below ``tol``.
    min_step_size : float, default=1e-10
        Stop when a step is shorter (a stationary point to working precision).
    verbose : int, default=0
        1: a tqdm bar over iterations (gradient evaluations); 2: also pymanopt's table.
    desc : str
        Label of the bar.
    bar : tqdm bar, default=None
        A bar of the caller's to advance instead (left open: a fit run in windows
        shows one bar over all of them).

    Returns
    -------
    run : ManoptRun

    Examples
    --------
    >>> import numpy as np
    >>> from pymanopt.manifolds import Euclidean
    >>> def cost(x):
    ...     return float(np.sum((x - 1.0) ** 2))
    >>> def grad(x):
    ...     return 2.0 * (x - 1.0)
    >>> run = run_manopt(Euclidean(2), cost, grad, np.zeros(2), max_iter=50, tol=1e-8)
    >>> run.converged, run.stop_reason, np.round(run.point, 6).tolist()
    (True, 'gradient_norm', [1.0, 1.0])
    """
    import pymanopt

    optimizer_cls = {
        "conjugate_gradient": pymanopt.optimizers.ConjugateGradient,
        "steepest_descent": pymanopt.optimizers.SteepestDescent,
        "trust_regions": pymanopt.optimizers.TrustRegions,
    }[solver]
    # pymanopt's CG counts its starting point as iteration 1 (it checks the stopping
    # criteria before stepping); SD and TR count steps taken. CG and SD log each point
    # before stepping from it (the start as iteration 1), so their logs are offset by one;
    # SD's last step leaves a point its log never shows (added below).
    offset = 1 if solver == "conjugate_gradient" else 0
    log_offset = 1 if solver in ("conjugate_gradient", "steepest_descent") else 0
    max_iterations = max_iter + offset
    optimizer = optimizer_cls(max_iterations=max_iterations, min_gradient_norm=tol,
                              min_step_size=min_step_size,
                              verbosity=2 if verbose >= 2 else 0, log_verbosity=1)
    # a bar of our own says "(at most)" and ends at the iterations run (not at the gradient
    # evaluations, which count the start too): a tolerance ends most runs early
    progress = IterationBar(verbose if bar is None else 0, max_iter, desc)
    if bar is None:
        bar = progress.bar
    finished = False

    def gradient(*blocks):
        if bar is not None and bar.n < bar.total:
            bar.update(1)  # one gradient evaluation per CG/SD iteration
        return euclidean_gradient(*blocks)

    decorate = pymanopt.function.numpy(manifold)
    problem = pymanopt.Problem(
        manifold, decorate(lambda *blocks: cost(*blocks)), euclidean_gradient=decorate(gradient),
        euclidean_hessian=None if euclidean_hessian is None else decorate(
            lambda *args: euclidean_hessian(*args)))
    try:
        # CG's Hestenes-Stiefel beta is 0/0 after a failed line search (pymanopt then restarts
        # along the gradient): numpy's "invalid value" warning is noise to the user; so is an
        # underflow of a tiny term to 0 (np.seterr(all="raise") made it an error)
        with np.errstate(invalid="ignore", divide="ignore", under="ignore"):
            result = optimizer.run(problem, initial_point=initial_point)
            n_iter = max(int(result.iterations) - offset, 0)
            logged = (result.log or {}).get("iterations") or {}
            history = [{"iteration": int(i) - log_offset, "loss": float(c),
                        "gradient_norm": float(g)}
                       for i, c, g in zip(logged.get("iteration", []), logged.get("cost", []),
                                          logged.get("gradient_norm", []))]
            if solver == "steepest_descent" and history and history[-1]["iteration"] < n_iter:
                point = result.point
                history.append({"iteration": n_iter, "loss": float(problem.cost(point)),
                                "gradient_norm": float(manifold.norm(
                                    point, problem.riemannian_gradient(point)))})
        progress.to(n_iter)
        finished = True
    finally:
        progress.close(finished=finished)
    reason = _stop_reason(result, max_iterations, tol, min_step_size)
    return ManoptRun(point=result.point, n_iter=n_iter,
                     history=history, stop_reason=reason,
                     converged=reason in ("gradient_norm", "step_size"))
