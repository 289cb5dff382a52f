"""Export the embedding network of a fitted deep learner (TorchScript or ONNX) for serving."""

from __future__ import annotations

import copy
import functools
import inspect
import io
import os

import numpy as np
import torch
from sklearn.utils._param_validation import StrOptions, validate_params
from sklearn.utils.validation import check_is_fitted
from torch import nn

from .._utils import atomic_write_bytes, check_output_file, quiet_warnings

__all__ = ["export_embedding"]


def _refuse_non_deep(estimator):
    """Say what ``export_embedding`` supports when ``estimator`` has no network."""
    name = type(estimator).__name__
    if hasattr(estimator, "components_"):
        raise TypeError(
            f"export_embedding exports the network of a fitted deep learner "
            f"(DeepMetricTransformer, or any estimator with module_ and input_shape_); {name} "
            f"is a linear learner: its embedding is X @ components_.T (components_ has shape "
            f"{getattr(estimator.components_, 'shape', '?')}). Save components_ (numpy.save) "
            "or the estimator itself (joblib.dump) instead.")
    if hasattr(estimator, "fit") and "DeepMetricTransformer" not in {
            c.__name__ for c in type(estimator).__mro__}:
        raise TypeError(
            f"export_embedding exports the network of a fitted deep learner "
            f"(DeepMetricTransformer, or any estimator with module_ and input_shape_); {name} "
            "has no network to export.")


class EmbeddingOnly(nn.Module):
    """The fitted network with ``forward(x) -> embeddings`` (no auxiliary outputs)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)[0]


def _example_input(example, input_shape):
    """A float32 CPU batch of the model's input layout ``(n, *input_shape)``."""
    if example is None:
        generator = torch.Generator().manual_seed(0)
        return torch.randn((2,) + tuple(input_shape), generator=generator)
    x = example.detach().cpu() if isinstance(example, torch.Tensor) else torch.as_tensor(
        np.asarray(example))
    if not (x.is_floating_point() or x.dtype in (torch.uint8, torch.int8, torch.int16,
                                                 torch.int32, torch.int64)):
        raise TypeError(f"example must hold numbers, got dtype {x.dtype}.")
    x = x.float()
    if x.ndim == len(input_shape) and len(input_shape) == 3 and input_shape[0] == 1:
        x = x.unsqueeze(1)  # grey images (n, H, W)
    if tuple(x.shape[1:]) != tuple(input_shape) or x.shape[0] < 1:
        raise ValueError(f"example has shape {tuple(x.shape)}; it must be a batch of samples "
                         f"of the fitted shape, (n, {', '.join(map(str, input_shape))}).")
    if not bool(torch.isfinite(x).all()):
        raise ValueError("example contains NaN or infinity.")
    return x


class _NotReproduced(ValueError):
    """The exported model's output differs from the network's."""


def _check_same(reference, got, what, rtol, atol):
    if got.shape != reference.shape or not torch.allclose(got, reference, rtol=rtol, atol=atol):
        gap = (got - reference).abs().max().item() if got.shape == reference.shape else "shape"
        raise _NotReproduced(
            f"The exported {what} model does not reproduce the network (largest difference "
            f"{gap}): its forward pass depends on the input in a way tracing cannot record "
            "(data-dependent Python control flow, or a width that depends on the batch). "
            "Make the backbone traceable, or script it with torch.jit.script and export it "
            "yourself.")


class _GreyImages(nn.Module):
    """A traced grey-image model that also takes ``(n, H, W)``, as ``transform`` does."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        if x.dim() == 3:  # grey images without their channel axis
            x = x.unsqueeze(1)
        return self.model(x)


def _torchscript(wrapper, x, check, grey=False):
    with quiet_warnings({"category": torch.jit.TracerWarning},
                        {"category": DeprecationWarning}):
        # shape checks inside the network turn into constants: the exported model takes
        # the fitted sample shape only, which ``check`` verifies at another batch size.
        # (recent torch deprecates TorchScript; the user chose it, the docs say so.)
        traced = torch.jit.trace(wrapper, x, check_trace=False)
        if grey:  # scripted around the trace: the rank test stays a test, not a constant
            traced = torch.jit.script(_GreyImages(traced))
        buffer = io.BytesIO()
        torch.jit.save(traced, buffer)
        data = buffer.getvalue()
        loaded = torch.jit.load(io.BytesIO(data), map_location="cpu")
    _check_same(wrapper(check), loaded(check), "TorchScript", 1e-5, 1e-6)
    if grey:
        _check_same(wrapper(check), loaded(check[:, 0]), "TorchScript", 1e-5, 1e-6)
    return data


def _exported_program(wrapper, x, check):
    if not hasattr(torch.export, "Dim"):
        raise ImportError(f"format='exported_program' needs torch >= 2.2 (this is "
                          f"{torch.__version__}); use format='torchscript'.")
    program = torch.export.export(wrapper, (x,),
                                  dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    data = buffer.getvalue()
    loaded = torch.export.load(io.BytesIO(data)).module()
    _check_same(wrapper(check), loaded(check), "ExportedProgram", 1e-5, 1e-6)
    return data


def _onnx(wrapper, x, check):
    try:
        import onnx
    except ImportError:
        raise ImportError("format='onnx' needs the onnx package (pip install onnx); "
                          "format='torchscript' needs nothing beyond torch.") from None
    _torchscript(wrapper, x, check)  # the exporter records this trace: check it reproduces
    buffer = io.BytesIO()
    with quiet_warnings({"category": torch.jit.TracerWarning},  # the TorchScript-based
                        {"category": DeprecationWarning}):        # exporter: needs onnx only
        # torch >= 2.9 defaults to the torch.export-based exporter, which needs onnxscript
        legacy = {"dynamo": False} if "dynamo" in inspect.signature(
            torch.onnx.export).parameters else {}
        torch.onnx.export(wrapper, (x,), buffer, input_names=["input"],
                          output_names=["embedding"],
                          dynamic_axes={"input": {0: "batch"}, "embedding": {0: "batch"}},
                          **legacy)
    data = buffer.getvalue()
    onnx.checker.check_model(onnx.load_from_string(data))
    try:
        import onnxruntime
    except ImportError:
        return data
    session = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    got = torch.from_numpy(session.run(None, {"input": check.numpy()})[0])
    _check_same(wrapper(check), got, "ONNX", 1e-4, 1e-5)
    return data


@validate_params(
    {
        "estimator": [object],
        "path": [str, os.PathLike],
        "format": [StrOptions({"torchscript", "exported_program", "onnx"})],
        "example": ["array-like", torch.Tensor, None],
        "overwrite": ["boolean"],
    },
    prefer_skip_nested_validation=True,
)
def export_embedding(estimator, path, *, format="torchscript", example=None, overwrite=False):
    """Write the embedding network of a fitted deep learner as TorchScript, torch.export or ONNX.

    The exported model is the whole fitted network, ``module_``, in evaluation
    mode, on the CPU: input resizing and standardisation (learned in ``fit``),
    backbone, embedding head and L2 normalisation, with a ``forward`` that
    returns the embeddings only (``module_`` itself returns
    ``(embeddings, aux, features)``, which ``torch.jit.trace`` cannot export).
    It maps a float32 batch ``(n, *estimator.input_shape_)``, any ``n``, to
    the ``(n, n_components)`` embeddings that ``transform`` returns, so a
    server needs neither skdml nor scikit-learn, only torch or an ONNX runtime.
    Every export is loaded back and compared with the network on a batch of
    another size before the file is written (for ONNX: its trace, and the
    ONNX model itself when ``onnxruntime`` is installed).

    Parameters
    ----------
    estimator : DeepMetricTransformer
        A fitted deep learner (anything with ``module_`` and ``input_shape_``).
    path : str or path-like
        The file to write (atomically), e.g. ``"embedding.pt"`` or
        ``"embedding.onnx"``.
    format : {"torchscript", "exported_program", "onnx"}, default="torchscript"
        ``"torchscript"``: :func:`torch.jit.trace`, loaded with
        ``torch.jit.load(path)`` (also from C++ LibTorch).
        ``"exported_program"``: :func:`torch.export.export` with a dynamic
        batch axis, loaded with ``torch.export.load(path).module()``: the
        format PyTorch recommends now that it deprecates TorchScript
        (``torch.jit`` warns so in 2.13); conventionally named ``.pt2``.
        ``"onnx"``: the TorchScript-based ONNX exporter with a dynamic batch
        axis (input ``"input"``, output ``"embedding"``); needs the ``onnx``
        package, and is checked against the network with ``onnxruntime`` when
        that is installed.
    example : array-like or torch.Tensor, default=None
        A batch of samples of the fitted shape to trace with,
        ``(n, *estimator.input_shape_)`` (grey images may be ``(n, H, W)``);
        ``None`` uses two random samples; give real ones when the path
        through the network depends on the values (e.g. a backbone that
        skips a block on blank images).
    overwrite : bool, default=False
        Replace an existing file; otherwise a ``FileExistsError`` is raised.

    Returns
    -------
    path : str
        The file written.

    Raises
    ------
    ValueError
        When the network cannot be traced or exported, or the exported model
        does not reproduce it on a batch of another size: the backbone is not
        traceable. Nothing is written then.
    FileExistsError
        When ``path`` exists and ``overwrite`` is False.

    See Also
    --------
    skdml.retrieval.RetrievalIndex : Search a gallery of embeddings.

    Notes
    -----
    Grey images: the TorchScript model takes ``(n, 1, H, W)`` and, as
    ``transform`` does, ``(n, H, W)``; the ExportedProgram and ONNX models
    take ``(n, 1, H, W)`` only (their input rank is fixed). A model fitted with ``amp``
    embeds in float32 once exported (a difference of the order of the
    half-precision rounding).

    Examples
    --------
    >>> import numpy as np, torch
    >>> from skdml import DeepMetricTransformer
    >>> from skdml.deep import export_embedding
    >>> rng = np.random.RandomState(0)
    >>> y = np.repeat(np.arange(4), 10)
    >>> X = (rng.randn(40, 6) + 3 * y[:, None]).astype(np.float32)
    >>> net = DeepMetricTransformer(n_components=3, max_iter=2, device="cpu",
    ...                             random_state=0).fit(X, y)
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "embedding.pt")
    >>> model = torch.jit.load(export_embedding(net, path))
    >>> Z = model(torch.from_numpy(X[:5])).numpy()
    >>> Z.shape, bool(np.allclose(Z, net.transform(X[:5]), atol=1e-5))
    ((5, 3), True)
    """
    if not hasattr(estimator, "module_"):
        _refuse_non_deep(estimator)
    check_is_fitted(estimator, "module_")
    input_shape = getattr(estimator, "input_shape_", None)
    if input_shape is None:
        raise TypeError(f"{type(estimator).__name__} has no input_shape_: export_embedding "
                        "exports a fitted DeepMetricTransformer.")
    path = check_output_file(path, overwrite=overwrite, example="embedding.pt")
    x = _example_input(example, input_shape)
    if x.shape[0] == 1:  # torch.export specialises a batch axis of size 1
        x = torch.cat([x, x])
    check = torch.cat([x, x[:1] * 0.5])  # another batch size, other values
    net = copy.deepcopy(estimator.module_).cpu().eval()
    net = net.to(memory_format=torch.contiguous_format)
    wrapper = EmbeddingOnly(net).eval()
    for p in wrapper.parameters():
        p.requires_grad_(False)
    grey = len(input_shape) == 3 and input_shape[0] == 1
    writer = {"torchscript": functools.partial(_torchscript, grey=grey),
              "exported_program": _exported_program, "onnx": _onnx}[format]
    try:
        with torch.no_grad():
            data = writer(wrapper, x, check)
    except (ImportError, _NotReproduced):
        raise
    except Exception as exc:  # what tracing / torch.export say of an untraceable backbone
        from .backbones import FeatureExtractor

        hooked = [m for m in wrapper.modules()
                  if isinstance(m, FeatureExtractor) and m.layer is not None]
        why = ("FeatureExtractor(layer=...) stops its network with a forward hook, which "
               "torch.export cannot follow: export it with format='torchscript'"
               if hooked and format != "torchscript" else
               "Its forward pass must be traceable (no Python control flow on tensor values; "
               "torch.export also refuses some Python constructs)")
        raise ValueError(f"The network could not be exported as {format}: "
                         f"{type(exc).__name__}: {exc}. {why}.") from exc
    atomic_write_bytes(path, data, overwrite=overwrite)
    return path
