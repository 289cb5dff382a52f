"""One deep fit: build the network and the objective, resume if asked, run the shared loop."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

from .._training import (Checkpoint, CheckpointError, EarlyStopping, LRSchedule, Progress,
                         Validation, WeightAverage, train_epochs, warmup_cosine)
from .._training._distributed import distributed_context
from .._utils import keep_freed_buffers, thread_limits
from ._data import MappedSampler, first_items, make_loader, prepare_source, to_model_input
from ._hooks import LayerCapture, match_modules
from ._inputs import resize_for
from ._network import EmbeddingNet, build_optimizer, identity_start, place, probe_backbone
from ._plan import (augmentation, backbone_and_input_layer, batch_plan, max_epochs,
                    preserve_input_weight)
from ._state import check_resumable_network, to_cpu
from ._trainable import DeepTrainable

__all__ = ["fit_network"]

#: ``lr_schedule="cosine"`` warms up over one epoch, but at most this fraction of the steps.
WARMUP_FRACTION = 0.1


def _optimizer(est, net, loss):
    return build_optimizer(net, loss, optimizer=est.optimizer, learning_rate=est.learning_rate,
                           head_lr_mult=est.head_lr_mult, weight_decay=est.weight_decay,
                           param_groups=est.param_groups)


def _restore(est, resume, trainable, optimizer, scaler, rng, device, stopper):
    """Load a resume state; the optimiser takes the *current* learning rates (honoured)."""
    check_resumable_network(resume, trainable.net, est.n_components)
    try:
        _load_resume(resume, trainable, optimizer, scaler, rng, device, stopper)
    except (KeyError, IndexError, RuntimeError, TypeError, ValueError) as exc:
        raise CheckpointError(
            f"warm_start cannot resume from {resume.get('_source', 'the checkpoint')}: it does "
            f"not match this fit ({type(exc).__name__}: {str(exc).strip()[:300]}). Resume with "
            "the parameters of the run that wrote it (loss, optimizer, ema_epochs, amp), or "
            "fit with warm_start=False (after removing the checkpoint, or with another "
            "checkpoint_path) to start afresh.") from exc
    fresh = _optimizer(est, trainable.net, trainable.objective.loss)
    for group, new in zip(optimizer.param_groups, fresh.param_groups):
        group["lr"], group["weight_decay"] = new["lr"], new["weight_decay"]
    return list(resume["history"]), int(resume["epoch"])


def _load_resume(resume, trainable, optimizer, scaler, rng, device, stopper):
    trainable.load_state_dict(resume)  # the network, the loss's state, the weight average
    optimizer.load_state_dict(resume["optimizer"])
    if resume["scaler"]:
        scaler.load_state_dict(resume["scaler"])
    rng.set_state(resume["numpy_rng"])
    torch.set_rng_state(resume["torch_rng"])
    if device.type == "cuda" and resume.get("cuda_rng") is not None:
        torch.cuda.set_rng_state(resume["cuda_rng"], device)
    stopper.load_state_dict(resume["stopper"])


#: The validation MAP@R must rise by more than this for training to count as an improvement
#: (batch-norm statistics alone move it by about 1e-3 at a learning rate of 1e-12).
NO_GAIN_MARGIN = 0.01
#: Without validation, the epoch loss must fall by more than this fraction of the first
#: epoch's (the same batches summed in another order differ by about 1e-7).
NO_GAIN_LOSS_RTOL = 1e-3
#: Without validation, a fit embeds this many training samples in evaluation mode at its
#: end, so that a network that is non-finite only in eval mode fails ``fit``, not
#: ``transform``.
EVAL_CHECK_SIZE = 64


def _no_gain(history, initial_score, validating):
    """Why training did not improve on its start (a message), or ``None``."""
    if validating and initial_score is not None:
        scores = [r["validation_score"] for r in history if "validation_score" in r]
        if scores and initial_score < 1.0 - NO_GAIN_MARGIN and \
                not max(scores) > initial_score + NO_GAIN_MARGIN:
            return (f"training did not improve on the untrained network by more than "
                    f"{NO_GAIN_MARGIN}: validation MAP@R {initial_score:.4f} before training, "
                    f"at best {max(scores):.4f} after. "
                    "Check the learning rate, the loss and the data.")
    elif not validating and len(history) > 1:
        first, best = history[0]["loss"], min(r["loss"] for r in history[1:])
        if not best < first - NO_GAIN_LOSS_RTOL * abs(first):
            return (f"training did not lower the loss after its first epoch by more than "
                    f"{NO_GAIN_LOSS_RTOL:.1%} ({first:.6g}, at best {best:.6g} after). Check "
                    "the learning rate, the loss and the data.")
    return None


def _check_positive_pairs(est, K, y_train, loss, held_out):
    """Refuse a batch plan that holds no positive pair, unless the loss learns from proxies."""
    if K >= 2 or isinstance(getattr(loss, "proxies", None), torch.Tensor):
        return
    if np.bincount(y_train).max() < 2:
        why = "every training class has a single sample" + (
            " once the validation set is held out" if held_out else "")
        fix = "Give classes at least 2 training samples"
    else:
        why = f"n_samples_per_class={est.n_samples_per_class}"
        fix = "Set n_samples_per_class >= 2"
    raise ValueError(
        f"No training batch can hold a positive pair (two samples of one class): {why}. "
        f"The metric loss learns from such pairs and would train on nothing. {fix}, or use a "
        "proxy loss (loss='amsoftmax'), which learns from single samples.")


def fit_network(est, source, y_enc, classes, input_shape, split, rng, device, resume,
                early_stopping, extra_callbacks=()):
    """Train ``est``'s network; return its fitted attributes (the caller sets them)."""
    train_idx, val_idx = split
    backbone, standardize = backbone_and_input_layer(est, source, train_idx, input_shape)
    resize = resize_for(backbone, input_shape)
    probe = to_model_input(first_items(source), torch.device("cpu"), input_shape)
    if resize is not None:
        probe = resize(probe)
    if standardize is not None:
        probe = standardize(probe)
    n_features, flops = probe_backbone(backbone, probe)
    net = EmbeddingNet(backbone, n_features, est.n_components,
                       est.normalize and est.n_components > 1,
                       standardize=standardize, resize=resize)
    net = place(identity_start(net), device)
    objective = est._build_objective(len(classes))
    for part in (objective.loss, objective.regularizer):
        if isinstance(part, nn.Module):
            part.to(device)
    hooked = []
    if est.regularizer == "jrs" and objective.regularized and est.jrs_layers is not None:
        hooked = match_modules(net.backbone, est.jrs_layers)
    optimizer = _optimizer(est, net, objective.loss)
    scaler = torch.amp.GradScaler(device.type, enabled=est.amp == "fp16")
    ddp = distributed_context(device)  # world size 1 unless launched by torchrun
    P, K = batch_plan(est, y_enc[train_idx], input_shape)
    _check_positive_pairs(est, K, y_enc[train_idx], objective.loss, val_idx is not None)
    sampler = ddp.batch_sampler(y_enc[train_idx], P, K, rng, n_batches=est.batches_per_epoch)
    augment = augmentation(est, input_shape)
    train_source, prepared = prepare_source(net, source, input_shape, augment)
    loader = make_loader(train_source, batch_sampler=MappedSampler(sampler, train_idx),
                         num_workers=est.num_workers, pin_memory=est._pin(device))
    capture = LayerCapture(net.backbone, hooked)
    # built before the hooks are registered, so the average's copy of the network has none
    average = WeightAverage(net, max(1.0, est.ema_epochs * len(sampler))) \
        if est.ema_epochs else None
    n_train_classes = len(np.unique(y_enc[train_idx]))
    trainable = DeepTrainable(net, ddp.objective(objective),
                              torch.as_tensor(y_enc, dtype=torch.long),
                              input_shape=input_shape, device=device, amp=est.amp,
                              capture=capture if hooked else None,
                              augment=augment, forward=ddp.forward(net), prepared=prepared,
                              preserve_input=preserve_input_weight(est, n_train_classes),
                              average=average)
    validating = val_idx is not None
    if early_stopping and not validating:
        raise ValueError("early_stopping needs a validation set: set validation_fraction.")
    if validating and early_stopping:
        stopper = EarlyStopping(n_iter_no_change=est.n_iter_no_change, tol=est.tol,
                                restore_best=True)
    else:
        stopper = EarlyStopping(monitor="loss", greater_is_better=False,
                                n_iter_no_change=est.n_iter_no_change, tol=est.tol)
    callbacks = []
    if validating:
        from ..metrics import map_at_r

        def score():  # MAP@R: Recall@1 saturates at 1.0 on a small held-out set
            return map_at_r(est._embed(trainable.eval_net, source, val_idx, device,
                                       input_shape),
                            y_enc[val_idx])

        callbacks.append(Validation(score))
    callbacks.append(stopper)
    history, start_epoch, max_iter = [], 0, max_epochs(est, input_shape,
                                                       isinstance(source, torch.Tensor))
    if resume is not None:
        ddp.check_resume(resume)
        history, start_epoch = _restore(est, resume, trainable, optimizer, scaler, rng, device,
                                        stopper)
        if resume.get("stopped"):  # an early-stopped run stays finished
            max_iter = start_epoch
        max_iter = max(max_iter, start_epoch)
    if est.lr_schedule == "cosine":
        n_batches = len(sampler)
        callbacks.append(LRSchedule(warmup_cosine(
            optimizer, max_iter * n_batches,
            min(n_batches, int(WARMUP_FRACTION * max_iter * n_batches)),
            steps_done=start_epoch * n_batches)))
    callbacks.extend(extra_callbacks)

    def state(loop):  # the network, the loss's state and the average: the trainable's
        return {"format": "skdml-deep", **trainable.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scaler": scaler.state_dict() if scaler.is_enabled() else None,
                "numpy_rng": rng.get_state(), "torch_rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                "epoch": loop.epoch, "history": list(loop.history),
                "stopper": stopper.state_dict(), "stopped": loop.stop_reason is not None,
                "classes": classes, "input_shape": tuple(input_shape),
                "n_components": est.n_components,
                "split": (train_idx, val_idx), "world_size": ddp.world_size,
                "initial_score": initial_score}

    if est.checkpoint_path is not None and ddp.is_main:
        callbacks.append(Checkpoint(est.checkpoint_path, state))
    callbacks.append(Progress(est.verbose if ddp.is_main else 0, type(est).__name__))
    batch_flops = 3.0 * flops * P * K  # forward + backward
    if device.type == "cpu":
        keep_freed_buffers()  # CPU memory policy: no page faults for each step's buffers
    with thread_limits(flops_per_step=batch_flops if device.type == "cpu" else None), capture:
        initial_score = resume.get("initial_score") if resume is not None else \
            score() if validating else None
        result = train_epochs(trainable, optimizer, lambda epoch: loader, max_iter=max_iter,
                              callbacks=callbacks, start_epoch=start_epoch, history=history,
                              grad_scaler=scaler, device=device)
    if not validating:  # the eval-mode network, checked once before it is called fitted
        est._embed(trainable.eval_net, source, train_idx[:EVAL_CHECK_SIZE], device,
                   input_shape)
    stopped = result.stop_reason if result.stop_reason != "max_iter" else None
    if resume is not None and resume.get("stopped"):
        stopped = "no_improvement"
    final = state(SimpleNamespace(epoch=result.n_iter, history=result.history,
                                  stop_reason=stopped))
    fitted = {"module_": trainable.eval_net.eval(), "loss_": objective.loss, "classes_": classes,
              "input_shape_": tuple(input_shape), "device_": device,
              "history_": result.history, "n_iter_": result.n_iter,
              "_resume_state": to_cpu(final),
              # a finished cosine schedule (rate 0) is a planned end, not a cut-short optimiser
              "_converged": stopped is not None or est.lr_schedule == "cosine",
              "_no_gain": _no_gain(result.history, initial_score, validating)}
    if validating and early_stopping:
        fitted["best_iteration_"] = stopper.best_epoch
        fitted["best_validation_score_"] = stopper.best_value
    return fitted
