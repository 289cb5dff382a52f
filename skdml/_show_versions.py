"""``skdml.show_versions()``: the facts a bug report needs."""

from __future__ import annotations

import importlib
import os
import platform
import sys

from . import _openmp

_DEPENDENCIES = ["skdml", "numpy", "scipy", "sklearn", "pymanopt", "torch", "joblib",
                 "threadpoolctl", "tqdm", "matplotlib", "pytorch_metric_learning"]


def _dependency_versions():
    versions = {}
    for name in _DEPENDENCIES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            versions[name] = None
        else:
            versions[name] = getattr(module, "__version__", "unknown")
    return versions


def _system_info():
    return {
        "python": sys.version.replace("\n", " "),
        "executable": sys.executable,
        "machine": platform.platform(),
    }


def _torch_info():
    try:
        import torch
    except ImportError:
        return {}
    cuda = torch.cuda.is_available()
    return {
        "cuda available": cuda,
        "cuda version": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "threads": torch.get_num_threads(),
        # how torch's OpenMP threads wait (skdml._openmp): they sleep when it says PASSIVE
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "not set (libgomp spins)"),
        "passive waits": _openmp.PASSIVE_WAITS,
    }


def show_versions():
    """Print the versions of Python, skdml, its dependencies, torch's device and BLAS.

    Paste its output into a bug report. It imports torch (and matplotlib when
    installed), so it takes a second or two.

    Examples
    --------
    >>> import skdml
    >>> skdml.show_versions()  # doctest: +ELLIPSIS
    <BLANKLINE>
    System:
        python: ...
    """
    sections = {
        "System": _system_info(),
        "Python dependencies": _dependency_versions(),
        "torch": _torch_info(),
    }
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        blas = []
    else:
        blas = threadpool_info()
    # one line per pool, named by its library file: numpy's and scipy's OpenBLAS (or torch's
    # and scikit-learn's OpenMP) are two pools of one API, and may be different builds
    sections["Thread pools"] = {
        f"{pool.get('internal_api')} ({pool.get('user_api')}), "
        f"{os.path.basename(str(pool.get('filepath')))}":
            f"{pool.get('version')}, {pool.get('num_threads')} threads"
        for pool in blas
    }
    for title, entries in sections.items():
        print(f"\n{title}:")
        for key, value in entries.items():
            print(f"    {key}: {value}")
