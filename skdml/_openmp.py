"""OpenMP's wait policy for torch: threads that sleep at barriers instead of spinning.

torch's CPU operators are OpenMP parallel regions (GNU libgomp in the PyPI wheels).
At the end of each region a thread that finished first *spins* for its partner,
about 300,000 rounds by default, before it sleeps. On an idle machine that saves
a wake-up; on a busy one the partner is often descheduled, and the spinning
thread burns the CPU the partner needs: a deep fit on the demo's digit images
with two threads beside four busy processes took 11x its idle CPU time, and
1.7-6.8x the wall time of one thread under the same load
(``benchmarks/studies/bench_wait_policy.py``). With ``OMP_WAIT_POLICY=PASSIVE`` the
threads sleep at once: under the same load the two-thread fit costs 1.05x its
idle CPU and takes 0.7-1.0x one thread's wall time; idle, it is 5-7 % slower
than with spinning threads, for 12-22 % less CPU.

libgomp reads the policy once, when it is loaded, that is when torch is first
imported. So ``import skdml`` (whose estimators import torch lazily) sets
``OMP_WAIT_POLICY=PASSIVE`` in the environment when torch is not imported yet and
the variable is not set: a user's own value (``OMP_WAIT_POLICY=ACTIVE`` keeps
libgomp's default) always wins, and nothing changes when torch was imported
first. Child processes (joblib, Dask and DDP workers) inherit the variable. The
thread policy (:mod:`skdml._utils._threads`, rule 4) reads
:data:`PASSIVE_WAITS` to decide whether torch's threads may stay two on a busy
machine. See ``doc/threads.md``.
"""

from __future__ import annotations

import os
import sys

__all__ = ["PASSIVE_WAITS", "WAIT_POLICY", "prefer_passive_waits"]

#: The environment variable that sets libgomp's wait policy when it loads.
WAIT_POLICY = "OMP_WAIT_POLICY"


def prefer_passive_waits(environ=None, modules=None) -> bool:
    """Ask for passive OpenMP waits unless torch is loaded or the user chose a policy.

    Parameters
    ----------
    environ : mapping, default=None
        The environment to read and update; ``None`` means ``os.environ``.
    modules : mapping, default=None
        The imported modules; ``None`` means ``sys.modules``.

    Returns
    -------
    passive : bool
        Whether torch's OpenMP threads sleep at barriers: the policy in
        ``environ`` is ``PASSIVE`` (set here, or by the user before torch loaded).

    Examples
    --------
    >>> env = {}
    >>> prefer_passive_waits(env, modules={}), env
    (True, {'OMP_WAIT_POLICY': 'PASSIVE'})
    >>> prefer_passive_waits({"OMP_WAIT_POLICY": "active"}, modules={})
    False
    >>> prefer_passive_waits({}, modules={"torch": None})  # too late: torch chose already
    False
    """
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    if "torch" not in modules and not environ.get(WAIT_POLICY, "").strip():
        environ[WAIT_POLICY] = "PASSIVE"
    return environ.get(WAIT_POLICY, "").strip().upper() == "PASSIVE"


#: Whether torch's OpenMP threads wait passively in this process (decided at ``import skdml``).
PASSIVE_WAITS = prefer_passive_waits()
