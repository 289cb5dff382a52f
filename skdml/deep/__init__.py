"""Deep metric learning: :class:`DeepMetricTransformer` and plain ``torch.nn`` backbones."""

from ._transformer import DeepMetricTransformer, EmbeddingNet, NonFiniteLossError
from .backbones import MLP, SmallCNN, SmallResNet, default_backbone

__all__ = ["DeepMetricTransformer", "EmbeddingNet", "NonFiniteLossError", "MLP", "SmallCNN",
           "SmallResNet", "default_backbone"]
