"""``DeepMetricTransformer``: deep metric learning as a scikit-learn transformer."""

from __future__ import annotations


import numpy as np
import torch
from sklearn.base import (BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin,
                          _fit_context)
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .._utils import (resolve_device, thread_limits, torch_fit_modes, torch_rng_scope,
                      torch_seed, transactional_fit, warn_user)
from .._training._distributed import shared_seed
from .._utils._params import NestedParamsMixin
from ..callbacks import CallbackStateMixin, UserCallbacks, check_callbacks
from ._config import (NESTED_PARAMS, PARAMETER_CONSTRAINTS,
                      EmbeddingConfig, LoaderConfig, check_loader_params, embedding_config,
                      loss_choices,
                      nested_keys, objective_config, regularizer_choices, resolve_config,
                      set_nested_option)
from ._plan import build_objective, validate_fit_input, validate_transform_input
from ._state import ModuleStateMixin, checkpoint_claim, inputs_digest, load_resume_state
from ._trainer import (SEPARATION_MIN, DeepTrainer, collapse_refits, embed_with,
                       separation_message)

__all__ = ["DeepMetricTransformer"]


def _fill_choices(cls):
    """The ``loss`` and ``regularizer`` names of the docstring, from the registry the
    validator uses (:data:`skdml.losses.LOSSES`, :data:`skdml.losses.REGULARIZERS`)."""
    cls.__doc__ = cls.__doc__.replace("{LOSS_CHOICES}", loss_choices()).replace(
        "{REGULARIZER_CHOICES}", regularizer_choices())
    return cls


def _run_name(refit):
    """What ``info.run`` calls a training of the fit: ``"fit"`` or its collapse refit."""
    if refit is None:
        return "fit"
    return "collapse refit (" + ", ".join(f"{k}={v!r}" for k, v in refit.items()) + ")"


@_fill_choices
class DeepMetricTransformer(ModuleStateMixin, CallbackStateMixin, NestedParamsMixin,
                            ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Deep metric learning with any torch backbone, as a scikit-learn transformer.

    A backbone (an ``nn.Module``) followed by a linear embedding head and an
    optional L2 normalisation is trained with a metric loss from
    :mod:`skdml.losses` (plus optional EC or JRS regularisation, plus any
    auxiliary losses returned by the backbone) on class-balanced batches of
    ``n_classes_per_batch`` x ``n_samples_per_class`` samples, by the same
    training loop as the linear learners. ``transform`` returns the embeddings
    as float32 numpy arrays, so the estimator drops into a ``Pipeline`` before
    ``KNeighborsClassifier`` and into ``GridSearchCV``.

    The grouped options are nested parameters, as in skorch:
    ``set_params(optimizer__weight_decay=0.1)``, ``loader__num_workers=2``,
    ``loss__margin=0.2`` (with a named loss) and ``regularizer__log=False``
    (with a regulariser) set one key, so ``GridSearchCV`` searches them like
    any parameter; an unknown key raises at ``set_params``, naming the valid
    ones. They are stored in ``optimizer_params``, ``loader_params``,
    ``loss_params`` and ``regularizer`` (a regulariser named by a string
    becomes an instance with that option).

    Read more in the :doc:`User Guide </deep>`.

    Parameters
    ----------
    backbone : torch.nn.Module, callable or None, default=None
        The network. An ``nn.Module`` instance is deep-copied at each ``fit`` (so
        clones and refits start from the same weights). A callable is called as
        ``backbone(input_shape)`` with the shape of one sample (``(d,)`` or
        ``(C, H, W)``) and must return an ``nn.Module``, which is deep-copied
        too (a builder that returns a module it keeps cannot make two fits
        share weights). ``None`` uses an MLP for
        vectors and the 4-block ConvNet for images (see
        :mod:`skdml.deep.backbones`); wrap a pretrained network in
        :class:`~skdml.deep.backbones.FeatureExtractor`.
        Its output is flattened; its width is found by a dry forward pass,
        which also checks the output contract. A backbone may return
        ``(features, aux)`` where ``aux`` is a scalar tensor or a dict of
        scalar tensors: these auxiliary losses are added to the objective and
        logged in ``history_`` (as ``"aux"`` or ``"aux_<key>"``).
    n_components : int, default=128
        Dimension of the embedding (output of the linear head).
    normalize : bool, default=True
        L2-normalise the embeddings.
    loss : {LOSS_CHOICES} or \
callable, default="auto"
        Metric loss, resolved by :func:`skdml.losses.build_loss` (the names
        are those of ``skdml.losses.LOSSES``). ``"auto"``:
        the multi-similarity loss with its pair mining, which trains well from
        scratch (images, ``Dataset`` inputs, your backbone; see the user
        guide's study), and the binomial deviance loss, the linear learners'
        default, for vector arrays with the default backbone (it kept
        unseen-class Recall@1 at or above the raw features on every held-out
        vector split). When a multi-similarity fit of ``"auto"`` (of 10 epochs
        or more) leaves its training classes unseparated (a collapse: see the
        user guide's "A fit that does not learn"), it is refitted from the same
        start with the binomial loss, kept if that separates them, and then,
        for images with ``augment="auto"``, without augmentation
        (``collapse_refit_`` says which refit was kept; not with
        ``checkpoint_path``, whose file holds one fit). A callable
        ``loss(embeddings, labels) -> scalar tensor`` (e.g. a
        pytorch-metric-learning loss) is used as is (an ``nn.Module`` instance
        is deep-copied at fit); a class is instantiated with ``loss_params``.
        For ``"amsoftmax"`` (or a class taking them), ``n_classes`` and
        ``embedding_dim`` are filled in from the fit.
    loss_params : dict, default=None
        Keyword arguments of the loss (a name other than ``"auto"``, or a class);
        one key at a time: ``set_params(loss__margin=0.2)``.
    regularizer : {REGULARIZER_CHOICES}, regulariser instance, callable or None, default=None
        ``"ec"``: Energy Confusion; as in the ECAML paper its gradient only
        reaches the embedding layer (the backbone features are detached for
        this term). ``"jrs"``: Joint Representation Similarity on
        ``[backbone output, embeddings, class level]``, where the class level
        are the class cosines of a proxy loss such as AM-Softmax. Both see the
        representation the loss works on and are averaged as in
        :class:`~skdml.ECAML` and :class:`~skdml.JRD`, so a weight means the
        same in the linear and the deep learners. An instance carries its own
        options, e.g. ``EnergyConfusion(log=False)`` or
        ``JRSRegularizer(layers=["blocks.2"])`` (sub-modules of the backbone
        joining the joint representation, captured with forward hooks during
        ``fit``); a callable is applied as ``regularizer(embeddings, labels)``.
        ``set_params(regularizer__log=False)`` builds the named (or the
        instance's) regulariser with that option.
    regularizer_weight : float, default=0.0
        Weight of the regulariser (0 leaves it out: a regulariser set at the
        default weight 0 warns, as does a weight without a regulariser); the
        same name and meaning as in :class:`~skdml.ECAML` and
        :class:`~skdml.JRD`, whose defaults are positive.
    preserve_input : float or "auto", default="auto"
        Weight of :class:`~skdml.losses.DistancePreservation` between each
        training batch's embeddings and the network's (standardised) input: it
        keeps the embedding's pairwise distances proportional to the input's
        where the labels do not say otherwise, which is what unseen classes
        need when the training data hold few classes. ``"auto"`` is
        ``50 / n_training_classes`` for the default backbone (10 with five
        classes, about 0.37 with Omniglot's 136) and 0 for a backbone you pass
        (a pretrained one has better features than its pixels). 0 disables
        it. See the user guide's study.
    optimizer : {"adam", "adamw", "sgd"} or torch.optim.Optimizer class, default="adam"
        ``"sgd"`` uses momentum 0.9.
    learning_rate : float, default=1e-3
        Peak learning rate of the backbone (see ``lr_schedule`` in
        ``optimizer_params``). For a pretrained backbone, fine-tune with a
        smaller one (e.g. 1e-4).
    optimizer_params : dict, default=None
        How the optimiser runs, beyond ``learning_rate``; the keys you give
        override these defaults:

        - ``"weight_decay"`` (1e-4);
        - ``"head_lr_mult"`` (1.0): the embedding head and the loss's own
          parameters (e.g. AM-Softmax proxies) use ``learning_rate *
          head_lr_mult`` (the papers fine-tune a pretrained network with 10);
        - ``"param_groups"`` (None): skorch-style groups,
          ``[("backbone.blocks.0.*", {"lr": 0.0})]``, matched against
          ``backbone.<...>``, ``head.<...>`` and ``loss.<...>``; the first
          matching pattern's options override the parameter's defaults;
        - ``"lr_schedule"`` (``"warmup_stable_decay"``): a linear warm-up
          over the first epoch (at most 10% of the steps), ``learning_rate``
          held, then a ``1 - sqrt`` decay to 0 over the last 20% of the steps
          before ``max_iter`` (0 reached at ``max_iter``, after the last step: a
          run of fewer than 10 steps keeps the full rate; one ``LambdaLR`` step
          per batch; a fit that
          early stopping ends sooner trained at the full rate throughout);
          ``"cosine"`` decays from the warm-up on (the earlier default);
          ``"constant"`` keeps ``learning_rate``, so reaching ``max_iter``
          while still improving (the last epoch improved by more than ``tol``,
          once learning started) is a ``ConvergenceWarning``;
        - ``"ema_epochs"`` (5.0): the fitted network is an exponential moving
          average of the weights and batch-norm statistics with a horizon of
          this many epochs (validation scores the average too); ``None`` or 0
          keeps the last weights;
        - any other key the torch optimiser takes (e.g. ``"betas"``,
          ``"momentum"``) goes to it; others are refused.

        One key at a time: ``set_params(optimizer__weight_decay=0.1)``.
    max_iter : int or "auto", default="auto"
        Most epochs (at least 1), counted over resumed runs too (``warm_start``).
        ``"auto"``: 30 for vector arrays with the default backbone, whose
        embedding starts from the input's principal components, 90 otherwise
        (images, ``Dataset`` inputs, your backbone; see the user guide).
    tol : float, default=1e-4
        Minimum improvement of the monitored value (validation score with
        early stopping, else the epoch's mean metric loss, ``metric_loss`` in
        ``history_``, without the regulariser and auxiliary terms).
    n_classes_per_batch : int or "auto", default="auto"
        P, classes per batch (capped at the number of training classes, as in
        ECAML and JRD). ``"auto"`` uses ``min(16, n_training_classes)``.
    n_samples_per_class : int or "auto", default="auto"
        K, samples per class per batch (with replacement for smaller classes;
        never more than the largest class holds). ``"auto"`` gives batches of
        about 64: ``max(4, 64 // P)``.
    early_stopping : bool or "auto", default="auto"
        Hold out a validation set (``validation_fraction``), stop when its
        MAP@R (:func:`skdml.metrics.map_at_r`; Recall@1 saturates on a small
        held-out set) has not improved by more than ``tol`` for
        ``n_iter_no_change`` epochs, and restore the best weights. ``"auto"``:
        on when ``validation_fraction`` is given and there are 10+ classes; so
        by default every class trains for the whole schedule (see the user
        guide), stopping when the epoch loss stops improving.
    validation_fraction : float, default=None
        Fraction held out for validation, drawn as by every skdml learner
        (see the :doc:`user guide </deep>`): whole classes from 5
        classes up (what zero-shot retrieval needs), samples of each class
        below, always leaving 2 training samples of each class (so a large
        fraction of few samples holds out less). ``None``: no validation set
        unless ``early_stopping=True``, which then holds out 0.2 of the
        classes, and never fewer than 2 (from 5 to 7 classes, 2 of them), or 0.1
        of each class. The score is logged in ``history_``.
    n_iter_no_change : int, default=10
        Epochs without an improvement larger than ``tol`` before stopping.
    checkpoint_path : str or path-like, default=None
        Where to write (atomically, with a SHA-256 digest) a checkpoint at the
        end of every epoch: model, weight average, loss, optimiser, grad scaler,
        RNG and early stopping states, epoch, history and the validation split;
        an skdml file (a header, a digest, then a payload that skdml reads
        with ``torch.load(weights_only=True)``: tensors and plain containers,
        never code), read by ``warm_start``, not by ``torch.load`` itself.
        Checked writable and locked before training; a failed write warns and
        training goes on. A fit without ``warm_start`` refuses to overwrite an
        existing file. One file holds one fit: leave it unset in
        ``GridSearchCV`` and ``cross_validate``.
    warm_start : bool, default=False
        Resume from ``checkpoint_path`` if it exists (unless the fitted model
        continues its run further), else from the fitted model; the current
        ``learning_rate`` and optimiser settings (``weight_decay``, ``betas``,
        ...) apply to the resumed optimiser. Another ``optimizer`` or
        ``early_stopping`` than the saved run's is refused, and so is a change
        of what the optimiser's state holds (``amsgrad``, ``centered``, a
        momentum switched on or off). The data must be the run's: the same
        number of samples, labels in the same order and, for arrays, the same
        values (a SHA-256 of their float32 bytes is saved with the state).
    standardize : bool or "auto", default="auto"
        Learn the mean and scale of each channel (images) or feature
        (vectors) in ``fit`` and standardise every input with them, in
        training and in ``transform`` (the first layer of ``module_``): the
        embedding does not depend on a uniform scale of ``X``. Vectors with
        the default backbone share one scale when their features share a unit
        (no spread above 100 times the median one), so that their geometry is
        kept, and are turned to their principal axes (see the user guide); a
        feature far below the median spread keeps the common scale, so
        standardise tabular data with such a feature first.
        ``"auto"``: on, unless the backbone normalises its own input (a
        :class:`~skdml.deep.backbones.FeatureExtractor` with ``mean``).
    augment : bool, "auto" or callable, default="auto"
        Training-time augmentation of image batches. ``"auto"`` and ``True``:
        a light random affine transform (rotation up to 10 degrees, shifts up
        to 10%, scaling by up to 10%; :class:`~skdml.deep.RandomAffine`) for
        images, nothing for vectors. A callable ``augment(x) -> x`` receives
        each training batch (a tensor on the device, before standardisation).
        With ``"auto"``, a fit that collapses (see ``loss``) may be refitted
        without augmentation.
    device : str, torch.device or None, default="auto"
        ``"auto"`` (or ``None``, as in the scorers) uses CUDA when available.
    amp : {"bf16", "fp16"}, False or None, default=False
        Automatic mixed precision (``None``: as ``False``). ``"fp16"`` also uses
        a ``GradScaler``. Losses are always computed in float32. ``transform``
        uses the setting of the last ``fit``.
    loader_params : dict, default=None
        How batches are read; the keys you give override these defaults:
        ``"batches_per_epoch"`` (None: ``ceil(n_train / (P * K))``),
        ``"num_workers"`` (0: DataLoader workers), ``"pin_memory"``
        (``"auto"``: when the device is CUDA) and ``"transform_batch_size"``
        (256: the batch size of ``transform`` and of the validation pass).
        One key at a time: ``set_params(loader__num_workers=2)``. ``transform``
        uses the settings of the last ``fit``.
    random_state : int, RandomState instance or None, default=None
        Seeds the batch plan, the validation split and torch (initialisation,
        dropout), inside ``fit``; the global torch RNG is left untouched.
    verbose : int, default=0
        ``1`` shows a progress bar with an ETA and a table row per epoch.
    callbacks : list of skdml.callbacks.Callback, default=None
        Called at the start, after every step, after every epoch and at the end
        of training; a callback can log (e.g. to TensorBoard) or stop training
        (``info.stop()``). See :mod:`skdml.callbacks`. They act during ``fit``
        only; a pickled model keeps them (saved by value, see
        :mod:`skdml.callbacks`).

    Attributes
    ----------
    module_ : EmbeddingNet
        The trained network (backbone + head), on ``device_``, in eval mode.
    loss_ : callable
        The fitted loss (holds e.g. the AM-Softmax proxies).
    collapse_refit_ : dict or None
        The ``"auto"`` settings changed by the refit that was kept after the
        first fit collapsed (``{"loss": "binomial"}`` or ``{"augment": False}``),
        or ``None`` when the first fit was kept.
    classes_ : ndarray
        Training labels.
    input_shape_ : tuple
        Shape of one input sample as fed to the network.
    n_components_ : int
        Dimension of the fitted embedding (``transform``'s columns).
    history_ : list of dict
        One dict per epoch: ``epoch``, ``learning_rate`` (the optimiser's rate
        at the end of the epoch, before the callbacks' ``on_epoch_end``: with a
        decaying schedule, the rate of the next step), ``loss`` (total
        objective), ``metric_loss``, ``regularizer`` (with a regulariser),
        ``preserve_input`` and other auxiliary losses,
        ``validation_score`` (MAP@R of the held-out set, when validating),
        ``seconds`` (wall time, the only non-deterministic entry).
    n_iter_ : int
        Epochs run (in total, including resumed ones).
    best_iteration_ : int
        The epoch whose weights were restored (with early stopping).
    best_validation_score_ : float
        Its validation MAP@R (with early stopping).
    validation_split_ : {"class_disjoint", "stratified"}
        How the validation set was drawn (only with one; the rule every
        learner uses: whole classes from 5 classes up).
    device_ : torch.device
        Device of ``module_``.
    n_features_in_ : int
        ``X.shape[1]`` of the training input: its columns for ``(n, d)`` vectors, its
        channels for ``(n, C, H, W)`` images, its height for ``(n, H, W)`` grey
        images (``input_shape_`` holds the whole sample shape).

    See Also
    --------
    skdml.ECAML, skdml.JRD : linear learners with the same losses and regularisers.

    Examples
    --------
    >>> import numpy as np
    >>> from skdml import DeepMetricTransformer
    >>> rng = np.random.RandomState(0)
    >>> y = np.repeat(np.arange(4), 10)
    >>> X = rng.randn(40, 6) + 3 * y[:, None]
    >>> net = DeepMetricTransformer(n_components=3, max_iter=2, device="cpu",
    ...                             random_state=0)
    >>> Z = net.fit(X, y).transform(X)
    >>> Z.shape, Z.dtype, len(net.history_)
    ((40, 3), dtype('float32'), 2)
    """

    _parameter_constraints = PARAMETER_CONSTRAINTS  # skdml/deep/_config.py
    _nested_params = NESTED_PARAMS

    def __init__(self, backbone=None, *, n_components=128, normalize=True, loss="auto",
                 loss_params=None, regularizer=None, regularizer_weight=0.0,
                 preserve_input="auto", optimizer="adam", learning_rate=1e-3,
                 optimizer_params=None, max_iter="auto", tol=1e-4, n_classes_per_batch="auto",
                 n_samples_per_class="auto", early_stopping="auto", validation_fraction=None,
                 n_iter_no_change=10, checkpoint_path=None, warm_start=False,
                 standardize="auto", augment="auto", device="auto", amp=False,
                 loader_params=None, random_state=None, verbose=0, callbacks=None):
        self.backbone = backbone
        self.n_components = n_components
        self.normalize = normalize
        self.loss = loss
        self.loss_params = loss_params
        self.regularizer = regularizer
        self.regularizer_weight = regularizer_weight
        self.preserve_input = preserve_input
        self.optimizer = optimizer
        self.learning_rate = learning_rate
        self.optimizer_params = optimizer_params
        self.max_iter = max_iter
        self.tol = tol
        self.n_classes_per_batch = n_classes_per_batch
        self.n_samples_per_class = n_samples_per_class
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.checkpoint_path = checkpoint_path
        self.warm_start = warm_start
        self.standardize = standardize
        self.augment = augment
        self.device = device
        self.amp = amp
        self.loader_params = loader_params
        self.random_state = random_state
        self.verbose = verbose
        self.callbacks = callbacks

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        tags.input_tags.allow_nan = False
        tags.transformer_tags.preserves_dtype = ["float32"]  # embeddings are always float32
        tags.input_tags.three_d_array = True  # (n, H, W) grey images
        return tags

    @property
    def _n_features_out(self):
        return self.n_components_  # fitted: get_feature_names_out matches transform

    def __setstate__(self, state):
        super().__setstate__(state)
        if "module_" in self.__dict__ and "_embedding" not in self.__dict__:
            # a model pickled by an earlier skdml kept no fitted transform settings
            head = self.module_.head  # an identity head: the backbone's width
            self.n_components_ = int(getattr(head, "out_features", self.module_.in_features))
            self._embedding = EmbeddingConfig(
                LoaderConfig.of(check_loader_params(self.loader_params), self.device_),
                self.amp, self.n_components_)

    def _nested_keys(self, prefix):
        return nested_keys(self, prefix)

    def _set_nested_option(self, prefix, key, value):
        set_nested_option(self, prefix, key, value)

    def _build_objective(self, n_classes):
        """The :class:`~skdml.losses.MetricObjective` (same wiring as ECAML and JRD)."""
        return build_objective(objective_config(self), n_classes)

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    @transactional_fit
    @torch_fit_modes()
    def fit(self, X, y=None):
        """Train the network on ``X`` (arrays or a torch ``Dataset``) with labels ``y``.

        A fit that does not finish (an error, a non-finite loss, Ctrl-C)
        leaves the estimator as it was before the call; with
        ``checkpoint_path``, the last complete epoch can be resumed with
        ``warm_start=True``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features), (n_samples, H, W), \
(n_samples, C, H, W) or torch.utils.data.Dataset
            Training inputs. A ``Dataset`` yields ``x`` or ``(x, label)``; its labels
            come from ``y`` if given, else its ``targets`` attribute, else one pass
            over it.
        y : array-like of shape (n_samples,)
            Class labels (required for arrays).

        Returns
        -------
        self : DeepMetricTransformer
            The fitted estimator.
        """
        source, y, input_shape = validate_fit_input(self, X, y)
        classes, y_enc = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(f"Metric learning needs at least 2 classes; the labels hold "
                             f"{len(classes)} class (1 class).")
        device = resolve_device(self.device)
        rng = check_random_state(self.random_state)
        if rng is np.random.mtrand._rand:  # None: one draw of numpy's global generator seeds
            # the fit's own, which refits rewind and a resumed run sets (never the global one);
            # the ranks of a data-parallel job take rank 0's (one global batch plan)
            rng = np.random.RandomState(shared_seed(rng.randint(np.iinfo(np.int32).max),
                                                    device))
        # the checkpoint is checked writable and locked before any training; the state to
        # resume from fixes the validation split, so it is read before the configuration
        with checkpoint_claim(self.checkpoint_path):
            inputs = inputs_digest(source)  # saved with the run's states, checked on resume
            resume = load_resume_state(self.checkpoint_path, self.warm_start,
                                       getattr(self, "_resume_state", None), classes,
                                       input_shape, y_enc, inputs)
            seed = torch_seed(rng)
            fork_devices = [device.index or 0] if device.type == "cuda" else []
            rng_state = rng.get_state()

            def train(refit=None):
                rng.set_state(rng_state)  # a refit draws the same split and batches
                with torch_rng_scope(fork_devices):
                    torch.manual_seed(seed)  # the backbone's initial weights, dropout...
                    config = resolve_config(self, y_enc=y_enc, input_shape=input_shape,
                                            in_memory=isinstance(source, torch.Tensor),
                                            device=device, rng=rng, resume=resume,
                                            refit=refit)
                    if resume is not None and resume.epoch > config.max_iter:  # "auto" known
                        raise ValueError(
                            f"warm_start: the run to resume has trained {resume.epoch} epochs "
                            f"and max_iter={self.max_iter} ({config.max_iter} epochs) counts "
                            "every epoch of the run, resumed ones too; raise max_iter to train "
                            "further.")
                    objective = build_objective(config.objective, len(classes))
                    trainer = DeepTrainer(config, objective, source, y_enc, classes,
                                          input_shape, rng,
                                          [UserCallbacks(self, check_callbacks(self.callbacks),
                                                         _run_name(refit))],
                                          inputs_digest=inputs)
                    return config, trainer.fit(resume)

            # a resumed collapse refit keeps the settings it was refitted with
            kept = None if resume is None or resume.refit is None else dict(resume.refit)
            config, fitted = train(kept)
            # the fit left the training classes unseparated (collapsed): refit from the same
            # start with its "auto" settings changed, one at a time; keep the first refit
            # that separates them (COLLAPSE_REFITS)
            tried = []
            for refit in collapse_refits(config, resume, fitted):
                tried.append(refit)
                config_r, fitted_r = train(refit)
                if not fitted_r["_separation"][0] < SEPARATION_MIN:
                    config, fitted, kept = config_r, fitted_r, refit
                    break
        fitted["n_components_"] = config.n_components
        fitted["collapse_refit_"] = None if kept is None else dict(kept)
        fitted["_embedding"] = embedding_config(config)
        # only a finished fit changes the estimator
        converged = fitted.pop("_converged")
        stalled = fitted.pop("_no_gain")
        degenerate = separation_message(fitted.pop("_separation"),
                                        fitted.pop("_separation_samples"), fitted["n_iter_"],
                                        tried if kept is None else ())
        for stale in ("best_iteration_", "best_validation_score_", "validation_split_"):
            self.__dict__.pop(stale, None)
        for key, value in fitted.items():
            setattr(self, key, value)
        if not converged:
            warn_user(
                f"{type(self).__name__} reached max_iter={config.max_iter} ({self.n_iter_} epochs) "
                f"while still improving (by more than tol={config.tol}); increase max_iter for a more "
                "converged model.", ConvergenceWarning)
        if stalled:
            warn_user(f"{type(self).__name__}: {stalled}", UserWarning)
        if degenerate:
            warn_user(f"{type(self).__name__}: {degenerate}", UserWarning)
        return self

    # ------------------------------------------------------------------ transform
    def transform(self, X):
        """Embed ``X`` in batches, in eval mode, without gradients.

        Parameters
        ----------
        X : array-like of the fitted sample shape, or torch.utils.data.Dataset
            A ``Dataset`` may yield ``x`` or ``(x, y)``; its items must be finite.

        Returns
        -------
        Z : ndarray of shape (n_samples, n_components), dtype float32
            The embeddings.
        """
        check_is_fitted(self, "module_")
        source = validate_transform_input(self, X)
        settings = self._embedding  # fixed at fit: set_params does not change a fitted model
        with thread_limits(), torch_rng_scope():  # DataLoader draws a seed from torch's RNG
            return embed_with(self.module_, source, np.arange(len(source)),
                              loader=settings.loader.on(self.device_),
                              n_components=settings.n_components,
                              device=self.device_, input_shape=self.input_shape_,
                              amp=settings.amp)
