"""One thread policy for every skdml fit, transform and score.

Four rules, applied by :func:`thread_limits` to both torch's intra-op pool and
the BLAS pools (through threadpoolctl, a scikit-learn dependency):

1. **An explicit override wins.** ``SKDML_NUM_THREADS=n`` in the environment
   fixes the thread count of every skdml computation, up to the CPUs this
   process may run on (a larger value is clamped, with a warning: tens of
   thousands of OpenMP threads crash the process); ``n`` must be a positive
   integer.
2. **Respect the joblib budget.** Inside a joblib/loky worker
   (``GridSearchCV(n_jobs=2)``, ``cross_val_score``), joblib tells the worker its
   share of the cores through ``OMP_NUM_THREADS`` & co; the budget never
   exceeds it, nor what torch was already told (``torch.set_num_threads``).
   Inside a Dask task (``joblib.parallel_config(backend="dask")``) the
   worker's budget is further split between its task slots: a worker with
   ``nthreads=T`` runs T tasks at once in one process, so each gets
   ``budget // T`` threads (Dask's nanny also sets ``OMP_NUM_THREADS=1`` by
   default, which rule 2 already honours).
3. **Small steps run on one thread.** A step below :data:`SMALL_STEP_FLOPS`
   floating-point operations is over before a second thread pays for its
   start-up; on a loaded 2-core machine, two OpenMP threads spin-waiting on each
   other made tiny steps 10-30x slower than one thread (a default deep fit on
   digits: 97.7 s with 2 threads against 7.2 s with 1).
4. **A busy machine gets fewer threads.** When a computation starts, the
   threads other processes keep runnable (:func:`other_load`: the larger of
   the instantaneous count of ``/proc/loadavg`` and the 1-minute load average,
   each less this process's own share) are taken from the CPUs this process may
   use: ``n = min(budget, max(1, round(cpus - other_load)))``. On a 2-core
   machine with any competing busy process, a fit runs on one thread: two
   threads whose parallel regions wait for each other at every operation, one
   of them descheduled, burnt 5x the CPU and finished 2.4x later (a deep fit on
   digits at load 6: 94 s wall, 40 s CPU with 2 threads; 40 s, 7.5 s with 1).
   ``benchmarks/bench_contention.py`` measures the demo's fits idle and
   loaded. Threads that cost no CPU while they wait for one another keep the
   budget (``choose_n_threads(independent=True)``): the neighbour search's
   query blocks, which share no barrier, and torch's threads when they sleep
   at barriers instead of spinning (``OMP_WAIT_POLICY=PASSIVE``, which
   ``import skdml`` sets unless torch was imported first or the user chose a
   policy: :mod:`skdml._openmp`). There more threads only take a larger share
   of the cores, at no extra CPU. The BLAS pools and scikit-learn's OpenMP
   loops still spin, so they keep the rule. The count is chosen once, at the
   start of the fit or score; set ``SKDML_NUM_THREADS`` for a fixed count
   (rounding can differ in the last bits between thread counts).
"""

from __future__ import annotations

import collections
import functools
import math
import os
import sys
import threading
import time
from collections import deque
from contextlib import contextmanager

import torch
from joblib import cpu_count
from threadpoolctl import ThreadpoolController

from .. import _openmp
from ._warnings import warn_user

__all__ = ["ENV_OVERRIDE", "SMALL_STEP_FLOPS", "choose_n_threads", "machine_cpus", "only_thread",
           "other_load", "thread_budget", "thread_limits"]

#: Environment variable fixing the thread count of every skdml computation.
ENV_OVERRIDE = "SKDML_NUM_THREADS"
#: Environment variables through which joblib's loky workers get ``cpu_count // n_jobs``.
_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: Process-wide record of the open :func:`thread_limits` sections (see there).
_SHARED_LOCK = threading.Lock()
_SHARED = {"active": 0, "torch": None, "blas": None, "blas_cap": None,
           "set": collections.Counter()}  # torch sizes the running sections set


#: Seconds a scan of the loaded BLAS libraries is reused: threadpoolctl's scan of every
#: loaded library took 1-4 ms, and a section needs the pools up to three times (a quarter of
#: a small JRD fit's time went to it, its validation scoring opening a section per epoch). A
#: BLAS loaded later (with a module that brings it: faiss, say) makes the next section scan.
_POOLS_TTL = 5.0
_POOLS_LOCK = threading.Lock()
_POOLS = {"key": None, "at": -math.inf, "pools": None}


def only_thread():
    """Whether this is the program's only thread (daemon threads aside: tqdm's monitor)."""
    current = threading.current_thread()
    return not any(t is not current and not t.daemon for t in threading.enumerate())


@contextmanager
def _blas_control(pools):
    """Let this thread set the BLAS pools' sizes for the block (under ``_SHARED_LOCK``).

    threadpoolctl (3.6 and later) lets one Python thread, the first to set them, own a
    pthreads OpenBLAS pool's size, and ignores the others' settings without a word: a
    section whose restore ran in another pooled thread than the one that had reduced the
    size left the pools at 1 thread for the rest of the process. So each step gives the
    control back after it, and the next step (of any thread) takes it; a user's own
    ``threadpool_limits`` block that holds it keeps it (its limit stands).
    """
    owners = {type(lib) for lib in pools.lib_controllers
              if hasattr(type(lib), "clear_controlling_thread")}
    try:
        yield pools
    finally:
        for owner in owners:
            owner.clear_controlling_thread()


def _blas_pools():
    """The BLAS libraries' thread pools (threadpoolctl), and only them: limiting through
    ``threadpool_limits`` also recorded torch's OpenMP runtime, whose restore then hid from
    torch that its own setting was still reduced (new threads inherited it). The scan is
    reused for :data:`_POOLS_TTL` seconds in a process (the pools' sizes are read live)."""
    now = time.monotonic()
    key = (os.getpid(), len(sys.modules))  # a fork, or modules (and libraries) imported since
    with _POOLS_LOCK:
        if _POOLS["key"] != key or now - _POOLS["at"] > _POOLS_TTL:
            _POOLS.update(key=key, at=now, pools=ThreadpoolController().select(user_api="blas"))
        return _POOLS["pools"]
_LOCAL = threading.local()
#: Floating-point operations per step below which one thread is used (about 10 ms on one core).
SMALL_STEP_FLOPS = 1e9


@functools.lru_cache(maxsize=1)
def _torch_threads_per_thread():
    """Whether ``torch.set_num_threads`` sets the calling thread's size only (OpenMP: each
    thread has its own ``omp_set_num_threads``), not the process's."""
    return "parallel backend: OpenMP" in torch.__config__.parallel_info()


def _positive_int(value):
    try:
        return max(int(value), 1)
    except (TypeError, ValueError):
        return None


def machine_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one), at least 1."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return max(os.cpu_count() or 1, 1)


_WARNED = set()


def _override():
    value = os.environ.get(ENV_OVERRIDE)
    if value is None or not value.strip():
        return None
    text = value.strip()
    text = text[1:] if text.startswith("+") else text  # one sign, as int() reads it
    # plain ASCII digits only: int() also reads "2_0" as 20 and other scripts' digits
    digits = text.isascii() and text.isdigit()
    # beyond 18 digits (int() refuses 4,300): more threads than any machine has
    n = (int(text) if len(text.lstrip("0")) <= 18 else 2**62) if digits else None
    if n is None or n < 1:
        raise ValueError(
            f"{ENV_OVERRIDE}={value!r} is not a positive integer: set it to the number of "
            f"threads skdml may use (1 to {machine_cpus()} here), or unset it.")
    cpus = machine_cpus()
    if n > cpus:
        if value not in _WARNED:
            _WARNED.add(value)
            shown = value if len(value) <= 24 else f"{value[:12]}... ({len(value)} characters)"
            warn_user(f"{ENV_OVERRIDE}={shown} exceeds the {cpus} CPUs this process may "
                      f"use; skdml uses {cpus} threads.", RuntimeWarning)
        n = cpus
    return n


def _dask_task_slots():
    """Task slots (``nthreads``) of the Dask worker running this code; ``None`` elsewhere."""
    distributed = sys.modules.get("distributed")  # never import it: only a worker has it loaded
    if distributed is None:
        return None
    try:
        worker = distributed.get_worker()
    except (ValueError, AttributeError):
        return None
    return _positive_int(getattr(worker.state, "nthreads", None) or worker.nthreads)


def thread_budget() -> int:
    """Threads this process may use: the override, else the joblib worker's share.

    Outside a joblib worker the budget is the number of usable cores, capped by
    what torch was already told (``torch.set_num_threads``). Inside a task of a
    Dask worker with ``nthreads=T`` task slots it is divided by ``T``.

    Returns
    -------
    n_threads : int
        At least 1.

    Examples
    --------
    >>> thread_budget() >= 1
    True
    """
    override = _override()
    if override is not None:
        return override
    budget = min(cpu_count(only_physical_cores=False), torch.get_num_threads())
    for var in _THREAD_VARS:
        value = os.environ.get(var)
        if value:
            n = _positive_int(value)
            if n is not None:
                budget = min(budget, n)
    slots = _dask_task_slots()
    if slots is not None:
        budget //= slots
    return max(budget, 1)


#: ``(monotonic seconds, process CPU seconds)`` samples of this process, the oldest first:
#: its own share of the load average is its CPU rate since the sample nearest a minute ago.
_OWN_SAMPLES = deque([(time.monotonic(), time.process_time())], maxlen=64)
_OWN_WINDOW = 60.0
#: A measurement is reused for this many seconds (sections that start in quick succession:
#: a fit's validation scores, nested sections).
_LOAD_CACHE_S = 1.0
_LOAD_CACHE = {"value": None, "at": 0.0}


_OWN_LOCK = threading.Lock()  # sections starting in two threads: one reads, one appends


def _own_rate(now, cpu):
    """Average number of this process's busy threads over about the last minute."""
    with _OWN_LOCK:  # "deque mutated during iteration" when two threads measured at once
        then = [s for s in _OWN_SAMPLES if now - s[0] >= 1.0]
        _OWN_SAMPLES.append((now, cpu))
    if not then:
        return 0.0
    recent = [s for s in then if now - s[0] <= _OWN_WINDOW]
    t0, c0 = recent[0] if recent else then[-1]
    return max(cpu - c0, 0.0) / (now - t0)


def _runnable_now():
    """Runnable threads on the machine now (``/proc/loadavg``), least of 3 looks; or None."""
    counts = []
    for attempt in range(3):
        try:
            with open("/proc/loadavg", encoding="ascii") as fh:
                counts.append(int(fh.read().split()[3].split("/")[0]))
        except (OSError, ValueError, IndexError):
            return None
        if attempt < 2:
            time.sleep(0.002)
    return min(counts)


def other_load() -> float:
    """Threads that other processes keep runnable: the competition a computation starting now meets.

    The larger of two estimates, each less this process's own threads: the
    runnable count of ``/proc/loadavg`` now (least of three looks, less the
    calling thread) and the 1-minute load average (less this process's average
    CPU use over about the last minute). The larger, because a thread too many
    costs far more on a busy machine than a thread too few on an idle one.
    ``0.0`` where the operating system reports neither (Windows). A measurement
    is reused for a second.

    Returns
    -------
    load : float
        At least 0.

    Examples
    --------
    >>> other_load() >= 0.0
    True
    """
    now_s = time.monotonic()
    cached = _LOAD_CACHE.get("value")
    if cached is not None and now_s - _LOAD_CACHE["at"] < _LOAD_CACHE_S:
        return cached
    own = _own_rate(now_s, time.process_time())
    estimates = []
    now = _runnable_now()
    if now is not None:
        estimates.append(now - 1)
    try:
        estimates.append(os.getloadavg()[0] - own)
    except (AttributeError, OSError):
        pass
    load = max(max(estimates, default=0.0), 0.0)
    _LOAD_CACHE.update(value=load, at=now_s)
    return load


def choose_n_threads(flops_per_step=None, *, independent=False) -> int:
    """Threads for a computation of ``flops_per_step`` operations per step.

    Parameters
    ----------
    flops_per_step : float, default=None
        Estimated floating-point operations of one step (a batch's forward and
        backward pass, one objective evaluation). ``None``: unknown, use the
        budget.
    independent : bool, default=False
        The threads cost no CPU while they wait for one another: they share no
        barrier (the neighbour search's query blocks, one thread each), or they
        sleep at it (torch's OpenMP threads under ``OMP_WAIT_POLICY=PASSIVE``).
        Rule 4 then does not apply: on a busy machine more threads take a
        larger share of the cores at no extra CPU.

    Returns
    -------
    n_threads : int
        The override if set; else 1 for a step below :data:`SMALL_STEP_FLOPS`;
        else :func:`thread_budget`, less (unless ``independent``) the CPUs other
        processes keep busy (:func:`other_load`), at least 1.

    Examples
    --------
    >>> choose_n_threads(1e6)
    1
    """
    override = _override()
    if override is not None:
        return override
    if flops_per_step is not None and flops_per_step < SMALL_STEP_FLOPS:
        return 1
    budget = thread_budget()
    if budget == 1 or independent:
        return budget
    free = int(machine_cpus() - other_load() + 0.5)
    return max(1, min(budget, free))


@contextmanager
def thread_limits(n_threads=None, *, flops_per_step=None):
    """Limit torch's intra-op threads and the BLAS pools for a block, then restore them.

    Parameters
    ----------
    n_threads : int, default=None
        Threads to use. ``None`` applies :func:`choose_n_threads` to
        ``flops_per_step``.
    flops_per_step : float, default=None
        Work per step, see :func:`choose_n_threads`.

    Yields
    ------
    n_threads : int
        torch's thread count inside the block. The BLAS pools get the same,
        except on a busy machine when torch's threads wait passively
        (:data:`skdml._openmp.PASSIVE_WAITS`): torch's then keep the budget
        (rule 4 exempts them) while the BLAS pools, which spin, get rule 4's
        count, :func:`choose_n_threads` ``(flops_per_step)``.

    Examples
    --------
    >>> import torch
    >>> before = torch.get_num_threads()
    >>> with thread_limits(1) as n:
    ...     n, torch.get_num_threads()
    (1, 1)
    >>> torch.get_num_threads() == before
    True
    """
    if n_threads is None:
        wanted = choose_n_threads(flops_per_step)  # BLAS pools: their threads spin
        torch_wanted = choose_n_threads(flops_per_step, independent=_openmp.PASSIVE_WAITS)
    else:
        wanted = torch_wanted = min(max(int(n_threads), 1), machine_cpus())
    # The BLAS pools' sizes are process-wide: sections running at once in threads (a Dask
    # worker's task slots) must not restore them under each other, so the original sizes
    # come back when the last section of the process ends, and a nested section gives its
    # thread back the enclosing section's size. torch's size is per thread under its OpenMP
    # backend (the wheels'): each section gives its own thread back the size it found (a
    # thread whose section ended while another thread's ran kept the reduced size, and with
    # it every later fit in that pooled thread); under a process-wide backend, as the BLAS.
    stack = _LOCAL.__dict__.setdefault("stack", [])
    torch_before = torch.get_num_threads()
    with _SHARED_LOCK:
        if _SHARED["active"] == 0:
            _SHARED["torch"] = torch_before
            pools = _blas_pools()
            # a limit the user set on the BLAS pools (threadpoolctl) caps every section
            sizes = [lib.num_threads for lib in pools.lib_controllers]
            _SHARED["blas_cap"] = min(sizes) if sizes else None
        elif (not stack and not getattr(_LOCAL, "seen", False) and _SHARED["set"][torch_before]
              and torch_before != _SHARED["torch"]):
            # this thread's first section ever, while another thread's runs, at the size that
            # section set: a thread new to torch took it as its own (torch starts new threads
            # at the last size set in any thread) and gave it back for good, to itself and, as
            # the last size set, to every later new thread: the process's size is the one to
            # keep. A size of the thread's own is kept where it differs from every running
            # section's, or once the thread has been through a section; a new thread that set
            # exactly a running section's size itself cannot be told apart (it gets the
            # process's size back)
            torch_before = _SHARED["torch"]
        if _SHARED["blas_cap"] is not None:
            wanted = min(wanted, _SHARED["blas_cap"])
        with _blas_control(_blas_pools()) as pools:
            if _SHARED["active"] == 0:
                _SHARED["blas"] = pools.limit(limits=wanted)
            else:
                pools.limit(limits=wanted)
        _SHARED["active"] += 1
        _SHARED["set"][torch_wanted] += 1
        if torch.get_num_threads() != torch_wanted:
            torch.set_num_threads(torch_wanted)
    stack.append((torch_wanted, wanted))
    try:
        yield torch_wanted
    finally:
        stack.pop()
        _LOCAL.seen = True
        with _SHARED_LOCK:
            _SHARED["active"] -= 1
            _SHARED["set"][torch_wanted] -= 1
            if _SHARED["active"] == 0:
                with _blas_control(_blas_pools()):
                    _SHARED["blas"].restore_original_limits()
                restore, _SHARED["blas"] = _SHARED["torch"], None
            else:
                restore, restore_blas = stack[-1] if stack else (None, None)
                if restore_blas is not None:
                    with _blas_control(_blas_pools()) as pools:
                        pools.limit(limits=restore_blas)
            restore = torch_before if _torch_threads_per_thread() else restore
            if restore is not None:  # always: torch's default for new threads comes back too
                torch.set_num_threads(restore)
