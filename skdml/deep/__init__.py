"""Deep metric learning: :class:`DeepMetricTransformer` and plain ``torch.nn`` backbones.

- ``_estimator``: the estimator (parameters, input checks, ``fit``, ``transform``);
- ``_fitting``: one fit (network, objective, resume, the shared training loop);
- ``_network``: backbone + embedding head, output checks, optimiser parameter groups;
- ``_trainable``: a batch's loss (AMP, regularisers, auxiliary losses);
- ``_data``: input layouts, datasets, loaders;
- ``_state``: resume states, checkpoints to resume from, pickling;
- ``backbones``: MLP, small CNN, small ResNet; ``_hooks``: layer capture for JRS;
- ``deml``: DeML (CVPR 2019), a backbone that provides its own embedding.
"""

from .._training import NonFiniteLossError
from ._estimator import DeepMetricTransformer
from ._network import EmbeddingNet
from .backbones import MLP, SmallCNN, SmallResNet, default_backbone
from .deml import DeML, make_deml, random_walk_attention

__all__ = ["DeepMetricTransformer", "EmbeddingNet", "NonFiniteLossError", "MLP", "SmallCNN",
           "SmallResNet", "default_backbone", "DeML", "make_deml", "random_walk_attention"]
