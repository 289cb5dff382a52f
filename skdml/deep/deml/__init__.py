"""DeML: hybrid-attention decoupled metric learning (Chen & Deng, CVPR 2019).

- ``_attention``: the object-attention module (random walk, Eq. 2-3) and crop-and-zoom;
- ``_parts``: channel-attention modules, stacked learners, gradient reversal, the
  adversary and the Eq. 4 / Eq. 6 terms;
- ``_network``: the :class:`DeML` network (a backbone of
  :class:`~skdml.DeepMetricTransformer`) and the FNet / GNet split;
- ``_preset``: :func:`make_deml`, :class:`DeMLBuilder`, :func:`learner_similarity`.

The metric loss over the learners (Eq. 5) is :class:`skdml.losses.DecoupledLoss`.
See ``doc/deml.md``.
"""

from ._attention import attention_boxes, crop_and_zoom, random_walk_attention, resize_attention
from ._network import DeML, backbone_stages, split_backbone
from ._parts import (Adversary, ChannelAttention, StackedLinear, activation_decay,
                     adversarial_discrepancy, anti_trivial_penalty, grad_reverse)
from ._preset import DeMLBuilder, learner_similarity, make_deml

__all__ = ["Adversary", "ChannelAttention", "DeML", "DeMLBuilder", "StackedLinear",
           "activation_decay", "adversarial_discrepancy", "anti_trivial_penalty",
           "attention_boxes", "backbone_stages", "crop_and_zoom", "grad_reverse",
           "learner_similarity", "make_deml", "random_walk_attention", "resize_attention",
           "split_backbone"]
