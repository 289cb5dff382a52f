"""Training state of the deep learner: snapshots, checkpoints to resume from, pickling."""

from __future__ import annotations

import copy
import os

import torch
from torch import nn

from .._training import load_checkpoint
from ._network import place

__all__ = ["ModuleStateMixin", "load_resume_state", "module_cpu_copy", "to_cpu"]


def to_cpu(obj):
    """Recursively move the tensors of nested dicts/lists to the CPU (for pickling)."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def module_cpu_copy(module):
    """A CPU deep copy of ``module`` that never duplicates its tensors on the GPU."""
    memo = {}
    for t in list(module.parameters()) + list(module.buffers()):
        cpu = t.detach().cpu()
        memo[id(t)] = nn.Parameter(cpu, requires_grad=t.requires_grad) if isinstance(
            t, nn.Parameter) else cpu
    return copy.deepcopy(module, memo)


def clone_state(module):
    """A detached copy of ``module.state_dict()`` (``None`` for a non-module)."""
    if not isinstance(module, nn.Module):
        return None
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def load_resume_state(estimator, classes, input_shape):
    """The state a ``warm_start`` fit resumes from, or ``None`` to start afresh.

    From ``checkpoint_path`` when the file exists (its digest is checked), else
    from the estimator's last fit. A fit *without* ``warm_start`` refuses to
    overwrite an existing checkpoint: that would lose the work it holds.
    """
    path = estimator.checkpoint_path
    if not estimator.warm_start:
        if path is not None and os.path.exists(path):
            raise FileExistsError(
                f"checkpoint_path={os.fspath(path)!r} already exists. Pass warm_start=True to "
                "resume from it, or remove it (or choose another path) to start afresh; skdml "
                "never overwrites a checkpoint unasked.")
        return None
    if path is not None and os.path.exists(path):
        state = load_checkpoint(path)
        if not isinstance(state, dict) or state.get("format") != "skdml-deep":
            raise ValueError(f"The checkpoint {os.fspath(path)!r} was not written by "
                             "DeepMetricTransformer.")
    else:
        state = getattr(estimator, "_resume_state", None)
    if state is None:
        return None
    if len(state["classes"]) != len(classes) or any(
            a != b for a, b in zip(state["classes"], classes)) \
            or tuple(state["input_shape"]) != tuple(input_shape):
        raise ValueError("warm_start: the checkpoint was trained on other classes or input "
                         "shapes than the data passed to fit.")
    return state


class ModuleStateMixin:
    """Pickles torch modules on the CPU and sends them back to the GPU on unpickling.

    A model fitted on a GPU unpickles on a CPU-only machine; on a machine with
    CUDA it goes back to the device it was fitted on.
    """

    def __getstate__(self):
        state = super().__getstate__() if hasattr(super(), "__getstate__") else \
            self.__dict__.copy()
        state = dict(state)
        for key, value in list(state.items()):
            if isinstance(value, nn.Module):
                state[key] = module_cpu_copy(value)
        if "_resume_state" in state:
            state["_resume_state"] = to_cpu(state["_resume_state"])
        if "device_" in state:
            state["_fitted_device"] = str(state["device_"])
            state["device_"] = torch.device("cpu")
        return state

    def __setstate__(self, state):
        fitted_device = state.pop("_fitted_device", None)
        if hasattr(super(), "__setstate__"):
            super().__setstate__(state)
        else:
            self.__dict__.update(state)
        if fitted_device is not None and fitted_device.startswith("cuda") \
                and torch.cuda.is_available():
            device = torch.device(fitted_device)
            for value in self.__dict__.values():
                if isinstance(value, nn.Module):
                    place(value, device)
            self.device_ = device
