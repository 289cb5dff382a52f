"""The CPU memory policy of the deep fit (``skdml._utils.keep_freed_buffers``).

Under glibc, a block above the mmap threshold is ``mmap``-ed and handed back to the
system when freed, so a training step that frees and re-allocates its activation
buffers pays page faults at every step until glibc raises the threshold. The policy
makes glibc raise it before the first step. These tests look at where glibc puts a
16 MiB block (``mallinfo2().hblkhd`` counts the ``mmap``-ed bytes), in fresh
processes so that nothing earlier in the test session has moved the thresholds.
"""

import platform
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from skdml import DeepMetricTransformer
from skdml._utils import _memory

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

PROBE = textwrap.dedent("""
    import ctypes, sys
    import torch
    from skdml._utils import keep_freed_buffers

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    if sys.argv[1] == "policy":
        assert keep_freed_buffers() and not keep_freed_buffers()  # once per process
    before = libc.mallinfo2().hblkhd
    block = torch.empty(16 * 2**20, dtype=torch.uint8)
    print((libc.mallinfo2().hblkhd - before) / 2**20)
""")


def _mmapped_mib(mode):
    out = subprocess.run([sys.executable, "-c", PROBE, mode], check=True,
                         capture_output=True, text=True).stdout
    return float(out.split()[-1])


@glibc
def test_after_the_policy_glibc_keeps_step_sized_blocks_in_its_heap():
    assert _mmapped_mib("none") >= 16  # glibc as started: a fresh mmap per block
    assert _mmapped_mib("policy") == 0  # from the heap, reused after a free


def test_a_cpu_fit_applies_the_policy_once_before_training(monkeypatch):
    calls = []
    monkeypatch.setattr("skdml.deep._trainer.keep_freed_buffers", lambda: calls.append(1))
    X = np.random.RandomState(0).randn(40, 6).astype(np.float32)
    y = np.repeat(np.arange(4), 10)
    DeepMetricTransformer(n_components=2, max_iter=1, device="cpu", random_state=0).fit(X, y)
    assert calls == [1]


def test_the_policy_does_nothing_off_glibc(monkeypatch):
    monkeypatch.setattr(_memory, "_done", False)
    monkeypatch.setattr(_memory.platform, "libc_ver", lambda: ("", ""))
    assert _memory.keep_freed_buffers() is False
    assert _memory._done is False


def test_the_environment_can_turn_the_policy_off(monkeypatch):
    monkeypatch.setattr(_memory, "_done", False)
    monkeypatch.setattr(_memory.platform, "libc_ver", lambda: ("glibc", "2.36"))
    monkeypatch.setenv("SKDML_KEEP_FREED_BUFFERS", "0")
    assert _memory.keep_freed_buffers() is False and _memory._done is False
    monkeypatch.setenv("SKDML_KEEP_FREED_BUFFERS", "1")
    assert _memory.keep_freed_buffers() is True and _memory._done is True
