"""DeML ready to fit: the backbone builder, the preset estimator, the learners' similarity."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from torch import nn

from ..._utils._params import check_params, positive_int
from ...losses import DecoupledLoss
from .._estimator import DeepMetricTransformer
from ..backbones import SmallCNN, SmallResNet
from ._network import DeML

__all__ = ["DeMLBuilder", "learner_similarity", "make_deml"]

_BACKBONES = {"small_cnn": (SmallCNN, (32, 64, 128)), "small_resnet": (SmallResNet,
                                                                      (64, 128, 256, 512))}


class DeMLBuilder:
    """Builds a :class:`DeML` for the input shape of a fit (a picklable backbone builder).

    :class:`~skdml.DeepMetricTransformer` calls a callable backbone with the
    shape of one sample, so the number of channels comes from the data.

    Parameters
    ----------
    backbone : {"small_cnn", "small_resnet"}, nn.Module or callable, default="small_cnn"
        The CNN to split: skdml's :class:`~skdml.deep.SmallCNN` or
        :class:`~skdml.deep.SmallResNet` (with ``widths``), a module
        (``SmallCNN``, ``SmallResNet`` or ``nn.Sequential``; deep-copied), or
        a callable ``backbone(input_shape)`` returning one.
    widths : tuple of int, default=None
        Stage widths of the named backbones (their defaults when ``None``).
    split : str, default=None
        FNet's last stage (see :func:`~skdml.deep.deml.split_backbone`).
    **params
        The other parameters of :class:`DeML` (``n_scales``, ``n_cams``,
        ``n_components``, ...).

    Examples
    --------
    >>> builder = DeMLBuilder("small_cnn", widths=(4, 8, 8), n_scales=1, n_cams=2,
    ...                       n_components=8)
    >>> builder((1, 16, 16)).embedding_dim
    8
    """

    def __init__(self, backbone="small_cnn", *, widths=None, split=None, **params):
        if isinstance(backbone, str) and backbone not in _BACKBONES:
            raise ValueError(f"backbone={backbone!r}: valid names are {sorted(_BACKBONES)} (or "
                             "pass a module or a builder).")
        self.backbone, self.widths, self.split, self.params = backbone, widths, split, params

    def __call__(self, input_shape):
        input_shape = tuple(input_shape)
        if len(input_shape) != 3:
            raise ValueError(f"DeML needs images (n, C, H, W); the samples have shape "
                             f"{input_shape}.")
        if isinstance(self.backbone, str):
            cls, widths = _BACKBONES[self.backbone]
            net = cls(input_shape[0], widths=tuple(self.widths or widths))
        elif isinstance(self.backbone, nn.Module):
            net = self.backbone
        else:
            net = self.backbone(input_shape)
        return DeML.from_backbone(net, input_shape, split=self.split, **self.params)

    def __repr__(self):
        args = [repr(self.backbone) if isinstance(self.backbone, str)
                else type(self.backbone).__name__]
        args += [f"{k}={v!r}" for k, v in (("widths", self.widths), ("split", self.split))
                 if v is not None]
        args += [f"{k}={v!r}" for k, v in self.params.items()]
        return f"DeMLBuilder({', '.join(args)})"


def make_deml(n_scales=2, n_cams=2, *, n_components=128, backbone="small_cnn", widths=None,
              split=None, deml_params=None, **estimator_params):
    """A :class:`~skdml.DeepMetricTransformer` training DeML(I, J) as in the paper.

    The estimator's backbone is a ``DeMLBuilder`` (a picklable builder of
    :class:`~skdml.deep.DeML` for the fit's input shape), its loss
    :class:`~skdml.losses.DecoupledLoss` (Eq. 5 over the I x J learners), and
    its ``n_components`` the width DeML gives (``I * J * (n_components // (I
    * J))``, the paper's floor). The learners take ``learning_rate *
    optimizer_params["head_lr_mult"]`` (10x by default, as in the paper). ``transform`` returns
    the concatenated, L2-normalised learner outputs (scaled to unit norm
    overall, which leaves cosine and Euclidean rankings unchanged). The
    learners' 10x rate is set here (``head_lr_mult=10``), not inherited from
    the estimator's defaults.

    Parameters
    ----------
    n_scales : int, default=2
        I, object-attention scales.
    n_cams : int, default=2
        J, channel-attention learners per scale.
    n_components : int, default=128
        Embedding size d.
    backbone : {"small_cnn", "small_resnet"}, nn.Module or callable, default="small_cnn"
        The CNN to split: skdml's :class:`~skdml.deep.SmallCNN` or
        :class:`~skdml.deep.SmallResNet` (with ``widths``), a module, or a
        callable ``backbone(input_shape)`` returning one.
    widths : tuple of int, default=None
        Stage widths of the named backbones (their defaults when ``None``).
    split : str, default=None
        FNet's last stage (see :func:`~skdml.deep.deml.split_backbone`).
    deml_params : dict, default=None
        Other parameters of :class:`DeML` (``adversary_weight``,
        ``activation_decay``, ``crop_min_size``...).
    **estimator_params
        Parameters of :class:`~skdml.DeepMetricTransformer` (``max_iter``,
        ``learning_rate``, ``random_state``...); ``loss``, ``augment`` and the
        ``optimizer_params`` keys ``head_lr_mult`` and ``lr_schedule`` override
        the preset's (:class:`~skdml.losses.DecoupledLoss`, ``False``, 10,
        ``"constant"``: the paper trains without random-affine augmentation and
        at a constant rate).

    Returns
    -------
    estimator : DeepMetricTransformer

    Examples
    --------
    >>> import numpy as np
    >>> from skdml.deep import make_deml
    >>> rng = np.random.RandomState(0)
    >>> X, y = rng.rand(24, 1, 12, 12).astype(np.float32), np.repeat(np.arange(3), 8)
    >>> est = make_deml(2, 2, n_components=8, widths=(4, 8, 8), max_iter=1, device="cpu",
    ...                 random_state=0)
    >>> est.fit(X, y).transform(X).shape
    (24, 8)
    >>> sorted(k for k in est.history_[0] if k.startswith("aux"))
    ['aux_act', 'aux_adv', 'aux_ntri']
    """
    check_params("make_deml", {name: [positive_int()] for name in
                               ("n_scales", "n_cams", "n_components")},
                 {"n_scales": n_scales, "n_cams": n_cams, "n_components": n_components})
    if deml_params is not None and not isinstance(deml_params, Mapping):
        raise ValueError(f"make_deml: deml_params must be a dict of DeMLBuilder options or "
                         f"None; got {type(deml_params).__name__}.")
    learners = int(n_scales) * int(n_cams)
    if learners > n_components:
        raise ValueError(f"n_components={n_components} is smaller than the number of learners "
                         f"n_scales * n_cams = {learners}: every learner needs a dimension.")
    dim = (int(n_components) // learners) * learners
    builder = DeMLBuilder(backbone, widths=widths, split=split, n_scales=n_scales,
                          n_cams=n_cams, n_components=dim, **(deml_params or {}))
    estimator_params.setdefault("loss", DecoupledLoss(learners))
    # the paper's training: 10x the rate for the learners, no random-affine augmentation
    # (DeML's attention crops are its own zoom) and a constant learning rate; all overridable
    estimator_params.setdefault("augment", False)
    estimator_params["optimizer_params"] = {"head_lr_mult": 10.0, "lr_schedule": "constant",
                                            **(estimator_params.get("optimizer_params") or {})}
    return DeepMetricTransformer(backbone=builder, n_components=dim, **estimator_params)


def learner_similarity(embeddings, n_scales, n_cams):
    """The mean cosine similarity between the CA learners of a scale (DeML Table 4's 'sim').

    Parameters
    ----------
    embeddings : array-like of shape (n_samples, n_scales * n_cams * k)
        DeML embeddings (``transform``'s output): the learners' parts in order.
    n_scales, n_cams : int
        I and J.

    Returns
    -------
    sim : float
        The mean, over samples, scales and pairs ``j != j'`` of learners of a
        scale, of the cosine between the two learners' outputs (NaN when J = 1).

    Examples
    --------
    >>> import numpy as np
    >>> learner_similarity(np.array([[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0]]), 1, 2)
    0.5
    """
    for name, value in (("n_scales", n_scales), ("n_cams", n_cams)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    Z = np.asarray(embeddings, dtype=np.float64)
    if n_cams < 2:
        return float("nan")
    if Z.ndim != 2 or Z.shape[1] % (n_scales * n_cams):
        raise ValueError(f"embeddings of shape {Z.shape} do not split into n_scales * n_cams = "
                         f"{n_scales * n_cams} equal parts.")
    parts = Z.reshape(len(Z), n_scales, n_cams, -1)
    parts = parts / np.maximum(np.linalg.norm(parts, axis=-1, keepdims=True), 1e-12)
    cos = np.einsum("nijk,nilk->nijl", parts, parts)
    off = ~np.eye(n_cams, dtype=bool)
    return float(cos[..., off].mean())
