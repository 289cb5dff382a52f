"""
SUML: learned components and a 2-D embedding
=============================================

:class:`~skdml.linear.SUML` learns a linear map ``L`` without labels. Each row of
``components_`` is a direction in pixel space, so on images it can be shown as an
image. Here SUML is fitted on scikit-learn's bundled handwritten digits (8x8
pixels; the AT&T faces of the paper need a download, see
:func:`skdml.datasets.load_att_faces`), its 16 components are shown next to PCA's,
and a 2-D SUML embedding is drawn next to PCA's 2-D projection. The labels are
used only to score and to colour the points, never to fit.
"""

# %%
# sphinx_gallery_thumbnail_number = 2
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits
from sklearn.decomposition import PCA
from sklearn.model_selection import train_test_split
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline

from skdml import SUML

X, y = load_digits(return_X_y=True)
X = X / 16.0  # pixel values 0..16 -> 0..1

suml = SUML(n_components=16, random_state=0).fit(X)
pca = PCA(n_components=16, random_state=0).fit(X)

# %%
# The learned components as images
# --------------------------------
# SUML starts from PCA (``init="pca"``), and on these small images its
# components stay close to PCA's: SUML re-weights and mixes the directions
# rather than finding new ones, and 1-NN accuracy below is about the same.
fig, axes = plt.subplots(2, 16, figsize=(12, 2.0))
for row, (name, comps) in enumerate([("SUML", suml.components_), ("PCA", pca.components_)]):
    for j, ax in enumerate(axes[row]):
        ax.imshow(comps[j].reshape(8, 8), cmap="RdBu_r")
        ax.set_xticks([])
        ax.set_yticks([])
    axes[row, 0].set_ylabel(name)
fig.suptitle("16 components (red: positive weight, blue: negative)")
plt.show()

# %%
# 1-NN accuracy in each 16-D embedding
# ------------------------------------
# One stratified 70/30 split; labels are used only by the classifier.
X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
for name, est in [("raw pixels (64-D)", None),
                  ("SUML", SUML(n_components=16, random_state=0)),
                  ("PCA", PCA(n_components=16, random_state=0))]:
    steps = [KNeighborsClassifier(1)] if est is None else [est, KNeighborsClassifier(1)]
    score = make_pipeline(*steps).fit(X_tr, y_tr).score(X_te, y_te)
    print(f"{name:>18}: 1-NN accuracy {score:.3f}")

# %%
# A 2-D embedding
# ---------------
# SUML with ``n_components=2`` against the first two principal components.
fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
embeddings = [("SUML, n_components=2", SUML(n_components=2, random_state=0).fit_transform(X)),
              ("PCA, n_components=2", PCA(n_components=2).fit_transform(X))]
for ax, (name, E) in zip(axes, embeddings):
    sc = ax.scatter(E[:, 0], E[:, 1], c=y, cmap="tab10", s=6)
    ax.set_title(name)
    ax.set_xticks([])
    ax.set_yticks([])
fig.colorbar(sc, ax=axes, ticks=np.arange(10), label="digit")
plt.show()
