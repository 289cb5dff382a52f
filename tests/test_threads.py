"""Thread hygiene: GridSearchCV(n_jobs=2) over torch code must not oversubscribe the cores.

Two loky workers on two cores each running two torch threads were measured 40x
slower than one process. joblib tells its workers their share of the cores
through ``OMP_NUM_THREADS`` & co; :func:`skdml._utils.thread_budget` reads it
and :func:`skdml._utils.thread_limits` applies it to torch and to the BLAS pools
for the duration of a fit. These tests run a tiny torch estimator in real loky workers and look at
what it saw.
"""

import os
import sys

import numpy as np
import pytest
import torch
from joblib import cpu_count
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.model_selection import GridSearchCV
from threadpoolctl import threadpool_info

from skdml import _openmp
from skdml._utils import (_THREAD_VARS, ENV_OVERRIDE, SMALL_STEP_FLOPS, _threads,
                          choose_n_threads, thread_budget, thread_limits)

N_CPUS = cpu_count(only_physical_cores=False)


class _TorchProbe(TransformerMixin, BaseEstimator):
    """Fits a small torch map (a Cholesky factor) inside ``thread_limits()``; records threads."""

    def __init__(self, alpha=1.0, preset_threads=None):
        self.alpha = alpha
        self.preset_threads = preset_threads

    def fit(self, X, y=None):
        original = torch.get_num_threads()
        if self.preset_threads is not None:
            # Something in the worker (another library, user code) raised torch's
            # thread count before this fit: thread_limits() must still apply the budget.
            torch.set_num_threads(self.preset_threads)
        with thread_limits() as n_threads:
            Xt = torch.as_tensor(np.asarray(X, dtype=np.float32))
            gram = Xt.T @ Xt + self.alpha * torch.eye(Xt.shape[1])
            self.components_ = torch.linalg.cholesky(gram).T.numpy()
            self.threads_granted_ = n_threads
            self.torch_threads_ = torch.get_num_threads()
            self.budget_ = thread_budget()
            # Native pools (torch's OpenMP, BLAS) as threadpoolctl sees them.
            self.native_threads_ = max(
                (p["num_threads"] for p in threadpool_info()), default=1
            )
        self.torch_threads_after_ = torch.get_num_threads()
        torch.set_num_threads(original)  # leave the (reused) loky worker as we found it
        self.pid_ = os.getpid()
        self.env_ = {v: os.environ.get(v) for v in _THREAD_VARS}
        return self

    def transform(self, X):
        return np.asarray(X) @ self.components_.T


def _score_threads(estimator, X, y=None):
    # Score = the threads torch used in fit, so cv_results_ reports it per fold.
    return float(estimator.torch_threads_)


@pytest.fixture
def clean_thread_env(monkeypatch):
    for var in _THREAD_VARS + (ENV_OVERRIDE,):
        monkeypatch.delenv(var, raising=False)
    # an idle machine, whatever else runs beside the tests (rule 4 has its own tests)
    monkeypatch.setattr(_threads, "other_load", lambda: 0.0, raising=False)
    previous = torch.get_num_threads()
    yield
    torch.set_num_threads(previous)



def _torch_size_of_a_new_thread():
    """torch's thread count in a thread started now (the default of new threads)."""
    import threading

    out = []
    t = threading.Thread(target=lambda: out.append(torch.get_num_threads()))
    t.start()
    t.join()
    return out[0]

def test_budget_outside_a_worker_is_the_core_count(clean_thread_env):
    torch.set_num_threads(N_CPUS)
    assert thread_budget() == N_CPUS
    with thread_limits() as n:
        assert n == N_CPUS == torch.get_num_threads()


@pytest.mark.parametrize("var", _THREAD_VARS)
def test_budget_honours_joblib_worker_variables(clean_thread_env, monkeypatch, var):
    torch.set_num_threads(N_CPUS)
    monkeypatch.setenv(var, "1")
    assert thread_budget() == 1
    with thread_limits() as n:
        assert n == 1 == torch.get_num_threads()
    assert torch.get_num_threads() == N_CPUS  # restored


def test_budget_ignores_garbage_and_never_reaches_zero(clean_thread_env, monkeypatch):
    torch.set_num_threads(N_CPUS)
    monkeypatch.setenv("OMP_NUM_THREADS", "lots")
    assert thread_budget() == N_CPUS
    monkeypatch.setenv("OMP_NUM_THREADS", "0")
    assert thread_budget() == 1


def test_torch_threads_restores_after_an_error(clean_thread_env):
    torch.set_num_threads(N_CPUS)
    with pytest.raises(RuntimeError, match="boom"):
        with thread_limits(1):
            assert torch.get_num_threads() == 1
            raise RuntimeError("boom")
    assert torch.get_num_threads() == N_CPUS


def test_grid_search_n_jobs_2_does_not_oversubscribe():
    """The issue's scenario: GridSearchCV(n_jobs=2) over torch code, loky workers."""
    rng = np.random.RandomState(0)
    X = rng.randn(60, 5)
    parent_threads = torch.get_num_threads()
    search = GridSearchCV(_TorchProbe(), {"alpha": [0.5, 1.0, 2.0]}, cv=2,
                          scoring=_score_threads, n_jobs=2, refit=False)
    search.fit(X)
    share = max(N_CPUS // 2, 1)
    per_fold = np.array([search.cv_results_[f"split{i}_test_score"] for i in range(2)])
    assert per_fold.shape == (2, 3)
    assert np.all(per_fold >= 1) and np.all(per_fold <= share)
    assert torch.get_num_threads() == parent_threads  # the parent is left alone

    # Look inside the workers directly (same loky executor) for the full picture.
    from joblib import Parallel, delayed

    probes = Parallel(n_jobs=2)(
        delayed(_TorchProbe(alpha=a, preset_threads=preset).fit)(X)
        for a in (1.0, 2.0) for preset in (None, N_CPUS)
    )
    assert all(probe.pid_ != os.getpid() for probe in probes)  # really in workers
    for probe in probes:
        assert 1 <= int(probe.env_["OMP_NUM_THREADS"]) <= share  # set by joblib
        assert probe.budget_ == probe.threads_granted_ == probe.torch_threads_ <= share
        assert probe.native_threads_ <= share  # BLAS/OpenMP pools too, not only torch
        if probe.preset_threads is None:
            assert probe.torch_threads_after_ <= share
        else:  # the context restores what it found
            assert probe.torch_threads_after_ == probe.preset_threads


def test_override_wins_over_everything(clean_thread_env, monkeypatch):
    monkeypatch.setenv(ENV_OVERRIDE, str(N_CPUS))  # at most the machine's CPUs (clamped)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert thread_budget() == N_CPUS and choose_n_threads(1.0) == N_CPUS
    with thread_limits() as n:
        assert n == N_CPUS == torch.get_num_threads()
    monkeypatch.setenv(ENV_OVERRIDE, "many")
    with pytest.raises(ValueError, match=ENV_OVERRIDE):
        thread_budget()


@pytest.mark.parametrize("value", ["2_0", "\u0661", "1.5", "0", "-1", "++1", "+ 1"])
def test_override_takes_plain_ascii_integers_only(clean_thread_env, monkeypatch, value):
    # int() also reads "2_0" as 20 and Arabic-Indic digits: they were taken as counts
    monkeypatch.setenv(ENV_OVERRIDE, value)
    with pytest.raises(ValueError, match="not a positive integer"):
        thread_budget()


def test_overlapping_sections_give_each_thread_back_its_own_torch_size(clean_thread_env):
    # torch's size is per thread under OpenMP: a section that ended while another thread's
    # still ran left its thread at the reduced size (and every later fit in that pooled
    # thread, its budget being capped by torch's size)
    import threading
    if not _threads._torch_threads_per_thread():
        pytest.skip("torch's thread count is process-wide in this build")
    inside, first_out, sizes = threading.Event(), threading.Event(), {}

    def first():
        sizes["first before"] = torch.get_num_threads()
        with thread_limits(1):
            inside.wait()
        sizes["first after"] = torch.get_num_threads()
        first_out.set()

    def second():
        sizes["second before"] = torch.get_num_threads()
        with thread_limits(1):
            inside.set()
            first_out.wait()
        sizes["second after"] = torch.get_num_threads()

    workers = [threading.Thread(target=f) for f in (first, second)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sizes["first after"] == sizes["first before"], sizes
    # the second thread may have started inside the first's section, at its reduced size
    # (torch starts a thread at the last size set anywhere): it gets the process's back
    assert sizes["second after"] == sizes["first before"], sizes


def test_a_thread_new_to_torch_inside_another_section_gets_the_process_size_back(
        clean_thread_env):
    # a pool thread whose first torch call fell inside another thread's section kept
    # torch's size 1 for good, and, ending last, gave 1 to every later new thread
    import threading
    if not _threads._torch_threads_per_thread():
        pytest.skip("torch's thread count is process-wide in this build")
    if torch.get_num_threads() < 2:
        pytest.skip("one thread already")
    process_size = torch.get_num_threads()
    inside, second_done, sizes = threading.Event(), threading.Event(), {}

    def first():
        with thread_limits(1):
            inside.set()
            second_done.wait()

    def second():
        inside.wait()
        sizes["found"] = torch.get_num_threads()  # started inside the first's section
        with thread_limits(1):
            pass
        sizes["after"] = torch.get_num_threads()
        second_done.set()

    workers = [threading.Thread(target=f) for f in (first, second)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sizes["after"] == process_size, sizes
    assert _torch_size_of_a_new_thread() == process_size


def test_the_load_measure_is_safe_in_two_threads():
    # two sections measuring at once: "deque mutated during iteration"
    import threading
    import time

    errors = []

    def measure():
        try:
            for _ in range(20000):
                _threads._own_rate(time.monotonic(), time.process_time())
        except RuntimeError as exc:
            errors.append(exc)

    workers = [threading.Thread(target=measure) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors


def test_small_steps_run_on_one_thread(clean_thread_env):
    torch.set_num_threads(N_CPUS)
    assert choose_n_threads(SMALL_STEP_FLOPS / 10) == 1
    assert choose_n_threads(SMALL_STEP_FLOPS * 10) == N_CPUS
    assert choose_n_threads(None) == N_CPUS


def test_blas_pools_are_limited_too(clean_thread_env):
    def blas_threads():
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]

    with thread_limits(1):
        assert all(n == 1 for n in blas_threads())


def test_fits_use_the_policy(clean_thread_env, monkeypatch):
    """A tiny deep fit runs on one thread; the override reaches inside the fit."""
    from skdml import DeepMetricTransformer

    seen = []
    real = torch.set_num_threads

    def spy(n):
        seen.append(n)
        real(n)

    monkeypatch.setattr(torch, "set_num_threads", spy)
    torch.set_num_threads(N_CPUS)
    seen.clear()
    rng = np.random.RandomState(0)
    X, y = rng.randn(40, 5), np.repeat(np.arange(4), 10)
    DeepMetricTransformer(n_components=2, max_iter=1, device="cpu", random_state=0).fit(X, y)
    if N_CPUS > 1:
        assert 1 in seen  # the small-step rule applied inside fit
    assert torch.get_num_threads() == N_CPUS  # and restored after


# ---------------------------------------------------------------- rule 4: a busy machine
def _blas_threads():
    return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}


#: The BLAS pools' size before any section: a limit set before skdml runs (OpenBLAS takes
#: ``OMP_NUM_THREADS`` when it loads) caps every section, by design.
_BLAS_START = min(_blas_threads(), default=1)


def _blas_reachable(n):
    """The BLAS pools' sizes a section asking for ``n`` threads sets (the suite failed under
    ``OMP_NUM_THREADS=1``, where the pools start at one thread)."""
    return {min(n, _BLAS_START)}


@pytest.mark.parametrize("load, expected", [(0.0, 2), (0.4, 2), (0.6, 1), (1.0, 1), (6.0, 1)])
def test_busy_machine_gets_fewer_threads(clean_thread_env, monkeypatch, load, expected):
    monkeypatch.setattr(_openmp, "PASSIVE_WAITS", False)  # torch's threads spin at barriers
    monkeypatch.setattr(_threads, "machine_cpus", lambda: 2)
    monkeypatch.setattr(_threads, "thread_budget", lambda: 2)
    monkeypatch.setattr(_threads, "other_load", lambda: load)
    assert choose_n_threads(SMALL_STEP_FLOPS * 100) == expected
    with thread_limits(flops_per_step=SMALL_STEP_FLOPS * 100) as n:
        assert n == expected == torch.get_num_threads()
        assert _blas_threads() <= _blas_reachable(expected)


@pytest.mark.parametrize("load, blas", [(0.0, 2), (1.0, 1), (6.0, 1)])
def test_passive_torch_threads_keep_the_budget_and_spinning_blas_does_not(
        clean_thread_env, monkeypatch, load, blas):
    # OMP_WAIT_POLICY=PASSIVE: torch's threads sleep at barriers, so a busy machine costs
    # them no CPU (benchmarks/studies/bench_wait_policy.py); the BLAS pools still spin
    monkeypatch.setattr(_openmp, "PASSIVE_WAITS", True)
    monkeypatch.setattr(_threads, "machine_cpus", lambda: 2)
    monkeypatch.setattr(_threads, "thread_budget", lambda: 2)
    monkeypatch.setattr(_threads, "other_load", lambda: load)
    before = torch.get_num_threads()
    with thread_limits(flops_per_step=SMALL_STEP_FLOPS * 100) as n:
        assert n == 2 == torch.get_num_threads()
        assert _blas_threads() <= _blas_reachable(blas)
        with thread_limits(1):  # a nested section, then the outer counts come back
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2 and _blas_threads() <= _blas_reachable(blas)
    assert torch.get_num_threads() == before
    with thread_limits(flops_per_step=SMALL_STEP_FLOPS / 10) as n:
        assert n == 1  # rule 3 holds


@pytest.mark.parametrize("preset, torch_first, expected, passive", [
    (None, False, "PASSIVE", True),   # skdml asks for passive waits before torch loads
    ("ACTIVE", False, "ACTIVE", False),  # the user's choice wins
    ("passive", False, "passive", True),
    (None, True, None, False),  # torch loaded first: libgomp chose already, nothing is set
])
def test_import_skdml_asks_for_passive_openmp_waits(preset, torch_first, expected, passive):
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if preset is not None:
        env["OMP_WAIT_POLICY"] = preset
    code = ("import json, os, sys\n" + ("import torch\n" if torch_first else "") +
            "import skdml\n"
            "loaded = 'torch' in sys.modules\n"
            "from skdml import DeepMetricTransformer\n"
            "print(json.dumps([os.environ.get('OMP_WAIT_POLICY'), "
            "skdml._openmp.PASSIVE_WAITS, loaded]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    policy, is_passive, torch_loaded_by_import = json.loads(out.strip().splitlines()[-1])
    assert (policy, is_passive) == (expected, passive)
    assert torch_loaded_by_import == torch_first  # import skdml itself leaves torch unloaded


@pytest.mark.parametrize("load", [0.0, 1.0, 6.0])
def test_threads_without_barriers_keep_the_budget_on_a_busy_machine(clean_thread_env,
                                                                     monkeypatch, load):
    # the neighbour search's blocks: a descheduled thread holds no other back
    monkeypatch.setattr(_threads, "machine_cpus", lambda: 2)
    monkeypatch.setattr(_threads, "thread_budget", lambda: 2)
    monkeypatch.setattr(_threads, "other_load", lambda: load)
    assert choose_n_threads(SMALL_STEP_FLOPS * 100, independent=True) == 2
    assert choose_n_threads(SMALL_STEP_FLOPS / 10, independent=True) == 1  # rule 3 holds


def test_the_neighbour_search_keeps_two_workers_when_the_machine_is_busy(clean_thread_env,
                                                                          monkeypatch):
    from skdml.metrics import _neighbors, map_at_r

    monkeypatch.setattr(_threads, "machine_cpus", lambda: 2)
    monkeypatch.setattr(_threads, "thread_budget", lambda: 2)
    monkeypatch.setattr(_threads, "other_load", lambda: 4.0)
    monkeypatch.setattr(_neighbors, "_CPU_BLOCK_BYTES", 2**16)  # several blocks
    workers = []
    pool = _neighbors.ThreadPoolExecutor
    monkeypatch.setattr(_neighbors, "ThreadPoolExecutor",
                        lambda max_workers: workers.append(max_workers) or pool(max_workers))
    rng = np.random.RandomState(0)
    X, y = rng.randn(3000, 64), rng.randint(0, 5, 3000)  # above the small-step rule
    expected = map_at_r(X, y, batch_size=3000)  # one block: no pool
    assert map_at_r(X, y) == expected
    assert workers == [2]


def test_override_wins_over_a_busy_machine(clean_thread_env, monkeypatch):
    monkeypatch.setattr(_threads, "other_load", lambda: 6.0)
    monkeypatch.setenv(ENV_OVERRIDE, str(N_CPUS))
    assert choose_n_threads(SMALL_STEP_FLOPS * 100) == N_CPUS


def test_other_load_leaves_out_this_process(monkeypatch):
    # the 1-minute load counts this process's own recent work: it is subtracted
    import time as _time
    now, cpu = _time.monotonic(), _time.process_time()
    monkeypatch.setattr(_threads, "_OWN_SAMPLES", __import__("collections").deque(
        [(now - 30.0, cpu - 60.0)], maxlen=64))  # 2 busy threads of ours for 30 s
    monkeypatch.setattr(_threads.os, "getloadavg", lambda: (2.3, 2.0, 2.0))
    monkeypatch.setattr(_threads, "_runnable_now", lambda: None)
    monkeypatch.setattr(_threads, "_LOAD_CACHE_S", 0.0)  # measure at every call
    assert _threads.other_load() == pytest.approx(0.3, abs=0.05)
    monkeypatch.setattr(_threads, "_runnable_now", lambda: 5)  # 4 others runnable now
    assert _threads.other_load() == pytest.approx(4.0, abs=0.05)


@pytest.mark.parametrize("passive", [False, True])
def test_the_issue_deep_fit_threads_when_the_machine_is_busy(clean_thread_env, monkeypatch,
                                                             passive):
    """Digits 0-4 as (n, 1, 8, 8) images: too large for the small-step rule (issue 37)."""
    from sklearn.datasets import load_digits

    from skdml import DeepMetricTransformer

    X, y = load_digits(return_X_y=True)
    keep = y < 5
    X, y = (X[keep] / 16.0).reshape(-1, 1, 8, 8).astype(np.float32)[:300], y[keep][:300]
    monkeypatch.setattr(_threads, "machine_cpus", lambda: 2)
    monkeypatch.setattr(_threads, "thread_budget", lambda: 2)
    monkeypatch.setattr(_threads, "other_load", lambda: 4.0)
    torch_threads = []
    real = torch.set_num_threads
    # the counts set inside sections (a section's exit also restores the count it found)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (
        torch_threads.append(n) if _threads._SHARED["active"] else None) or real(n))
    fit = DeepMetricTransformer(max_iter=1, device="cpu", random_state=0).fit
    monkeypatch.setattr(_openmp, "PASSIVE_WAITS", passive)
    real(1 if passive else 2)  # so that every section of the fit must set its own count
    fit(X, y)
    # spinning threads: every section runs on one thread; sleeping ones keep the budget
    assert torch_threads and set(torch_threads) == {2 if passive else 1}, torch_threads


def test_a_fit_leaves_torch_threads_of_new_threads_as_it_found_them(monkeypatch):
    # threadpoolctl's restore of torch's OpenMP runtime hid from torch that its own
    # setting (the default of every new thread) was still the section's 1

    from skdml.linear import LMNN

    monkeypatch.delenv("SKDML_NUM_THREADS", raising=False)

    before = _torch_size_of_a_new_thread()
    rng = np.random.RandomState(0)
    y = np.repeat(np.arange(3), 10)
    LMNN(n_components=2, random_state=0).fit(rng.randn(30, 4) + 3 * y[:, None], y)
    assert _torch_size_of_a_new_thread() == before


def test_a_users_blas_limit_caps_every_section():
    from threadpoolctl import threadpool_info, threadpool_limits

    from skdml._utils import thread_limits

    def blas():
        return {i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

    if not blas():
        pytest.skip("no BLAS library found by threadpoolctl")
    with threadpool_limits(limits=1, user_api="blas"):
        with thread_limits(2):
            assert blas() == {1}
        assert blas() == {1}


def test_a_huge_override_is_clamped_with_a_short_warning(monkeypatch):
    from skdml._utils import _threads

    monkeypatch.setenv("SKDML_NUM_THREADS", "9" * 5000)
    monkeypatch.setattr(_threads, "_WARNED", set())
    with pytest.warns(RuntimeWarning, match=r"\(5000 characters\) exceeds") as caught:
        assert _threads.choose_n_threads() >= 1
    assert len(str(caught[0].message)) < 200


def test_a_threads_own_torch_size_is_kept_beside_another_section(clean_thread_env):
    # a thread that set its own size (a Dask worker's 1) entering while another thread's
    # section ran was given the process's size back, oversubscribing the cores
    import threading
    if not _threads._torch_threads_per_thread():
        pytest.skip("torch's thread count is process-wide in this build")
    if torch.get_num_threads() < 2:
        pytest.skip("one thread already")
    inside, done, out = threading.Event(), threading.Event(), []

    def other():
        with thread_limits(2):
            inside.set()
            done.wait()

    def worker():
        torch.set_num_threads(1)
        with thread_limits(1):
            pass
        out.append(torch.get_num_threads())

    a = threading.Thread(target=other)
    a.start()
    inside.wait()
    b = threading.Thread(target=worker)
    b.start()
    b.join()
    done.set()
    a.join()
    assert out == [1]


def test_an_explicit_count_above_the_cpus_is_capped(monkeypatch):
    monkeypatch.setattr(_threads, "machine_cpus", lambda: 1)
    with thread_limits(8) as n:
        assert n == 1 and torch.get_num_threads() == 1, (n, torch.get_num_threads())


def test_an_override_one_above_the_cpus_is_clamped_with_a_warning(monkeypatch):
    monkeypatch.setattr(_threads, "machine_cpus", lambda: 2)
    monkeypatch.setattr(_threads, "_WARNED", set())
    monkeypatch.setenv(ENV_OVERRIDE, "3")
    with pytest.warns(RuntimeWarning, match="exceeds the 2 CPUs"):
        assert _threads.thread_budget() == 2
    assert _threads.choose_n_threads(1e12) == 2


def test_the_blas_scan_is_reused_and_redone_when_modules_are_imported(monkeypatch):
    # threadpoolctl's scan of every loaded library cost 1-4 ms, up to three times a section;
    # a module imported since (which may bring a BLAS of its own) makes the next use scan
    import types

    scans = []

    class Controller:
        def __init__(self):
            scans.append(1)

        def select(self, **kwargs):
            return self

    monkeypatch.setattr(_threads, "ThreadpoolController", Controller)
    monkeypatch.setattr(_threads, "_POOLS", {"key": None, "at": -np.inf, "pools": None})
    first = _threads._blas_pools()
    assert _threads._blas_pools() is first and len(scans) == 1
    monkeypatch.setitem(sys.modules, "skdml_test_late_blas", types.ModuleType("late"))
    _threads._blas_pools()
    assert len(scans) == 2
    monkeypatch.setattr(_threads, "_POOLS_TTL", 0.0)
    _threads._blas_pools()
    assert len(scans) == 3


def _blas_sizes_in_a_fresh_process(code):
    """Run ``code`` (which prints lists of the BLAS pools' sizes) in a process without thread
    settings (threadpoolctl's record of which thread controls the pools starts empty);
    return the lists, skipping where the pools start at 1 thread."""
    import json
    import subprocess

    env = {k: v for k, v in os.environ.items() if k not in _THREAD_VARS + (ENV_OVERRIDE,)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    sizes = json.loads("[" + out.stdout.strip().replace("] [", "], [") + "]")
    if max(sizes[0], default=1) <= 1:
        pytest.skip("the BLAS pools start at 1 thread here")
    return sizes


def test_sections_in_pooled_threads_give_the_blas_pools_back():
    # thread-safety audit (22): threadpoolctl lets only the first Python thread that set a
    # pthreads OpenBLAS pool's size set it again, and ignores the others: sections whose
    # restores ran in other pooled threads left the pools at 1 thread for the process

    code = (
        "import warnings; warnings.simplefilter('ignore')\n"
        "import numpy as np, threadpoolctl\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "from sklearn.datasets import load_iris\n"
        "from skdml.linear import ECAML\n"
        "from skdml.metrics import map_at_r\n"
        "def blas():\n"
        "    return [d['num_threads'] for d in threadpoolctl.threadpool_info()\n"
        "            if d['user_api'] == 'blas']\n"
        "X, y = load_iris(return_X_y=True)\n"
        "Xb = np.random.RandomState(0).randn(3000, 64).astype('float32')\n"
        "jobs = [lambda: map_at_r(Xb, np.arange(3000) % 30),\n"
        "        lambda: ECAML(max_iter=3, random_state=0).fit(X, y)] * 4\n"
        "before = blas()\n"
        "for _ in range(2):\n"
        "    with ThreadPoolExecutor(4) as ex:\n"
        "        list(ex.map(lambda f: f(), jobs))\n"
        "print(before, blas())\n")
    before, after = _blas_sizes_in_a_fresh_process(code)
    assert before == after


def test_a_users_blas_limit_stands_beside_skdml_sections_in_other_threads():
    # review of audit 22: taking threadpoolctl's control by force let a section in another
    # thread lift the user's open threadpool_limits(1) block, and one closing after the
    # user's left the pools at 1 thread for good

    code = (
        "import threading\n"
        "from threadpoolctl import threadpool_limits, threadpool_info\n"
        "from skdml._utils._threads import thread_limits\n"
        "blas = lambda: [i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas']\n"
        "start = blas()\n"
        "ev1, ev2 = threading.Event(), threading.Event()\n"
        "def long():\n"
        "    with thread_limits(1):\n"
        "        ev1.set(); ev2.wait(60)\n"
        "def second():\n"
        "    with thread_limits(2):\n"
        "        pass\n"
        "t = threading.Thread(target=long); t.start(); ev1.wait(60)\n"
        "with threadpool_limits(1, user_api='blas'):\n"
        "    s = threading.Thread(target=second); s.start(); s.join()\n"
        "    inside = blas()\n"
        "ev2.set(); t.join()\n"
        "print(start, inside, blas())\n")
    start, inside, after = _blas_sizes_in_a_fresh_process(code)
    assert set(inside) == {1}  # the user's limit stands
    assert start == after
