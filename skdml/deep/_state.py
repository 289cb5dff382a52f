"""Training state of the deep learner: snapshots, checkpoints to resume from, pickling."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import os
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .._training import CheckpointError, claim_checkpoint_path, load_checkpoint
from .._training._distributed import is_main_process
from ._network import place

__all__ = ["ModuleStateMixin", "TrainingState", "checkpoint_claim", "check_resumable_network",
           "inputs_digest", "load_resume_state", "module_cpu_copy", "to_cpu"]

#: The ``format`` entry of every deep checkpoint.
FORMAT = "skdml-deep"


@dataclass
class TrainingState:
    """Everything a deep fit needs to resume: the one schema of checkpoints and resume states.

    Written at the end of every epoch to ``checkpoint_path`` (as a plain dict,
    :meth:`to_dict`, the file's payload read with ``torch.load(weights_only=True)``) and kept
    by the fitted estimator for ``warm_start``; read back by
    :meth:`from_dict`, which names any missing entry. The fields without a
    default must be present; the others are optional.
    """

    model: dict
    optimizer: dict
    scaler: dict | None
    numpy_rng: tuple
    torch_rng: object
    epoch: int
    history: list
    stopper: dict
    classes: object
    input_shape: tuple
    split: tuple
    loss: dict | None = None
    average: dict | None = None
    cuda_rng: object = None
    stopped: bool = False
    #: why the run stopped before max_iter: "no_improvement" (early stopping: the run is
    #: finished) or a callback's reason (a warm start trains on); None in older states
    stop_reason: str | None = None
    n_components: int | None = None
    world_size: int = 1
    initial_score: float | None = None
    #: the collapse refit the run is (``FitConfig.refit``), kept when it is resumed
    refit: dict | None = None
    #: SHA-256 of the run's encoded labels, in order: a resumed fit must get the same data
    labels_digest: str | None = None
    #: SHA-256 of the run's inputs (an array's float32 bytes and shape; None for a Dataset
    #: and in older states): a resumed fit must get the same X, not other data of one size
    inputs_digest: str | None = None
    #: the network (and loss, average) before training, when a hold-out scores the run: the
    #: start returned if no epoch beats it, by a resumed fit as by an uninterrupted one
    start: dict | None = None
    #: the optimiser's class (``"Adam"``): resumed only by the same one; None in older states
    optimizer_class: str | None = None
    format: str = FORMAT
    #: where the state was read from, for messages (never saved)
    source: str = dataclasses.field(default="the checkpoint", compare=False)

    @classmethod
    def required(cls):
        """The entries a saved state must hold."""
        return tuple(f.name for f in dataclasses.fields(cls)
                     if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)

    def to_dict(self):
        """The state as a plain dict of tensors, arrays and numbers (what is saved)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "source"}

    @classmethod
    def from_dict(cls, state, source):
        """The state saved as ``state`` (a dict); a missing entry raises a :class:`CheckpointError`."""
        missing = [key for key in cls.required() if key not in state]
        if missing:
            raise CheckpointError(
                f"warm_start cannot resume from {source}: it lacks {missing} (it was not written "
                "by this version of DeepMetricTransformer, or was edited). Remove it, or choose "
                "another checkpoint_path, and fit with warm_start=False to start afresh.")
        names = {f.name for f in dataclasses.fields(cls)} - {"source"}
        return cls(**{k: v for k, v in state.items() if k in names}, source=source)


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


def checkpoint_claim(path):
    """The context of a fit that writes the checkpoint ``path``: checked writable, and locked.

    Only the process that writes it (rank 0 of a distributed job) locks it; a
    fit without a checkpoint (``path=None``) claims nothing.
    """
    if path is None or not is_main_process():
        return contextlib.nullcontext()
    return claim_checkpoint_path(path)


def _few(classes, n=5):
    """The first ``n`` classes, for a message."""
    shown = ", ".join(repr(c) for c in np.asarray(classes)[:n].tolist())
    return shown + (", ..." if len(classes) > n else "")


def load_resume_state(path, warm_start, previous, classes, input_shape, y_enc, inputs=None):
    """The state a ``warm_start`` fit resumes from, or ``None`` to start afresh.

    From the checkpoint ``path`` when the file exists (its digest is checked),
    else from ``previous``, the resume state of the estimator's last fit; from
    the last fit when it continues the file's run (the file is behind the fit
    when a write failed). A fit *without* ``warm_start`` refuses to overwrite
    an existing checkpoint: that would lose the work it holds. The state's
    ``source`` names where it came from, for messages. ``inputs``: this fit's
    :func:`inputs_digest`, checked against the state's where both are known.
    """
    if not warm_start:
        if path is not None and os.path.exists(path):
            raise FileExistsError(
                f"checkpoint_path={os.fspath(path)!r} already exists. Pass warm_start=True to "
                "resume from it, or remove it (or choose another path) to start afresh; skdml "
                "never overwrites a checkpoint unasked.")
        return None
    state, source = previous, "the previous fit"
    if path is not None and os.path.exists(path):
        saved = load_checkpoint(path)
        if not isinstance(saved, dict) or saved.get("format") != FORMAT:
            raise CheckpointError(
                f"warm_start cannot resume from the checkpoint {os.fspath(path)!r}: it is a "
                "checkpoint file, but not one DeepMetricTransformer (or DeML) wrote. Remove it "
                "or choose another checkpoint_path, and fit with warm_start=False to start "
                "afresh.")
        TrainingState.from_dict(saved, f"the checkpoint {os.fspath(path)!r}")  # complete?
        if not _continues(state, saved):
            state, source = saved, f"the checkpoint {os.fspath(path)!r}"
    if state is None:
        return None
    if state is previous:  # a copy: training updates the optimiser's tensors in place, and
        state = copy.deepcopy(previous)  # a failed resumed fit must leave the estimator's own
    state = TrainingState.from_dict(state, source)
    if len(state.classes) != len(classes) or any(a != b for a, b in zip(state.classes, classes)):
        raise ValueError(f"warm_start: {source} was trained on other classes "
                         f"({len(state.classes)}: {_few(state.classes)}) than the data passed "
                         f"to fit ({len(classes)}: {_few(classes)}).")
    if tuple(state.input_shape) != tuple(input_shape):
        raise ValueError(f"warm_start: {source} was trained on inputs of shape "
                         f"{tuple(state.input_shape)}, and fit was given inputs of shape "
                         f"{tuple(input_shape)}.")
    train, val = state.split
    n_run = len(train) + (0 if val is None else len(val))
    if n_run != len(y_enc):
        differs = f"was trained on {n_run} samples, and fit was given {len(y_enc)}"
    elif state.labels_digest is not None and state.labels_digest != labels_digest(y_enc):
        differs = "has other labels than y, in order (other samples, or shuffled)"
    elif None not in (state.inputs_digest, inputs) and state.inputs_digest != inputs:
        # (a cross-validation's folds of one size and label order passed the checks above,
        # and each fold took the first fold's finished model)
        differs = ("was trained on other inputs than X (as many samples and the same labels, "
                   "but other values)")
    else:
        return state
    raise ValueError(f"warm_start: the run to resume (from {source}) {differs}. It indexes "
                     "its samples by position: resume it with the same X and y, or fit with "
                     "warm_start=False to start afresh.")


def labels_digest(y_enc):
    """SHA-256 of the encoded labels in their order (what a resumed fit must match)."""
    return hashlib.sha256(np.ascontiguousarray(y_enc, dtype=np.int64).tobytes()).hexdigest()


def inputs_digest(source):
    """SHA-256 of a tensor's shape and float32 bytes; None for a ``Dataset`` (not read here)."""
    if not isinstance(source, torch.Tensor):
        return None
    data = np.ascontiguousarray(source.detach().to("cpu", torch.float32).numpy())
    digest = hashlib.sha256(repr(tuple(data.shape)).encode())
    digest.update(memoryview(data).cast("B"))
    return digest.hexdigest()


def _continues(state, saved):
    """Whether the in-memory ``state`` is the run of ``saved``, epochs further on."""
    if state is None or not int(state.get("epoch", 0)) > int(saved["epoch"]):
        return False
    done = list(saved["history"])
    return list(state.get("history", []))[:len(done)] == done


def _shape(value):
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def check_resumable_network(resume, net, n_components):
    """Refuse, with what changed, a resume state whose network does not fit ``net``.

    ``n_components`` is this fit's; the state records the one it was
    trained with.
    """
    source = resume.source
    saved, here = resume.model, net.state_dict()
    if not isinstance(saved, dict):
        raise CheckpointError(f"warm_start cannot resume from {source}: its 'model' entry is "
                              f"a {type(saved).__name__}, not a state dict.")
    missing = [k for k in here if k not in saved]
    extra = [k for k in saved if k not in here]
    shapes = [k for k in here if k in saved and _shape(saved[k]) != _shape(here[k])]
    if not (missing or extra or shapes):
        return
    what = []
    old_k = resume.n_components
    if old_k is None and "head.weight" in saved and _shape(saved["head.weight"]):
        old_k = _shape(saved["head.weight"])[0]
    if old_k is not None and int(old_k) != int(n_components):
        what.append(f"it was trained with n_components={int(old_k)}, and n_components="
                    f"{n_components} now")
    details = [f"{k!r} has shape {_shape(saved[k])} there and {_shape(here[k])} here"
               for k in shapes if not (what and k.startswith("head."))]
    details += [f"{k!r} is missing there" for k in missing]
    details += [f"{k!r} is not in this network" for k in extra]
    if details:
        more = f" and {len(details) - 3} more" if len(details) > 3 else ""
        what.append("its backbone differs from this one (" + "; ".join(details[:3]) + more + ")")
    raise ValueError(
        f"warm_start cannot resume from {source}: " + ", and ".join(what) + ". Resume with "
        "the n_components and backbone of the run that wrote it, or fit with "
        "warm_start=False (after removing the checkpoint, or with another checkpoint_path) "
        "to start afresh.")


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
