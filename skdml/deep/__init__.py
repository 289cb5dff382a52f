"""Deep metric learning: :class:`DeepMetricTransformer` and plain ``torch.nn`` backbones.

- ``_estimator``: the estimator (parameters, input checks, ``fit``, ``transform``);
- ``_config``: every setting of a fit, each ``"auto"`` resolved once (a frozen ``FitConfig``);
- ``_trainer``: ``DeepTrainer``, one fit (device, input pipeline, network, objective,
  resume, the shared training loop);
- ``_network``: backbone + embedding head, output checks, optimiser parameter groups;
- ``_trainable``: a batch's loss (AMP, regularisers, auxiliary losses);
- ``_plan``: input checks and the objective;
- ``_inputs``: input resizing, standardisation (learned in ``fit``) and augmentation;
- ``_data``: input layouts, datasets, loaders;
- ``_state``: ``TrainingState`` (the one checkpoint schema), resuming, pickling;
- ``_export``: :func:`export_embedding`, the fitted network as TorchScript or ONNX;
- ``backbones``: MLP, ConvNet, small CNN, small ResNet, ``FeatureExtractor`` (any
  network, e.g. pretrained); ``_hooks``: layer capture for JRS;
- ``deml``: DeML (CVPR 2019), a backbone that provides its own embedding.
"""

from .._training import NonFiniteLossError
from ._estimator import DeepMetricTransformer
from ._export import export_embedding
from ._inputs import RandomAffine, Resize, Standardize
from ._network import EmbeddingNet
from .backbones import MLP, ConvNet, FeatureExtractor, SmallCNN, SmallResNet, default_backbone
from .deml import DeML, make_deml, random_walk_attention

__all__ = ["ConvNet", "DeML", "DeepMetricTransformer", "EmbeddingNet", "FeatureExtractor", "MLP",
           "NonFiniteLossError", "RandomAffine", "Resize", "SmallCNN", "SmallResNet", "Standardize",
           "default_backbone", "export_embedding", "make_deml", "random_walk_attention"]
