"""
Deep metric learning with your own backbone, and its training curve
===================================================================

:class:`~skdml.deep.DeepMetricTransformer` trains any ``torch.nn.Module`` with
the losses of :mod:`skdml.losses` and returns a scikit-learn transformer. Here a
tiny convolutional network written on the spot embeds the 8x8 digits; it learns
on the digits 0-4 and is scored by Recall@1 on the unseen digits 5-9. The
estimator records one entry per epoch in ``history_`` (training loss, and with
a validation set the MAP@R of a class-disjoint hold-out), which is
all a training-curve plot needs.

Be warned that on these tiny 8x8 digits raw pixels are very hard to beat (their
Recall@1 on the unseen digits is about 0.99) and a network trained for a few
seconds on a CPU does not beat them; the example shows the mechanics. The CPU
zero-shot benchmark on USPS and COIL-20 (:doc:`/benchmarks`) compares the deep
learner with raw pixels and the linear learners at full size.
"""

# %%
import matplotlib.pyplot as plt
import torch
from sklearn.datasets import load_digits
from torch import nn

from skdml import DeepMetricTransformer
from skdml.metrics import recall_at_k

torch.manual_seed(0)
X, y = load_digits(return_X_y=True)
images = (X / 16.0).reshape(-1, 1, 8, 8).astype("float32")  # (n, channels, height, width)
seen = y < 5


class TinyConvNet(nn.Module):
    """Two 3x3 convolutions and a global average pool: 1x8x8 -> 32 features."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )

    def forward(self, x):
        return self.features(x)


net = DeepMetricTransformer(
    backbone=TinyConvNet(), n_components=16, loss="binomial", learning_rate=1e-3,
    max_iter=40, early_stopping=True, validation_fraction=0.2, n_iter_no_change=10,
    device="cpu", random_state=0)
net.fit(images[seen], y[seen])

for name, Z in [("raw pixels", X[~seen]), ("TinyConvNet", net.transform(images[~seen]))]:
    print(f"{name:>12}: Recall@1 on unseen digits {recall_at_k(Z, y[~seen], k=1):.3f}")
print(f"epochs run: {net.n_iter_}, best epoch: {net.best_iteration_}")

# %%
# The training curve from ``history_``
# ------------------------------------
epochs = [h["epoch"] for h in net.history_]
fig, ax_loss = plt.subplots(figsize=(6, 3.5))
ax_loss.plot(epochs, [h["loss"] for h in net.history_], color="tab:blue", marker=".")
ax_loss.set_xlabel("epoch")
ax_loss.set_ylabel("training loss", color="tab:blue")
ax_val = ax_loss.twinx()
ax_val.plot(epochs, [h["validation_score"] for h in net.history_], color="tab:orange",
            marker=".")
ax_val.axvline(net.best_iteration_, color="gray", linestyle=":", label="restored epoch")
ax_val.set_ylabel("validation MAP@R (held-out classes)", color="tab:orange")
ax_val.legend(loc="lower right")
fig.tight_layout()
plt.show()
