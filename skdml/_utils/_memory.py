"""CPU memory policy of the deep fit: keep a training step's buffers in the process.

A CPU training step allocates and frees the same large buffers at every step
(activations and their gradients: 12.8 MB for the first block of the default
ConvNet on a batch of 64 28x28 images). glibc's ``malloc`` serves blocks above
its *mmap threshold* (128 KiB at start) with a fresh ``mmap`` and returns them
to the operating system when they are freed, and trims the top of its heap
beyond its *trim threshold*: each step then pays system calls and page faults
for memory it had a moment before. glibc raises both thresholds by itself once
the process frees an ``mmap``-ed block (the threshold becomes that block's size,
up to 32 MiB on 64-bit systems, and the trim threshold twice that; see
``mallopt(3)``, "dynamic mmap threshold"), which a program may do sooner or
later, or never. :func:`keep_freed_buffers` makes that happen before the first
step, by allocating and freeing one such block. On a 2-core machine it made a
default Omniglot epoch 1.48x faster in fresh processes (2.141 s -> 1.446 s,
``benchmarks/studies/bench_cpu_allocator.py``);
the same as ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` in the
environment or a preloaded jemalloc/tcmalloc (PyTorch's CPU tuning advice),
without configuring the process.

Nothing is set: glibc keeps adjusting its thresholds as before, at most about
64 MiB of freed memory stays in the process instead of going back to the
system, and the call does nothing under another C library or allocator, or
when the environment sets ``SKDML_KEEP_FREED_BUFFERS=0`` (e.g. to measure
without it, or with an allocator of your own).
"""

from __future__ import annotations

import os
import platform

import torch

__all__ = ["keep_freed_buffers"]

#: Size of the block freed once: just below glibc's 32 MiB ceiling for the dynamic
#: mmap threshold on 64-bit systems (a larger block would leave the threshold unchanged).
BLOCK_BYTES = 31 * 2**20

_done = False


def keep_freed_buffers():
    """Once per process under glibc: free one mmap-ed block so that glibc keeps freed buffers.

    Returns whether this call did it (``False`` when already done, not glibc, or
    turned off by ``SKDML_KEEP_FREED_BUFFERS=0``).
    """
    global _done
    if _done or platform.libc_ver()[0] != "glibc" \
            or os.environ.get("SKDML_KEEP_FREED_BUFFERS", "1").strip() == "0":
        return False
    _done = True
    block = torch.empty(BLOCK_BYTES, dtype=torch.uint8)  # above the threshold: mmap-ed
    del block  # glibc raises its mmap and trim thresholds on freeing it
    return True
