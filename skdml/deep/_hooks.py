"""Capture the outputs of named backbone layers with forward hooks (for JRS)."""

from __future__ import annotations

from fnmatch import fnmatchcase

import torch

__all__ = ["LayerCapture", "match_modules"]


def match_modules(module, patterns):
    """Names of the sub-modules of ``module`` matching any fnmatch pattern, in model order.

    Raises ``ValueError`` when a pattern matches no sub-module.
    """
    if isinstance(patterns, str):
        patterns = [patterns]
    names = [name for name, _ in module.named_modules() if name]
    matched = []
    for pattern in patterns:
        hits = [n for n in names if fnmatchcase(n, pattern)]
        if not hits:
            raise ValueError(
                f"JRS layers pattern {pattern!r} matches no module of the backbone. "
                f"Available modules: {names[:30]}{' ...' if len(names) > 30 else ''}"
            )
        matched += [h for h in hits if h not in matched]
    order = {n: i for i, n in enumerate(names)}
    return sorted(matched, key=order.__getitem__)


class LayerCapture:
    """Context manager registering forward hooks that keep the outputs of named layers.

    Parameters
    ----------
    module : torch.nn.Module
        The backbone.
    names : list of str
        Sub-module names (as in ``named_modules``), see :func:`match_modules`.

    Attributes
    ----------
    outputs : dict
        ``name -> output tensor`` of the last forward pass (tuples keep their first item).

    Examples
    --------
    >>> import torch
    >>> net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    >>> with LayerCapture(net, ["0"]) as cap:
    ...     _ = net(torch.zeros(5, 4))
    ...     cap.representations()[0].shape
    torch.Size([5, 3])
    >>> len(net[0]._forward_hooks)
    0
    """

    def __init__(self, module, names):
        self.module = module
        self.names = list(names)
        self.outputs = {}
        self._handles = []

    def _hook(self, name):
        def hook(_module, _inputs, output):
            if isinstance(output, (tuple, list)):
                output = output[0]
            # a copy: a later in-place op (ReLU(inplace=True) after a BatchNorm) rewrote the
            # captured tensor, and two "layers" were one post-activation response
            self.outputs[name] = output.clone() if isinstance(output, torch.Tensor) else output
        return hook

    def __enter__(self):
        modules = dict(self.module.named_modules())
        for name in self.names:
            self._handles.append(modules[name].register_forward_hook(self._hook(name)))
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.outputs.clear()
        return False

    def representations(self):
        """The captured outputs, flattened to (n, -1), in the order of ``names``."""
        missing = [n for n in self.names if n not in self.outputs]
        if missing:
            raise RuntimeError(f"JRS layers {missing} did not run during the forward pass.")
        return [self.outputs[n].flatten(1) for n in self.names]
