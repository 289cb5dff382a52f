"""Test-suite configuration: deterministic hypothesis runs, so CI cannot flake on a new draw;
``-n auto`` (pytest-xdist) starts one worker per CPU, at most four."""

import pytest
from hypothesis import settings

settings.register_profile("skdml", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("skdml")


#: Most workers ``-n auto`` starts: each holds torch and the data sets (about 0.8 GB), and the
#: suite's longest tests, not the worker count, bound its time beyond four.
MAX_AUTO_WORKERS = 4


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: unknown without it
def pytest_xdist_auto_num_workers(config):
    from skdml._utils._threads import machine_cpus

    return max(1, min(machine_cpus(), MAX_AUTO_WORKERS))
