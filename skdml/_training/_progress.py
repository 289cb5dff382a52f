"""One progress bar for the solvers that iterate up to ``max_iter`` and may stop early.

The epoch learners (ECAML, JRD, the deep learner) show theirs through the
:class:`~skdml._training.Progress` callback of the training loop; SUML and the
classic learners (LMNN, ITML, LSML, MLKR, MMC, SCML) iterate in their own solvers
(pymanopt, scipy's L-BFGS, Bregman sweeps, dual averaging) and share this one.
``verbose=1`` shows the bar; ``verbose=2`` also prints each iteration's line (the
lines metric-learn printed at ``verbose=True``), through the bar so that it stays
whole.
"""

from __future__ import annotations

__all__ = ["IterationBar"]


class IterationBar:
    """A tqdm bar over at most ``max_iter`` iterations, labelled "(at most)" (unless
    ``may_stop_early=False``: a solver that always runs ``max_iter``).

    A tolerance ends most fits before ``max_iter``: the total and the ETA are
    upper bounds, and the label says so, as on the epoch learners' bars. On
    :meth:`close` an early stop ends the bar at the iterations run (100 %).
    Nothing is shown when ``verbose`` is 0 or ``max_iter`` is 0. Use it as a
    context manager.

    Examples
    --------
    >>> with IterationBar(0, 100, "LMNN") as bar:   # verbose=0: no bar, nothing printed
    ...     bar.update()
    ...     bar.line("LMNN iteration 1")
    >>> bar.n
    1
    """

    def __init__(self, verbose, max_iter, desc, *, unit="iter", may_stop_early=True):
        self.verbose, self.n, self.bar = int(verbose or 0), 0, None
        if self.verbose and max_iter:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=max_iter, unit=unit, dynamic_ncols=True,
                            desc=f"{desc} (at most)" if may_stop_early else desc)

    def update(self, n=1):
        """``n`` more iterations done."""
        self.to(self.n + n)

    def to(self, n):
        """``n`` iterations done in all."""
        self.n = n
        if self.bar is not None:
            self.bar.n = min(n, self.bar.total)
            self.bar.refresh()

    def line(self, text):
        """Print ``text`` at ``verbose >= 2`` (through the bar when one is shown)."""
        if self.verbose >= 2:
            if self.bar is not None:
                self.bar.write(text)
            else:
                print(text)

    def close(self, finished=True):
        """Close the bar; a finished fit that stopped early ends it at its own total (100 %),
        an interrupted one where it was."""
        if self.bar is not None:
            if finished:
                self.bar.total = self.bar.n
            self.bar.close()
            self.bar = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.close(finished=exc_type is None)
        return False
