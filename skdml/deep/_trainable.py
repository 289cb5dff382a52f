"""How the deep learner computes a batch's loss, for the shared training loop."""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torch import nn

from .._training import Trainable
from .._training._distributed import all_gather_with_grad
from ..losses import DistancePreservation, EnergyConfusion, JRSRegularizer
from ._data import to_model_input
from ._state import clone_state

__all__ = ["DeepTrainable", "autocast", "embed"]


def autocast(amp, device):
    """The mixed-precision context of ``amp`` (``"bf16"``, ``"fp16"`` or off)."""
    if not amp:
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


class DeepTrainable(Trainable):
    """Network + objective + labels: ``batch_loss((x, idx)) -> (total, terms)``.

    The objective (:class:`~skdml.losses.MetricObjective`) sees float32
    embeddings; Energy Confusion sees the embedding of *detached* backbone
    features, so its gradient reaches only the embedding layer, as in ECAML;
    JRS sees the hooked layers (or the backbone's output), the embedding and
    the class level. Auxiliary losses returned by the backbone are added and
    logged as ``aux`` or ``aux_<key>``. ``augment`` (a callable on the input
    batch, on the device, after the network's ``resize`` if it has one) is
    applied in training mode only. With
    ``preserve_input > 0``, that weight times
    :class:`~skdml.losses.DistancePreservation` between the embeddings and
    the network's (standardised, augmented) input is added and logged as
    ``preserve_input``. With ``average`` (a
    :class:`~skdml._training.WeightAverage` of ``net``), each step is averaged
    in and :attr:`eval_net` is the average: what is validated, restored,
    checkpointed and fitted.
    """

    def __init__(self, net, objective, labels, *, input_shape, device, amp=False,
                 capture=None, augment=None, forward=None, preserve_input=0.0, average=None,
                 prepared=False):
        self.net, self.objective, self.labels = net, objective, labels
        if objective.regularized and isinstance(objective.regularizer, EnergyConfusion) and \
                not any(p.requires_grad for p in net.head.parameters()):
            # EC's gradient reaches the embedding layer only (the ECAML paper's choice): a
            # backbone that provides its own embedding (DeML) leaves it no parameter, so the
            # term was computed, logged and added to the loss, and changed nothing
            raise ValueError(
                "regularizer='ec' acts through the embedding layer only, and this network has "
                "no trainable one (the backbone provides its own embedding, as DeML does): it "
                "would change nothing. Use regularizer='jrs', or none.")
        self.prepared = bool(prepared)  # batches already went through net.prepare
        self.forward = forward if forward is not None else net  # DDP wrapper (distributed fit)
        self.input_shape, self.device, self.amp = input_shape, device, amp
        self.capture, self.augment = capture, augment
        self.preserve_input = float(preserve_input)
        self._preservation = DistancePreservation()
        self.average = average

    @property
    def eval_net(self):
        """The network to evaluate and to keep: the weight average, if any."""
        return self.net if self.average is None else self.average.module

    def after_step(self):
        if self.average is not None:
            self.average.update(self.net)

    def batch_loss(self, batch):
        xb, idx = batch
        xb = to_model_input(xb, self.device, self.input_shape)
        if self.prepared:
            reference = xb
        else:
            if self.net.resize is not None:  # augment (and compare with) the resized image
                xb = self.net.resize(xb)
            if self.augment is not None and self.net.training:
                xb = self.augment(xb)
            reference = None
        yb = self.labels[idx].to(self.device, non_blocking=True)
        with autocast(self.amp, self.device):
            z, aux, features = self.forward(xb, prepared=True) if self.prepared else \
                self.forward(xb)
            layers = self.capture.representations() if self.capture is not None else None
        z = z.float()
        reg_embeddings, reg_layers = None, None
        if self.objective.regularized:
            if isinstance(self.objective.regularizer, EnergyConfusion):
                reg_embeddings = self.net.embed(features.detach().float()).float()
            elif isinstance(self.objective.regularizer, JRSRegularizer):
                reg_layers = [r.float() for r in layers] if layers else [features.float()]
        total, terms = self.objective(z, yb, regularizer_embeddings=reg_embeddings,
                                      layers=reg_layers)
        if self.preserve_input > 0:
            if reference is None:
                reference = xb if self.net.standardize is None else self.net.standardize(xb)
            # the global batch and its inputs, as one process sees them (no-ops outside a job)
            terms["preserve_input"] = self._preservation(all_gather_with_grad(z),
                                                         all_gather_with_grad(reference.detach()))
            total = total + self.preserve_input * terms["preserve_input"]
        if aux is not None:
            items = aux.items() if isinstance(aux, dict) else [("", aux)]
            for key, value in items:
                value = value.float()
                value = value.sum() if value.ndim else value
                terms[f"aux_{key}" if key else "aux"] = value
                total = total + value
        return total, terms

    def train(self, mode=True):
        self.net.train(mode)
        if isinstance(self.objective.loss, nn.Module):
            self.objective.loss.train(mode)

    def state_dict(self):
        return {"model": clone_state(self.net), "loss": clone_state(self.objective.loss),
                "average": None if self.average is None else self.average.state_dict()}

    def load_state_dict(self, state):
        self.net.load_state_dict(state["model"])
        if state.get("loss") is not None and isinstance(self.objective.loss, nn.Module):
            self.objective.loss.load_state_dict(state["loss"])
        if self.average is not None and state.get("average") is not None:
            self.average.load_state_dict(state["average"])


def embed(net, loader, *, n_components, device, input_shape, amp=False):
    """Embeddings of the loader's batches in eval mode, without gradients, as float32 numpy.

    Raises a ``ValueError`` when the network produces NaN or infinite
    embeddings (e.g. from non-finite items of a ``Dataset``, or a backbone that
    misbehaves only in evaluation mode): never silently NaN.
    """
    was_training = net.training
    net.eval()
    out, finite_input = [], []
    try:
        with torch.inference_mode():
            for xb, _ in loader:
                xb = to_model_input(xb, device, input_shape)
                finite_input.append(torch.isfinite(xb).all())  # read once, after the loop
                with autocast(amp, device):
                    z = net(xb)[0]
                out.append(z.float().cpu())
    finally:
        net.train(was_training)
    if finite_input and not bool(torch.stack(finite_input).all()):
        # what validate_data says of arrays, said of a Dataset's items
        raise ValueError("Input X contains NaN or infinity (an item of the Dataset): "
                         "DeepMetricTransformer does not accept non-finite inputs.")
    Z = torch.cat(out).numpy() if out else np.zeros((0, n_components), np.float32)
    if not np.all(np.isfinite(Z)):
        raise ValueError("The network produced NaN or infinite embeddings (in evaluation "
                         f"mode): {_why_not_finite(net, loader, device, input_shape)}")
    return Z


def _why_not_finite(net, loader, device, input_shape):
    """The likeliest cause of non-finite embeddings, looked for only once they happened."""
    state = list(net.parameters()) + list(net.buffers())
    if not all(bool(torch.isfinite(t).all()) for t in state if t.is_floating_point()):
        return ("the network's weights or batch-norm statistics are not finite, so training "
                "diverged; lower learning_rate.")
    with torch.inference_mode():
        for xb, _ in loader:
            prepared = net.prepare(to_model_input(xb, device, input_shape))
            if not bool(torch.isfinite(prepared).all()):
                return ("an input lies so far from the training data that its standardised "
                        "value overflows float32 (|x - mean| / std past 3.4e38); rescale it "
                        "like the training data.")
    return ("check the input's scale against the training data's, the backbone's eval-mode "
            "behaviour (e.g. batch norm statistics) and the learning_rate.")
