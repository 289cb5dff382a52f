"""The deep learner's network: backbone + embedding head, and its optimiser's parameter groups."""

from __future__ import annotations

import copy
from fnmatch import fnmatchcase

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ._config import OPTIMIZERS
from .backbones import default_backbone

__all__ = ["EmbeddingNet", "build_backbone", "build_optimizer", "identity_start", "place",
           "probe_backbone"]


class EmbeddingNet(nn.Module):
    """(Input standardisation +) backbone + linear embedding head (+ L2 normalisation).

    ``forward`` returns ``(embeddings, aux, features)``: ``aux`` is what the
    backbone returned beside its features (``None``, a tensor or a dict of
    scalar tensors) and ``features`` the flattened backbone output. A backbone
    with ``provides_embedding = True`` (:class:`~skdml.deep.DeML`) gets no head
    (``nn.Identity``); its width must then be ``n_components``.
    ``resize`` (:class:`~skdml.deep.Resize`, when the backbone asks for another
    image size) and then ``standardize`` (e.g. :class:`~skdml.deep.Standardize`)
    are applied to the input first.

    Parameters
    ----------
    backbone : nn.Module
        The network whose flattened output is embedded.
    in_features : int
        Width of the backbone's flattened output.
    n_components : int
        Width of the embedding (the head's output).
    normalize : bool
        L2-normalise the embeddings.
    standardize : nn.Module, default=None
        Input standardisation, applied after ``resize``.
    resize : nn.Module, default=None
        Input resizing, applied first.

    Examples
    --------
    >>> import torch
    >>> net = EmbeddingNet(torch.nn.Linear(5, 8), 8, 3, normalize=True)
    >>> z, aux, features = net(torch.randn(4, 5))
    >>> z.shape, aux, features.shape
    (torch.Size([4, 3]), None, torch.Size([4, 8]))
    """

    def __init__(self, backbone, in_features, n_components, normalize, standardize=None,
                 resize=None):
        super().__init__()
        self.resize = resize
        self.standardize = standardize
        self.backbone = backbone
        own = getattr(backbone, "provides_embedding", False)  # e.g. DeML: ends in its learners
        if own and in_features != n_components:
            raise ValueError(f"The backbone provides a {in_features}-dimensional embedding; "
                             f"set n_components={in_features} (got {n_components}).")
        self.head = nn.Identity() if own else nn.Linear(in_features, n_components)
        self.in_features = int(in_features)
        self.normalize = bool(normalize)

    def __setstate__(self, state):  # pickles from before ``resize`` existed (skdml <= 0.1)
        super().__setstate__(state)
        if "resize" not in self._modules and "resize" not in self.__dict__:
            self.resize = None

    def features(self, x, prepared=False):
        """``(features, aux)``: the backbone's flattened features of ``x``, its auxiliary output."""
        if not prepared:
            x = self.prepare(x)
        out = self.backbone(x)
        aux = None
        if isinstance(out, (tuple, list)):
            if len(out) != 2:
                raise ValueError("A backbone returning a tuple must return (features, aux).")
            out, aux = out
        features = _check_features(out).flatten(1)
        if features.shape[1] != self.in_features:
            raise ValueError(
                f"The backbone returned {features.shape[1]} features per sample for a batch of "
                f"{features.shape[0]}, but {self.in_features} when probed before training; "
                "its output width must not depend on the batch (flatten per sample).")
        return features, aux

    def prepare(self, x):
        """The fixed input layers: ``resize`` and then ``standardize`` (when present)."""
        if self.resize is not None:
            x = self.resize(x)
        if self.standardize is not None:
            x = self.standardize(x)
        return x

    def embed(self, features):  # float64 features were cast by _check_features
        """The head's embedding of backbone ``features``, L2-normalised when ``normalize``."""
        z = self.head(features)
        if not self.normalize:
            return z
        out = F.normalize(z, dim=1)
        if torch.is_grad_enabled():
            return out
        # inference: a row whose norm overflows float32 (entries past 1e19) came back all
        # zeros; its direction is that of the row divided by its largest entry. The other rows
        # keep F.normalize's bits (no read back to the host)
        # (no branch on the values: torch.export and TorchScript need one graph for all rows)
        overflow = torch.isinf(torch.linalg.vector_norm(z, dim=1, keepdim=True))
        peak = z.abs().amax(dim=1, keepdim=True).clamp_min(torch.finfo(z.dtype).tiny)
        return torch.where(overflow, F.normalize(z / peak, dim=1), out)

    def forward(self, x, prepared=False):
        """``prepared=True``: ``x`` already went through :meth:`prepare` (a training batch
        read from inputs prepared once before training)."""
        features, aux = self.features(x, prepared)
        return self.embed(features), aux, features


def identity_start(net):
    """Start the embedding as the leading input coordinates the backbone passes on (in place).

    For a backbone whose output begins with its own input (an
    :class:`~skdml.deep.MLP` with ``skip=True``) after the projection on
    principal axes of :class:`~skdml.deep.Standardize` (the default vector
    setup; any other network is returned unchanged): the head's weights
    on those coordinates are the identity, on the blocks' output zero, and
    its bias zero, so the untrained embedding is the input's leading
    principal components and training learns what to change.
    """
    head = net.head
    n_in = getattr(net.backbone, "in_features", None)
    projected = net.standardize is not None and \
        getattr(net.standardize, "components", None) is not None
    if not (projected and isinstance(head, nn.Linear) and n_in is not None
            and getattr(net.backbone, "skip", False)):
        return net
    with torch.no_grad():
        head.weight.zero_()
        k = min(head.out_features, int(n_in))
        head.weight[:k, :k] = torch.eye(k, dtype=head.weight.dtype, device=head.weight.device)
        if head.bias is not None:
            head.bias.zero_()
    return net


def _check_features(out):
    if not isinstance(out, torch.Tensor):
        raise TypeError(
            f"The backbone returned {type(out).__name__}; it must return a torch.Tensor of "
            "shape (batch, ...) (or a (features, aux) tuple).")
    if out.ndim < 2:
        raise ValueError(
            f"The backbone returned a tensor of shape {tuple(out.shape)}; it must keep the batch "
            "dimension first: (batch, features...).")
    if not out.is_floating_point():
        raise TypeError(f"The backbone returned {out.dtype} features; they must be floating.")
    # e.g. a backbone that calls .double() or .half(): the head is float32 (under autocast
    # the head casts its input itself)
    if out.dtype == torch.float64 or (out.dtype in (torch.float16, torch.bfloat16)
                                      and not torch.is_autocast_enabled(out.device.type)):
        out = out.float()
    return out


def build_backbone(spec, input_shape):
    """The backbone: a deep copy of a module or of a builder's result, or the default."""
    if spec is None:
        return default_backbone(input_shape)
    if isinstance(spec, type):
        raise TypeError(
            f"backbone={spec.__name__} is a class; pass an instance "
            f"(backbone={spec.__name__}(...)) or a builder called with the input shape.")
    if isinstance(spec, nn.Module):
        return copy.deepcopy(spec)
    module = spec(input_shape)
    if not isinstance(module, nn.Module):
        raise TypeError(f"The backbone builder returned {type(module).__name__}, "
                        "not a torch.nn.Module.")
    # a copy, as for a module: a builder that returns one module it keeps (a closure over a
    # pretrained network) must not let two fits, or a refit and the fitted model, share it
    return copy.deepcopy(module)


def probe_backbone(backbone, sample):
    """Dry forward pass (eval mode, no grad) on ``sample``: ``(n_features, flops_per_sample)``.

    Checks the output contract once, before training: a tensor with the batch
    first, floating, of a width that does not depend on the batch size, and an
    auxiliary output that is a scalar tensor or a dict of them.
    """
    from torch.utils.flop_counter import FlopCounterMode

    wrong = sorted({str(t.dtype) for t in (*backbone.parameters(), *backbone.buffers())
                    if t.is_floating_point() and t.dtype != sample.dtype})
    if wrong:
        # torch's own error names matrices: "mat1 and mat2 must have the same dtype"
        raise ValueError(
            f"The backbone holds {' and '.join(wrong)} parameters or buffers; the learner "
            f"trains in {sample.dtype} (its inputs are {sample.dtype}): pass backbone.float() "
            "(a module built under torch.set_default_dtype(torch.float64) is float64).")
    backbone.eval()
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        out = backbone(sample)
    widths = []
    for x in (sample, sample[:1], torch.cat([sample, sample])):
        if x is not sample:
            with torch.no_grad():
                out_x = backbone(x)
        else:
            out_x = out
        feats = out_x[0] if isinstance(out_x, (tuple, list)) else out_x
        feats = _check_features(feats)
        if feats.shape[0] != x.shape[0]:
            raise ValueError(
                f"The backbone maps a batch of {x.shape[0]} to {feats.shape[0]} rows; it must "
                "keep one row per sample.")
        widths.append(int(np.prod(feats.shape[1:])))
    if len(set(widths)) > 1:
        raise ValueError(
            f"The backbone's output width depends on the batch size ({widths[1]} for 1 sample, "
            f"{widths[0]} for {sample.shape[0]}, {widths[2]} for {2 * sample.shape[0]}); it must "
            "not (flatten per sample, not across the batch).")
    if isinstance(out, (tuple, list)):
        check_aux(out[1])
    return widths[0], counter.get_total_flops() / max(sample.shape[0], 1)


def place(net, device):
    """Move ``net`` to ``device``; on CUDA its 4-d weights also go channels-last (NHWC).

    cuDNN's tensor-core convolutions work in NHWC: with NCHW weights, every
    convolution of an autocast step transposes its operands. On an H100 a
    training step of :class:`~skdml.deep.SmallResNet` at 64x64 ran 1.63x
    (fp32, TF32), 2.15x (bf16) and 2.23x (fp16) faster channels-last
    (``python benchmarks/bench_gpu.py --step``). The values are unchanged; on
    the CPU the network keeps the layout it was built with (see
    :class:`~skdml.deep.SmallResNet`).
    """
    if torch.device(device).type == "cuda":
        return net.to(device, memory_format=torch.channels_last)
    return net.to(device)


def check_aux(aux):
    """Auxiliary losses must be a scalar tensor or a dict of scalar tensors."""
    items = aux.items() if isinstance(aux, dict) else [("aux", aux)]
    for key, value in items:
        if value is None and not isinstance(aux, dict):
            continue
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            raise TypeError(
                f"The backbone's auxiliary loss {key!r} is {type(value).__name__}; it must be a "
                "floating torch.Tensor (a scalar, or summed if not) so that it can be trained.")


def build_optimizer(net, loss, *, optimizer, learning_rate, head_lr_mult, param_groups,
                    **optimizer_kwargs):
    """The optimiser with skorch-style parameter groups.

    The backbone gets ``learning_rate``; the head and the loss's own parameters
    (e.g. AM-Softmax proxies) get ``learning_rate * head_lr_mult``. Each
    ``(pattern, options)`` of ``param_groups`` is matched (fnmatch) against
    ``backbone.<...>``, ``head.<...>`` and ``loss.<...>`` names; the first
    match's options override the defaults of the parameter. A backbone's
    ``head_parameters`` (fnmatch patterns of its parameter names) count as head.
    On CUDA, ``"adam"`` and ``"adamw"`` use PyTorch's fused implementation: it
    updates every parameter in one kernel, and ``GradScaler.step`` (fp16) then
    hands it the inf check on the device instead of reading it back at every
    step (``python benchmarks/bench_gpu.py --fit``).
    """
    named = list(net.named_parameters())
    own_head = [f"backbone.{p}" for p in getattr(getattr(net, "backbone", None),
                                                 "head_parameters", ())]
    if isinstance(loss, nn.Module):
        named += [(f"loss.{name}", p) for name, p in loss.named_parameters()]
    patterns = list(param_groups or [])
    for entry in patterns:
        if not (isinstance(entry, (tuple, list)) and len(entry) == 2
                and isinstance(entry[0], str) and isinstance(entry[1], dict)):
            raise ValueError(f"param_groups must be a list of (pattern, dict) pairs, got {entry!r}.")
        if not any(fnmatchcase(name, entry[0]) for name, _ in named):
            # (a pattern without the "backbone." prefix froze nothing, silently)
            shown = ", ".join(name for name, _ in named[:6])
            raise ValueError(
                f"param_groups: the pattern {entry[0]!r} matches no parameter of the network. "
                f"The names start with 'backbone.', 'head.' or 'loss.' ({shown}"
                f"{', ...' if len(named) > 6 else ''}).")
    groups = {}
    for name, p in named:
        if not p.requires_grad:
            continue
        is_head = not name.startswith("backbone.") or any(fnmatchcase(name, pat) for pat in own_head)
        options = {"lr": learning_rate * (head_lr_mult if is_head else 1.0)}
        key = ("head" if is_head else "backbone", None)
        for i, (pattern, opts) in enumerate(patterns):
            if fnmatchcase(name, pattern):
                options.update(opts)
                key = (key[0], i)
                break
        groups.setdefault(key, {"params": [], **options})["params"].append(p)
    if not groups:
        raise ValueError("The network has no trainable parameters.")
    opt_cls = OPTIMIZERS.get(optimizer, optimizer)
    kwargs = {"lr": learning_rate}
    if optimizer == "sgd":
        kwargs["momentum"] = 0.9
    kwargs.update(optimizer_kwargs)  # weight_decay and the user's own (betas, momentum, ...)
    if optimizer in ("adam", "adamw") and "fused" not in kwargs and all(
            p.is_cuda for group in groups.values() for p in group["params"]):
        kwargs["fused"] = True  # one kernel per step; fp16's GradScaler then never syncs
    try:
        return opt_cls(list(groups.values()), **kwargs)
    except TypeError as exc:  # an optimizer_params key the optimiser does not take
        raise ValueError(f"The optimizer {getattr(opt_cls, '__name__', opt_cls)} does not accept "
                         f"these optimizer_params: {exc}") from exc
