"""One deep fit: :class:`DeepTrainer` owns the device, the input pipeline, the network,
the objective and the :class:`~skdml.deep._state.TrainingState`, and runs the shared loop.

It reads its settings from a frozen :class:`~skdml.deep._config.FitConfig` only
(never from the estimator), and returns the fitted attributes; the estimator
sets them once the fit has finished.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .._training import (Callback, Checkpoint, CheckpointError, EarlyStopping, LRSchedule,
                         Progress, Validation, WeightAverage, train_epochs, warmup_cosine,
                         warmup_stable_decay)
from .._training._distributed import distributed_context
from .._utils import evenly_spaced, keep_freed_buffers, thread_limits, warn_user
from ._config import (AUTO_LOSS, COLLAPSE_REFITS, DECAYING_SCHEDULES, VECTOR_MAX_FEATURES,
                      standardizes)
from ._data import MappedSampler, first_items, make_loader, prepare_source, to_model_input
from ._hooks import LayerCapture, match_modules
from ._inputs import fit_standardize, resize_for
from ._network import (EmbeddingNet, build_backbone, build_optimizer, identity_start, place,
                       probe_backbone)
from ._state import TrainingState, check_resumable_network, labels_digest, to_cpu
from ._trainable import DeepTrainable, embed

__all__ = ["DeepTrainer", "embed_with"]

#: ``lr_schedule="cosine"`` and ``"warmup_stable_decay"`` warm up over one epoch, but at most
#: this fraction of the steps.
WARMUP_FRACTION = 0.1
#: ``lr_schedule="warmup_stable_decay"`` decays the rate to 0 over this fraction of the steps
#: (the 20 % cool-down of Hägele et al., 2024).
DECAY_FRACTION = 0.2
#: The validation MAP@R must rise by more than this for training to count as an improvement
#: (batch-norm statistics alone move it by about 1e-3 at a learning rate of 1e-12).
NO_GAIN_MARGIN = 0.01
#: Without validation, the epoch's metric loss must fall by more than this fraction of the
#: first epoch's (the same batches summed in another order differ by about 1e-7).
NO_GAIN_LOSS_RTOL = 1e-3
#: Without validation, a plateau of the training loss ends a fit only once the metric loss has
#: fallen this fraction below its first epoch's: a flat start is an initial plateau (seen on
#: faces under strong lighting: 0.93 for 20 epochs, then down to 0.29), not convergence.
LEARNING_STARTED_RTOL = 0.05
#: A fitted embedding separates its training classes when same-class pairs of training samples
#: are, on average, at least this much more cosine-similar than different-class pairs (in
#: evaluation mode). Fits that learned: 0.4-0.65 (digits, AT&T, COIL-20); collapsed fits
#: (every sample in nearly one direction; faces and digits under strong lighting with the
#: multi-similarity loss): 0.01-0.02.
SEPARATION_MIN = 0.1
#: ... judged (a refit, a warning) only after at least this many epochs: a shorter fit
#: (``max_iter=2`` for a smoke test) is too short to tell a collapse from a slow start.
SEPARATION_MIN_EPOCHS = 10
#: The separation is measured on at most this many evenly spaced training samples (embedded
#: in evaluation mode at the end of every fit, so that a network that is non-finite only in
#: eval mode fails ``fit``, not ``transform``).
SEPARATION_SAMPLES = 512


def embed_with(net, source, indices, *, loader, n_components, device, input_shape, amp):
    """Embeddings of ``source[indices]`` in eval mode, no grad, float32 numpy."""
    batches = make_loader(source, indices, batch_size=loader.batch_size,
                          num_workers=loader.num_workers, pin_memory=loader.pin_memory)
    return embed(net, batches, n_components=n_components, device=device,
                 input_shape=input_shape, amp=amp)


def monitored_loss(history):
    """The training loss that says whether the *metric* learns: ``metric_loss`` when logged.

    The total also holds the regularisers, e.g. the ``preserve_input`` term, which can
    fall while the metric loss stays flat.
    """
    return "metric_loss" if history and "metric_loss" in history[0] else "loss"


def no_gain(history, initial_score, validating):
    """Why training did not improve on its start (a message), or ``None``."""
    if validating and initial_score is not None:
        scores = [r["validation_score"] for r in history if "validation_score" in r]
        if scores and initial_score < 1.0 - NO_GAIN_MARGIN and \
                not max(scores) > initial_score + NO_GAIN_MARGIN:
            return (f"training did not improve on the untrained network by more than "
                    f"{NO_GAIN_MARGIN}: validation MAP@R {initial_score:.4f} before training, "
                    f"at best {max(scores):.4f} after. Try a higher learning_rate, more "
                    "epochs (max_iter) or another loss; check the labels.")
    elif not validating and len(history) > 1:
        key = monitored_loss(history)
        first, best = history[0][key], min(r[key] for r in history[1:])
        if not best < first - NO_GAIN_LOSS_RTOL * abs(first):
            return (f"training did not lower the {key.replace('_', ' ')} after its first "
                    f"epoch by more than {NO_GAIN_LOSS_RTOL:.1%} ({first:.6g}, at best "
                    f"{best:.6g} after): the metric did not learn. Try a higher "
                    "learning_rate, more epochs (max_iter) or another loss (e.g. "
                    "loss='binomial'); check the labels and the data.")
    return None


def class_separation(Z, y):
    """Mean cosine similarity of same-class pairs minus that of different-class pairs.

    ``(gap, same, different)``; ``gap`` is ``nan`` when ``y`` lacks same-class or
    different-class pairs. A zero row has similarity 0 to every row.

    Examples
    --------
    >>> import numpy as np
    >>> Z = np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    >>> gap, same, different = class_separation(Z, np.array([0, 0, 1, 1]))
    >>> round(gap, 3), round(same, 3), round(different, 3)
    (0.6, 0.9, 0.3)
    """
    Z = np.asarray(Z, dtype=np.float64)
    norms = np.linalg.norm(Z, axis=1, keepdims=True)
    Zn = np.divide(Z, norms, out=np.zeros_like(Z), where=norms > 0)
    S = Zn @ Zn.T
    same = np.asarray(y)[:, None] == np.asarray(y)[None, :]
    np.fill_diagonal(same, False)
    different = np.asarray(y)[:, None] != np.asarray(y)[None, :]
    if not same.any() or not different.any():
        return float("nan"), float("nan"), float("nan")
    s_same, s_diff = float(S[same].mean()), float(S[different].mean())
    return s_same - s_diff, s_same, s_diff


def separation_message(separation, n_samples, n_epochs, refits_tried=()):
    """Why a fitted embedding is degenerate (a message), or ``None`` when it separates.

    ``refits_tried``: the :data:`COLLAPSE_REFITS` that were tried after it, in vain.
    """
    gap, same, different = separation
    if not gap < SEPARATION_MIN or n_epochs < SEPARATION_MIN_EPOCHS:  # nan: too few pairs
        return None
    collapsed = " (it collapsed: every sample points nearly the same way)" \
        if different > 0.5 else ""
    settings = [", ".join(f"{key}={value!r}" for key, value in refit.items())
                for refit in refits_tried]
    tried = (f" Refits with {' and with '.join(settings)} did not separate them either; the "
             "first fit is returned.") if settings else ""
    other_loss = "" if any("loss" in refit for refit in refits_tried) else \
        "another loss (e.g. loss='binomial'), "
    return (f"the embedding does not separate the training classes: on {n_samples} training "
            f"samples, same-class pairs have a mean cosine similarity of {same:.3f} and "
            f"different-class pairs {different:.3f}, a gap of {gap:.3f} (a fit that learned "
            f"keeps it above {SEPARATION_MIN}){collapsed}.{tried} Try {other_loss}a lower "
            "learning_rate, an augmentation for the nuisance in your data (augment=callable), "
            "or a linear learner (skdml.ECAML or skdml.JRD with "
            "validation_split='class_disjoint'); with validation_fraction set, the untrained "
            "network is kept when training does not beat it on held-out classes.")


def collapse_refits(config, resume, fitted):
    """The :data:`COLLAPSE_REFITS` to try after this fit, in order (none when it separates).

    Only after a fresh fit (not a resumed one, and without a ``checkpoint_path``, whose
    file holds one fit) of at least ``SEPARATION_MIN_EPOCHS`` epochs that left the
    training classes unseparated; and only the refits whose setting the first fit took
    from ``"auto"``: the loss when ``loss="auto"`` chose the multi-similarity loss, the
    augmentation when ``augment="auto"`` augmented images.
    """
    if not (resume is None and config.checkpoint_path is None
            and fitted["n_iter_"] >= SEPARATION_MIN_EPOCHS
            and fitted["_separation"][0] < SEPARATION_MIN):
        return []
    applies = {"loss": config.auto_loss and config.loss == AUTO_LOSS,
               "augment": config.auto_augment}
    return [refit for refit in COLLAPSE_REFITS if all(applies[key] for key in refit)]


def _finished(resume):
    """Whether the run to resume ended for good: stopped by early stopping (or by a callback
    in a state saved before the reason was, which cannot tell them apart)."""
    return resume.stopped and resume.stop_reason in (None, "no_improvement")


class DeepTrainer:
    """Train one network from a :class:`~skdml.deep._config.FitConfig`.

    Parameters
    ----------
    config : FitConfig
        The resolved settings (and the validation split); the backbone is
        built here from ``config.backbone`` (yours or the default one).
    objective : MetricObjective
        The loss and regulariser (built by the estimator, the same wiring as ECAML and JRD).
    source, y_enc, classes, input_shape
        The training data: a float32 tensor or a Dataset, encoded labels, the
        class labels, the model input shape of one sample.
    rng : RandomState
        Draws the batch plans (its state is saved with the checkpoints).
    callbacks : sequence
        Further loop callbacks (the user's, wrapped).
    inputs_digest : str, default=None
        :func:`~skdml.deep._state.inputs_digest` of ``source``, saved with the states.
    """

    def __init__(self, config, objective, source, y_enc, classes, input_shape, rng,
                 callbacks=(), inputs_digest=None):
        self.config, self.objective = config, objective
        self.source, self.y_enc, self.classes = source, y_enc, classes
        # saved with every epoch's state: what a resumed fit must match
        self.labels_digest, self.inputs_digest = labels_digest(y_enc), inputs_digest
        self.input_shape, self.rng = tuple(input_shape), rng
        self.device = config.device
        self.ddp = distributed_context(self.device)  # world size 1 unless launched by torchrun
        self.net, self.flops = self._network()
        for part in (objective.loss, objective.regularizer):
            if isinstance(part, nn.Module):
                part.to(self.device)
        self._pipeline()
        self._optimisation()
        self.extra_callbacks = list(callbacks)
        self.initial_score = None
        self._start_state = None  # the network before training, when a hold-out scores it

    # ------------------------------------------------------------------ set-up
    def _network(self):
        """The embedding network on the device: input layers, backbone, head (identity start).

        The one place where the backbone is built: yours (``config.backbone``)
        or the default one for the input.
        """
        cfg, train_idx = self.config, self.config.train_idx
        if cfg.default_vector_backbone and cfg.standardize:
            # the default vector backbone works on the leading principal axes of the input
            standardize = fit_standardize(self.source, train_idx, self.input_shape,
                                          scale="auto", n_axes=VECTOR_MAX_FEATURES)
            width = standardize.out_features
            backbone = build_backbone(None, self.input_shape if width is None else (width,))
        else:
            backbone = build_backbone(cfg.backbone, self.input_shape)
            standardize = fit_standardize(self.source, train_idx, self.input_shape) \
                if standardizes(cfg, backbone) else None
        resize = resize_for(backbone, self.input_shape)
        probe = to_model_input(first_items(self.source), torch.device("cpu"), self.input_shape)
        for layer in (resize, standardize):
            if layer is not None:
                probe = layer(probe)
        n_features, flops = probe_backbone(backbone, probe)
        net = EmbeddingNet(backbone, n_features, cfg.n_components, cfg.normalize,
                           standardize=standardize, resize=resize)
        return place(identity_start(net), self.device), flops

    def _pipeline(self):
        """The batch plan, the training loader and the trainable (loss of a batch)."""
        cfg, y_train = self.config, self.y_enc[self.config.train_idx]
        P, K = cfg.n_classes_per_batch, cfg.n_samples_per_class
        self._check_positive_pairs(K, y_train)
        self.sampler = self.ddp.batch_sampler(y_train, P, K, self.rng,
                                              n_batches=cfg.batches_per_epoch)
        train_source, prepared = prepare_source(self.net, self.source, self.input_shape,
                                                cfg.augment)
        self.loader = make_loader(train_source,
                                  batch_sampler=MappedSampler(self.sampler, cfg.train_idx),
                                  num_workers=cfg.loader.num_workers,
                                  pin_memory=cfg.loader.pin_memory)
        hooked = match_modules(self.net.backbone, cfg.jrs_layers) \
            if cfg.jrs_layers and self.objective.regularized else []
        self.capture = LayerCapture(self.net.backbone, hooked)
        # built before the hooks are registered, so the average's copy of the network has none
        average = WeightAverage(self.net, max(1.0, cfg.ema_epochs * len(self.sampler))) \
            if cfg.ema_epochs else None
        self.trainable = DeepTrainable(
            self.net, self.ddp.objective(self.objective),
            torch.as_tensor(self.y_enc, dtype=torch.long), input_shape=self.input_shape,
            device=self.device, amp=cfg.amp, capture=self.capture if hooked else None,
            augment=cfg.augment, forward=self.ddp.forward(self.net), prepared=prepared,
            preserve_input=cfg.preserve_input, average=average)

    def _check_positive_pairs(self, K, y_train):
        """Refuse a batch plan without positive pairs, unless the loss learns from proxies.

        A loss with trainable parameters (class proxies or weights: skdml's and
        pytorch-metric-learning's ``proxies``, ``W``...) learns from single samples.
        """
        loss = self.objective.loss
        if K >= 2 or (isinstance(loss, torch.nn.Module)
                      and any(p.requires_grad for p in loss.parameters())):
            return
        if np.bincount(y_train).max() < 2:
            why = "every training class has a single sample" + (
                " once the validation set is held out" if self.config.val_idx is not None else "")
            fix = "Give classes at least 2 training samples"
        else:
            why = f"n_samples_per_class={K}"
            fix = "Set n_samples_per_class >= 2"
        raise ValueError(
            f"No training batch can hold a positive pair (two samples of one class): {why}. "
            f"The metric loss learns from such pairs and would train on nothing. {fix}, or use "
            "a proxy loss (loss='amsoftmax'), which learns from single samples.")

    def _build_optimizer(self):
        cfg = self.config
        return build_optimizer(self.net, self.objective.loss, optimizer=cfg.optimizer,
                               learning_rate=cfg.learning_rate, head_lr_mult=cfg.head_lr_mult,
                               param_groups=cfg.param_groups, **cfg.optimizer_kwargs)

    def _optimisation(self):
        cfg = self.config
        self.optimizer = self._build_optimizer()
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=cfg.amp == "fp16")
        validating = cfg.val_idx is not None
        if validating and cfg.early_stopping:
            self.stopper = EarlyStopping(n_iter_no_change=cfg.n_iter_no_change, tol=cfg.tol,
                                         restore_best=True)
        else:  # a plateau of the metric loss, once it has started to fall
            self.stopper = EarlyStopping(monitor="metric_loss", greater_is_better=False,
                                         n_iter_no_change=cfg.n_iter_no_change, tol=cfg.tol,
                                         min_progress=LEARNING_STARTED_RTOL)

    # ------------------------------------------------------------------ state
    def embed(self, net, indices):
        cfg = self.config
        return embed_with(net, self.source, indices, loader=cfg.loader,
                          n_components=cfg.n_components, device=self.device,
                          input_shape=self.input_shape, amp=cfg.amp)

    def validation_score(self):
        """MAP@R of the held-out set (Recall@1 saturates at 1.0 on a small one)."""
        from ..metrics import map_at_r

        val_idx = self.config.val_idx
        return map_at_r(self.embed(self.trainable.eval_net, val_idx), self.y_enc[val_idx])

    def state(self, epoch, history, stop_reason, trained=None):
        """The :class:`TrainingState` after ``epoch`` epochs.

        ``trained``: the trainable's state to save (by default its state now).
        """
        cfg = self.config
        trained = self.trainable.state_dict() if trained is None else trained
        return TrainingState(
            **trained, optimizer=self.optimizer.state_dict(),
            scaler=self.scaler.state_dict() if self.scaler.is_enabled() else None,
            numpy_rng=self.rng.get_state(), torch_rng=torch.get_rng_state(),
            cuda_rng=torch.cuda.get_rng_state(self.device) if self.device.type == "cuda"
            else None,
            epoch=epoch, history=list(history), stopper=self.stopper.state_dict(),
            stopped=stop_reason is not None, stop_reason=stop_reason, classes=self.classes,
            input_shape=self.input_shape,
            n_components=cfg.n_components, split=(cfg.train_idx, cfg.val_idx),
            world_size=self.ddp.world_size, initial_score=self.initial_score,
            refit=cfg.refit, labels_digest=self.labels_digest, inputs_digest=self.inputs_digest,
            start=self._start_state, optimizer_class=type(self.optimizer).__name__)

    def restore(self, resume):
        """Load ``resume``; the optimiser keeps the *current* settings (rates, betas, ...)."""
        check_resumable_network(resume, self.net, self.config.n_components)
        self.ddp.check_resume(resume)
        # the optimiser was built with the current settings: they survive loading its state
        # (torch's load puts the saved ones back: changed betas or eps were ignored)
        current = [{key: value for key, value in group.items() if key != "params"}
                   for group in self.optimizer.param_groups]
        try:
            self.trainable.load_state_dict(resume.to_dict())  # network, loss, weight average
            # torch loads one optimiser's state into another (Adam's into SGD) and fails at
            # the first step, or trains on silently (Adam's into AdamW): the class must be
            # this one; a state saved before the class was is checked by its settings (one
            # this optimiser lacks; an older torch may have saved fewer)
            optimizer_class = type(self.optimizer).__name__
            if resume.optimizer_class is not None:
                if resume.optimizer_class != optimizer_class:
                    raise ValueError(f"another optimiser wrote it ({resume.optimizer_class}; "
                                     f"this fit's is {optimizer_class})")
            else:
                saved = set().union(*resume.optimizer["param_groups"]) - {"params", "initial_lr"}
                foreign = saved - set().union(*self.optimizer.param_groups)
                if foreign:
                    raise ValueError(f"another optimiser wrote it: it has the settings "
                                     f"{sorted(foreign)}, which {optimizer_class} has not")
            _check_state_layout(resume.optimizer["param_groups"], current, self.optimizer)
            self.optimizer.load_state_dict(resume.optimizer)
            if resume.scaler:
                self.scaler.load_state_dict(resume.scaler)
            self.rng.set_state(resume.numpy_rng)
            torch.set_rng_state(resume.torch_rng)
            if self.device.type == "cuda" and resume.cuda_rng is not None:
                torch.cuda.set_rng_state(resume.cuda_rng, self.device)
            self.stopper.load_state_dict(_watched(resume.stopper))
        except (KeyError, IndexError, RuntimeError, TypeError, ValueError) as exc:
            raise CheckpointError(
                f"warm_start cannot resume from {resume.source}: it does not match this fit "
                f"({type(exc).__name__}: {str(exc).strip()[:300]}). Resume with the parameters "
                "of the run that wrote it (loss, optimizer, optimizer_params, amp, "
                "early_stopping), or fit with "
                "warm_start=False (after removing the checkpoint, or with another "
                "checkpoint_path) to start afresh.") from exc
        for group, settings in zip(self.optimizer.param_groups, current):
            group.update(settings)
        self.initial_score = resume.initial_score

    # ------------------------------------------------------------------ training
    def fit(self, resume=None):
        """Train; return the fitted attributes (and ``_converged``, ``_no_gain``)."""
        cfg = self.config
        validating = cfg.val_idx is not None
        callbacks = [Validation(self.validation_score)] if validating else []
        # the last epoch's network, taken before the stopper puts the best epoch's back: a
        # warm start resumes from where the run stopped, as from the checkpoint file
        last = _LastState()
        callbacks += [last, self.stopper]
        history, start_epoch, max_iter = [], 0, cfg.max_iter
        if resume is not None:
            self.restore(resume)
            history, start_epoch = list(resume.history), int(resume.epoch)
            if _finished(resume):  # an early-stopped run stays finished
                if max_iter > start_epoch:
                    why = ("its hold-out score" if cfg.val_idx is not None else
                           "its training loss") + " stopped improving"
                    if resume.stop_reason is None:  # a state saved before the reason was
                        why += " (or a callback stopped it)"
                    warn_user(
                        f"warm_start: the run to resume ended after {start_epoch} epochs: "
                        f"{why}; it trains no further towards max_iter={max_iter}. Fit with "
                        "warm_start=False to train afresh.", UserWarning)
                max_iter = start_epoch
            max_iter = max(max_iter, start_epoch)
        if cfg.lr_schedule in DECAYING_SCHEDULES:
            n_batches = len(self.sampler)
            n_steps, steps_done = max_iter * n_batches, start_epoch * n_batches
            n_warmup = min(n_batches, int(WARMUP_FRACTION * n_steps))
            if cfg.lr_schedule == "cosine":
                schedule = warmup_cosine(self.optimizer, n_steps, n_warmup, steps_done)
            else:
                schedule = warmup_stable_decay(self.optimizer, n_steps, n_warmup,
                                               max(1, int(DECAY_FRACTION * n_steps)), steps_done)
            callbacks.append(LRSchedule(schedule, base_rate=cfg.learning_rate))
        else:  # a constant rate: recorded in every epoch's row all the same
            callbacks.append(LRSchedule(base_rate=cfg.learning_rate))
        callbacks.extend(self.extra_callbacks)
        if cfg.checkpoint_path is not None and self.ddp.is_main:
            callbacks.append(Checkpoint(cfg.checkpoint_path, lambda loop: self.state(
                loop.epoch, loop.history, loop.stop_reason).to_dict()))
        callbacks.append(Progress(cfg.verbose if self.ddp.is_main else 0, cfg.name))
        P, K = cfg.n_classes_per_batch, cfg.n_samples_per_class
        cpu = self.device.type == "cpu"
        if cpu:
            keep_freed_buffers()  # CPU memory policy: no page faults for each step's buffers
        with thread_limits(flops_per_step=3.0 * self.flops * P * K if cpu else None), \
                self.capture:
            start_state = None  # the start, returned if never beaten (saved to resume)
            if validating and resume is None:
                self.initial_score = self.validation_score()
                start_state = self.trainable.state_dict()
            elif validating:
                start_state = resume.start  # None from a run saved before the start was
            self._start_state = start_state
            result = train_epochs(self.trainable, self.optimizer, lambda epoch: self.loader,
                                  max_iter=max_iter, callbacks=callbacks,
                                  start_epoch=start_epoch, history=history,
                                  grad_scaler=self.scaler, device=self.device)
        stopped = result.stop_reason if result.stop_reason != "max_iter" else None
        if resume is not None and _finished(resume):
            stopped = "no_improvement"
        final = self.state(result.n_iter, result.history, stopped, trained=last.state)
        kept_start = start_state is not None and self._keep_start(result.history, start_state)
        # the eval-mode network, checked once before it is called fitted (non-finite
        # embeddings fail the fit), and its separation of the training classes: cosine, the
        # geometry of a normalised embedding (unnormalised ones, e.g. 1-d, are not judged)
        picked = evenly_spaced(cfg.train_idx, SEPARATION_SAMPLES)
        Z = self.embed(self.trainable.eval_net, picked)
        separation = class_separation(Z, self.y_enc[picked]) if cfg.normalize else \
            (float("nan"),) * 3
        fitted = {"module_": self.trainable.eval_net.eval(), "loss_": self.objective.loss,
                  "classes_": self.classes, "input_shape_": self.input_shape,
                  "device_": self.device, "history_": result.history, "n_iter_": result.n_iter,
                  "_resume_state": to_cpu(final.to_dict()),
                  # a finished decaying schedule (rate 0) is a planned end, not a cut-short
                  # run; nor is a run whose last epoch did not improve by more than tol (or
                  # that never started learning: the no-gain warning says so)
                  "_converged": stopped is not None or cfg.lr_schedule in DECAYING_SCHEDULES
                  or not (self.stopper.started and self.stopper.no_change == 0),
                  "_no_gain": no_gain(result.history, self.initial_score, validating),
                  "_separation": separation, "_separation_samples": len(picked)}
        if validating:
            fitted["validation_split_"] = cfg.validation_split
        if validating and cfg.early_stopping:
            fitted["best_iteration_"] = self.stopper.best_epoch
            fitted["best_validation_score_"] = self.stopper.best_value
        if kept_start:
            fitted["best_iteration_"], fitted["best_validation_score_"] = 0, self.initial_score
            fitted["_no_gain"] = (
                f"training did not beat the untrained network on the held-out validation set "
                f"(MAP@R {self.initial_score:.4f} before training, {self._final_score:.4f} "
                "after): the untrained network is returned (best_iteration_ = 0). Try a "
                "higher learning_rate, more epochs (max_iter) or another loss; check the "
                "labels.")
        return fitted

    def _keep_start(self, history, start_state):
        """Put the start back when the returned network scores below it on the hold-out.

        The returned network is the best epoch's with early stopping, the last one's
        without; the start is the network before training (for the default vector
        backbone: the input's leading principal axes).
        """
        scores = [r["validation_score"] for r in history if "validation_score" in r]
        if not scores or self.initial_score is None:
            return False
        self._final_score = max(scores) if self.config.early_stopping else scores[-1]
        if not self._final_score < self.initial_score:
            return False
        self.trainable.load_state_dict(start_state)
        return True


def _check_state_layout(saved_groups, current_groups, optimizer):
    """Refuse settings whose change alters what the optimiser's state holds (torch then fails
    at the first step with a KeyError): ``amsgrad`` (Adam's maximum of the second moments),
    ``centered`` (RMSprop's mean gradient), a momentum switched on or off (RMSprop's buffer;
    SGD makes its buffer when it finds none)."""
    for saved, group in zip(saved_groups, current_groups):
        changed = [key for key in ("amsgrad", "centered") if saved.get(key, False) !=
                   group.get(key, False)]
        if not isinstance(optimizer, torch.optim.SGD) and \
                (saved.get("momentum", 0) == 0) != (group.get("momentum", 0) == 0):
            changed.append("momentum")
        if changed:
            key = changed[0]
            raise ValueError(f"it was written with {key}={saved.get(key)}, this fit has "
                             f"{key}={group.get(key)} (the optimiser's state differs)")


def _watched(stopper_state):
    """The saved early-stopping state, with what it watched where a state saved before that
    was recorded can tell: the loss-plateau stopper is the one that records its first value
    (the validation stopper never does)."""
    if "monitor" in stopper_state or "first" not in stopper_state:
        return stopper_state
    loss = stopper_state["first"] is not None
    return {**stopper_state, "monitor": "metric_loss" if loss else "validation_score",
            "sign": -1.0 if loss else 1.0}


class _LastState(Callback):
    """Keeps the trainable's state at the end of training (before a stopper restores its best)."""

    state = None

    def on_train_end(self, loop):
        self.state = loop.trainable.state_dict()
