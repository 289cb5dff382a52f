"""The DeML network: I scales of (FNet, J CAMs, shared GNet, J learners, adversary)."""

from __future__ import annotations

import copy
from numbers import Integral

import torch
import torch.nn.functional as F
from torch import nn

from .._hooks import LayerCapture
from ..backbones import SmallCNN, SmallResNet
from ._attention import _random_walk, attention_boxes, crop_and_zoom, resize_attention
from ._parts import (Adversary, ChannelAttention, StackedLinear, activation_decay,
                     adversarial_discrepancy, anti_trivial_penalty, grad_reverse)

__all__ = ["DeML", "backbone_stages", "split_backbone"]


def backbone_stages(backbone):
    """The ``(name, module)`` stages of a backbone in forward order, without its global pooling.

    :class:`~skdml.deep.SmallCNN`: ``blocks.0``, ``blocks.1``...;
    :class:`~skdml.deep.SmallResNet`: ``stem``, ``stages.0``...; an
    ``nn.Sequential``: its children.
    """
    if isinstance(backbone, SmallCNN):
        return [(f"blocks.{i}", m) for i, m in enumerate(backbone.blocks)]
    if isinstance(backbone, SmallResNet):
        return [("stem", backbone.stem)] + [(f"stages.{i}", m)
                                            for i, m in enumerate(backbone.stages)]
    if isinstance(backbone, nn.Sequential):
        return list(backbone.named_children())
    raise TypeError(
        f"Cannot split a {type(backbone).__name__} into FNet and GNet: DeML.from_backbone "
        "knows SmallCNN, SmallResNet and nn.Sequential. Build DeML(fnet, gnet, ...) directly "
        "for another network.")


def split_backbone(backbone, split=None):
    """Split a backbone after the stage named ``split`` into ``(fnet, gnet)`` (deep copies).

    ``split=None`` puts the first ``ceil(n / 2)`` of the ``n`` stages in FNet
    (SmallCNN's three stages: ``"blocks.1"``; SmallResNet: ``"stages.1"``),
    as the paper cuts GoogLeNet after pool3.

    Examples
    --------
    >>> from skdml.deep import SmallCNN
    >>> fnet, gnet = split_backbone(SmallCNN(1, widths=(4, 8, 16)))
    >>> len(fnet), len(gnet)
    (2, 1)
    """
    stages = backbone_stages(backbone)
    names = [name for name, _ in stages]
    if len(stages) < 2:
        raise ValueError(f"The backbone has {len(stages)} stage(s) ({names}); DeML needs at "
                         "least two, one for FNet and one for GNet.")
    if split is None:
        cut = (len(stages) + 1) // 2
    elif split not in names:
        raise ValueError(f"split={split!r} is not a stage of the backbone; valid names are "
                         f"{names[:-1]} (GNet keeps the stages after it).")
    else:
        cut = names.index(split) + 1
    if cut >= len(stages):
        raise ValueError(f"split={split!r} leaves GNet empty; valid names are {names[:-1]}.")
    fnet = nn.Sequential(*[copy.deepcopy(m) for _, m in stages[:cut]])
    gnet = nn.Sequential(*[copy.deepcopy(m) for _, m in stages[cut:]])
    return fnet, gnet


class _Scale(nn.Module):
    """One scale: FNet, J CAMs, the shared GNet (one pass over the J branches), J learners."""

    def __init__(self, fnet, gnet, *, channels, features, n_cams, learner_dim, cam_hidden,
                 channel_attention, adversary, adversary_hidden):
        super().__init__()
        self.fnet, self.gnet = fnet, gnet
        self.cams = ChannelAttention(channels, n_cams, cam_hidden) if channel_attention else None
        self.learners = StackedLinear(n_cams, features, learner_dim)
        self.adversary = Adversary(learner_dim, adversary_hidden) if adversary else None

    def forward(self, x):
        """``(z, h)``: learner outputs (J, B, k) and their inputs (J, B, d1)."""
        u = self.fnet(x)
        caps = self.cams(u) if self.cams is not None else u[None]
        J, B = caps.shape[:2]
        g = self.gnet(caps.flatten(0, 1))
        h = (g.mean(dim=(2, 3)) if g.ndim == 4 else g.flatten(1)).view(J, B, -1)
        return self.learners(h), h


class DeML(nn.Module):
    r"""Hybrid-attention decoupled metric learning (Chen & Deng, CVPR 2019) as a backbone.

    DeML(I, J) runs a CNN, split into an early part (FNet) and a late part
    (GNet), at ``n_scales`` = I scales. At each scale, J channel-attention
    modules (CAMs) reweight FNet's response; each weighted copy goes through
    the scale's GNet (shared by the J branches) and its own CA learner, a
    linear layer of ``n_components // (I * J)`` dimensions. The next scale's
    input is the original image cropped around the region the parameter-free
    object-attention module (a random walk over GNet's responses,
    :func:`~skdml.deep.random_walk_attention`) attends to, and zoomed back to
    the input size. Each scale has its own copy of FNet and GNet.

    The output is the concatenation of the I x J L2-normalised learner
    outputs (order: scale, then CAM), the paper's evaluation embedding; in
    training mode the network also returns its auxiliary losses (logged as
    ``aux_adv``, ``aux_act`` and ``aux_ntri`` by
    :class:`~skdml.DeepMetricTransformer`): the adversarial discrepancy
    (Eq. 4, :math:`\lambda_0`), the activation decay and the anti-trivial term
    (Eq. 6, :math:`\lambda_1`, :math:`\lambda_2`). The metric loss over the
    learners (Eq. 5) is :class:`skdml.losses.DecoupledLoss`. DeML provides the
    final embedding, so :class:`~skdml.deep.EmbeddingNet` puts no head after
    it, and its learners take the head's learning rate (``optimizer_params["head_lr_mult"]``, the
    paper's 10x). :func:`~skdml.deep.make_deml` wires it all.

    Read more in the :doc:`User Guide </deml>`.

    Parameters
    ----------
    fnet, gnet : torch.nn.Module
        The two parts of the CNN (deep-copied for every scale). FNet must map
        images (B, C, H, W) to a 4-D map; GNet maps that to a 4-D map
        (average-pooled here) or to (B, d1) features.
    input_shape : tuple of int
        (C, H, W) of the images; used for a dry run that checks the parts.
    n_scales : int, default=2
        I, the object-attention scales (root learners).
    n_cams : int, default=2
        J, the channel-attention modules (sub-learners) per scale.
    n_components : int, default=128
        d, the size of the embedding: each learner has ``d // (I * J)``
        dimensions (the paper floors it), so the output has
        ``I * J * (d // (I * J))`` (``embedding_dim``).
    channel_attention : bool, default=True
        ``False`` drops the CAMs (and needs ``n_cams=1``): with
        ``n_scales=1`` this is the unified baseline Ud on the same network.
    cam_hidden : int, default=64
        Bottleneck width of the CAMs (the paper's 64).
    adversary_weight : float, default=1.0
        :math:`\lambda_0` of Eq. 4 (0 removes the adversary; it needs J >= 2).
    adversary_hidden : int, default=None
        Hidden width of the adversary network (default: the learner size).
    activation_decay : float, default=0.014
        :math:`\lambda_1` of Eq. 6.
    anti_trivial_weight : float, default=0.25
        :math:`\lambda_2` of Eq. 6.
    attention_layers : str or list of str, default=None
        Modules whose responses feed the object-attention module, named
        ``"fnet"``, ``"gnet"`` or ``"fnet.<name>"`` / ``"gnet.<name>"``
        (their sub-modules). A GNet layer's response is walked in each of
        the J branches, and the J attention maps are averaged. ``None``: the
        last two of GNet's children that return a 4-D map larger than 1x1
        (GNet itself if it has no children; FNet's output if none does), as
        the paper uses inception4e and inception5b.
    walk_steps : int, default=10
        Steps T of the random walk.
    crop_threshold : float, default=0.5
        Fraction of an attention map's range above its minimum that counts as
        attended (see :func:`~skdml.deep.deml.attention_boxes`).
    crop_min_size : int, default=8
        Smallest side of a crop in pixels of the input image; with
        ``n_scales > 1``, images smaller than this are refused.

    Attributes
    ----------
    scales : nn.ModuleList
        One module per scale with ``fnet``, ``gnet``, ``cams``, ``learners``
        (J stacked linear layers) and ``adversary``.
    learner_dim : int
        Dimensions of one learner.
    embedding_dim, out_features : int
        Width of the output, ``I * J * learner_dim``.

    Examples
    --------
    >>> import torch
    >>> from skdml.deep import DeML, SmallCNN
    >>> net = DeML.from_backbone(SmallCNN(1, widths=(4, 8, 8)), (1, 16, 16), n_scales=2,
    ...                          n_cams=2, n_components=16)
    >>> net.eval()(torch.randn(3, 1, 16, 16)).shape
    torch.Size([3, 16])
    >>> features, aux = net.train()(torch.randn(3, 1, 16, 16))
    >>> sorted(aux)
    ['act', 'adv', 'ntri']
    """

    #: :class:`~skdml.deep.EmbeddingNet` puts no head after a backbone that sets this.
    provides_embedding = True
    #: Parameters that take the head's learning rate (fnmatch patterns of parameter names).
    head_parameters = ("scales.*.learners.*",)

    def __init__(self, fnet, gnet, input_shape, *, n_scales=2, n_cams=2, n_components=128,
                 channel_attention=True, cam_hidden=64, adversary_weight=1.0,
                 adversary_hidden=None, activation_decay=0.014, anti_trivial_weight=0.25,
                 attention_layers=None, walk_steps=10, crop_threshold=0.5, crop_min_size=8):
        super().__init__()
        input_shape = tuple(int(s) for s in input_shape)
        # adversary_hidden (None: the default width): 0 made the adversary a constant (its
        # Eq. 4 term 0), 2.5 was cut to 2, -1 a torch error at fit
        for name, value, low in (("n_scales", n_scales, 1), ("n_cams", n_cams, 1),
                                 ("n_components", n_components, 1), ("cam_hidden", cam_hidden, 1),
                                 ("walk_steps", walk_steps, 0), ("crop_min_size", crop_min_size, 1),
                                 ("adversary_hidden", adversary_hidden, 1)):
            if value is None and name == "adversary_hidden":
                continue
            if not isinstance(value, Integral) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}.")
        for name, value in (("adversary_weight", adversary_weight),
                            ("activation_decay", activation_decay),
                            ("anti_trivial_weight", anti_trivial_weight)):
            if not 0 <= float(value) < float("inf"):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}.")
        if not 0.0 <= float(crop_threshold) <= 1.0:
            raise ValueError(f"crop_threshold must be in [0, 1], got {crop_threshold!r}.")
        if len(input_shape) != 3:
            raise ValueError(f"input_shape must be (C, H, W) of an image, got {input_shape}.")
        if n_scales * n_cams > n_components:
            raise ValueError(
                f"n_components={n_components} is smaller than the number of learners "
                f"n_scales * n_cams = {n_scales * n_cams}: every learner needs a dimension.")
        if not channel_attention and n_cams > 1:
            raise ValueError(f"n_cams={n_cams} needs channel_attention=True: without CAMs the "
                             "learners of a scale would see the same input.")
        if n_scales > 1 and min(input_shape[1:]) < crop_min_size:
            raise ValueError(
                f"The images ({input_shape[1]}x{input_shape[2]}) are smaller than "
                f"crop_min_size={crop_min_size}; lower crop_min_size or use n_scales=1.")
        self.input_shape, self.n_scales, self.n_cams = input_shape, int(n_scales), int(n_cams)
        self.learner_dim = int(n_components) // (self.n_scales * self.n_cams)
        self.embedding_dim = self.out_features = self.learner_dim * self.n_scales * self.n_cams
        self.adversary_weight = float(adversary_weight)
        self.activation_decay = float(activation_decay)
        self.anti_trivial_weight = float(anti_trivial_weight)
        self.walk_steps, self.crop_threshold = int(walk_steps), float(crop_threshold)
        self.crop_min_size = int(crop_min_size)
        channels, features, self.attention_layers = _dry_run(fnet, gnet, input_shape,
                                                             attention_layers)
        adversary = self.adversary_weight > 0 and self.n_cams > 1
        self.scales = nn.ModuleList([
            _Scale(copy.deepcopy(fnet), copy.deepcopy(gnet), channels=channels,
                   features=features, n_cams=self.n_cams, learner_dim=self.learner_dim,
                   cam_hidden=int(cam_hidden), channel_attention=bool(channel_attention),
                   adversary=adversary, adversary_hidden=adversary_hidden)
            for _ in range(self.n_scales)])

    @classmethod
    def from_backbone(cls, backbone, input_shape, *, split=None, **kwargs):
        """DeML on a backbone split after the stage ``split`` (see :func:`split_backbone`).

        Parameters
        ----------
        backbone : SmallCNN, SmallResNet or nn.Sequential
            The CNN (its global pooling is dropped; DeML pools GNet's output).
        input_shape : tuple of int
            (C, H, W) of the images.
        split : str, default=None
            Name of FNet's last stage (``"blocks.1"``, ``"stages.1"``...).
        **kwargs
            The other parameters of :class:`DeML`.

        Returns
        -------
        net : DeML
        """
        fnet, gnet = split_backbone(backbone, split)
        return cls(fnet, gnet, input_shape, **kwargs)

    def extra_repr(self):
        return (f"n_scales={self.n_scales}, n_cams={self.n_cams}, "
                f"learner_dim={self.learner_dim}, attention_layers={self.attention_layers}")

    # ------------------------------------------------------------------ forward
    def _check_input(self, x):
        if x.ndim != 4 or x.shape[1] != self.input_shape[0]:
            raise ValueError(f"DeML expects images (B, {self.input_shape[0]}, H, W), got shape "
                             f"{tuple(x.shape)}.")
        if self.n_scales > 1 and min(x.shape[2:]) < self.crop_min_size:
            raise ValueError(
                f"The images ({x.shape[2]}x{x.shape[3]}) are smaller than "
                f"crop_min_size={self.crop_min_size}; lower crop_min_size or use n_scales=1.")

    def _attention(self, captured, batch, size):
        """The object-attention proposal: random walks on each layer, resized, averaged."""
        maps = []
        for name in self.attention_layers:
            a = _random_walk(captured[name].detach(), self.walk_steps)
            if a.shape[0] != batch:  # a GNet layer: one map per CAM branch
                a = a.view(-1, batch, *a.shape[1:]).mean(dim=0)
            maps.append(resize_attention(a, size))
        return torch.stack(maps).mean(dim=0)

    def _run(self, x, attend_last=False):
        """Run every scale: learner outputs, their inputs, attention maps, scale inputs, boxes."""
        outputs, hidden, attention, inputs, boxes = [], [], [], [x], []
        box, current = None, x
        for i, scale in enumerate(self.scales):
            attend = i < self.n_scales - 1 or attend_last
            with LayerCapture(scale, self.attention_layers if attend else []) as capture:
                z, h = scale(current)
                if attend:
                    with torch.no_grad():
                        attention.append(self._attention(capture.outputs, x.shape[0],
                                                         current.shape[2:]))
            outputs.append(z)
            hidden.append(h)
            if i < self.n_scales - 1:
                with torch.no_grad():
                    box = attention_boxes(attention[-1], threshold=self.crop_threshold,
                                          min_size=self.crop_min_size, within=box,
                                          image_size=x.shape[2:])
                    current = crop_and_zoom(x, box)
                inputs.append(current)
                boxes.append(box)
        return outputs, hidden, attention, inputs, boxes

    def forward(self, x):
        self._check_input(x)
        outputs, hidden, _, _, _ = self._run(x)
        features = torch.cat([F.normalize(z, dim=-1).transpose(0, 1).flatten(1)
                              for z in outputs], dim=1)
        if not self.training:
            return features
        aux = self.auxiliary_losses(outputs, hidden)
        return (features, aux) if aux else features

    def auxiliary_losses(self, outputs, hidden):
        """The weighted Eq. 4 and Eq. 6 terms of a forward pass, by name.

        ``adv``: :math:`\\lambda_0 \\sum_i` of the discrepancy between the
        adversary's images of the CA learners (Eq. 4), behind a gradient
        reversal: the adversary minimises it, FNet, the CAMs and GNet
        maximise it; the learners' own weights are not part of the game
        (detached on this path), as in Eq. 4. ``act`` and ``ntri``: Eq. 6.
        """
        aux = {}
        if any(scale.adversary is not None for scale in self.scales):
            aux["adv"] = self.adversary_weight * sum(
                adversarial_discrepancy(scale.adversary(
                    grad_reverse(scale.learners(h, detach_parameters=True))))
                for scale, h in zip(self.scales, hidden))
        if self.activation_decay > 0:
            aux["act"] = self.activation_decay * activation_decay(outputs)
        if self.anti_trivial_weight > 0:
            aux["ntri"] = self.anti_trivial_weight * anti_trivial_penalty(
                [scale.learners.weight for scale in self.scales])
        return aux

    @torch.no_grad()
    def look_inside(self, x):
        """Attention maps and crops of every scale for a batch, in evaluation mode.

        Parameters
        ----------
        x : torch.Tensor or array-like of shape (B, C, H, W)

        Returns
        -------
        inside : dict
            ``"inputs"``: the I scale inputs (B, C, H, W) (the images, then the
            zoomed crops); ``"attention"``: the I object-attention maps
            (B, H, W), each over its scale's input and summing to 1;
            ``"boxes"``: the I - 1 crop boxes (B, 4), ``(y0, x0, y1, x1)`` in
            [0, 1] units of the original image; ``"embedding"``: the output.
        """
        param = next(self.parameters())
        x = torch.as_tensor(x, dtype=param.dtype, device=param.device)
        self._check_input(x)
        was_training = self.training
        self.eval()
        try:
            outputs, _, attention, inputs, boxes = self._run(x, attend_last=True)
        finally:
            self.train(was_training)
        embedding = torch.cat([F.normalize(z, dim=-1).transpose(0, 1).flatten(1)
                               for z in outputs], dim=1)
        return {"inputs": inputs, "attention": attention, "boxes": boxes,
                "embedding": embedding}


def _dry_run(fnet, gnet, input_shape, attention_layers):
    """Check the parts on a dummy batch: ``(C of FNet's map, d1 of GNet, attention layer names)``."""
    parts = nn.ModuleDict({"fnet": fnet, "gnet": gnet})
    names = [name for name, _ in parts.named_modules() if name]
    if attention_layers is None:
        children = [f"gnet.{name}" for name, _ in gnet.named_children()]
        candidates = children or ["gnet"]
    else:
        candidates = [attention_layers] if isinstance(attention_layers, str) \
            else list(attention_layers)
        unknown = [n for n in candidates if n not in names]
        if unknown or not candidates:
            raise ValueError(
                f"attention_layers={attention_layers!r}: {unknown or 'empty'} not among the "
                f"modules of the network; valid names: {names[:40]}"
                f"{' ...' if len(names) > 40 else ''}.")
    modes = [m.training for m in parts.modules()]
    parts.eval()
    try:
        with torch.no_grad(), LayerCapture(parts, candidates) as capture:
            u = fnet(torch.zeros(2, *input_shape))
            if not isinstance(u, torch.Tensor) or u.ndim != 4:
                raise ValueError(
                    "fnet (the part before split) must map images to a 4-D map (B, C, H, W) "
                    "for the channel-attention modules; it returned "
                    f"{tuple(u.shape) if isinstance(u, torch.Tensor) else type(u).__name__}. "
                    "Choose an earlier split.")
            g = gnet(u)
            if not isinstance(g, torch.Tensor) or g.ndim not in (2, 4):
                raise ValueError(
                    "gnet (the part after split) must return a 4-D map or (B, d1) features, "
                    f"got {tuple(g.shape) if isinstance(g, torch.Tensor) else type(g)}.")
            shapes = {n: tuple(capture.outputs[n].shape) for n in candidates
                      if n in capture.outputs}
    finally:
        for m, mode in zip(parts.modules(), modes):
            m.training = mode
    maps = [n for n in candidates if len(shapes.get(n, ())) == 4]
    if attention_layers is None:  # maps with at least two locations to walk between
        maps = [n for n in maps if shapes[n][2] * shapes[n][3] > 1][-2:] or ["fnet"]
        if maps == ["fnet"]:
            shapes["fnet"] = tuple(u.shape)
    elif len(maps) != len(candidates):
        bad = {n: shapes.get(n, "did not run") for n in candidates if n not in maps}
        raise ValueError(f"attention_layers must name modules that return 4-D maps (B, C, H, W); "
                         f"got {bad}.")
    return int(u.shape[1]), int(g.shape[1]), tuple(maps)
