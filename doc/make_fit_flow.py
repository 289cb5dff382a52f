"""Draw ``doc/_static/fit_flow.png``: the flow of one deep fit, for ``doc/architecture.md``.

Usage: ``python doc/make_fit_flow.py`` (matplotlib; rerun when the flow changes and
commit the picture; ``tests/test_architecture_doc.py`` checks that the page and the
picture name the modules that exist).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parent / "_static" / "fit_flow.png"

#: (title, module, what it does, helpers below it) of each stage, left to right.
STAGES = [
    ("estimator", "deep/_estimator.py",
     "DeepMetricTransformer\nsignature + docstring\nfit(): checks X, y (_plan),\nclaims the checkpoint (_state)",
     "_plan.validate_fit_input\n_state.load_resume_state"),
    ("config", "deep/_config.py",
     "resolve_config(est, ...)\nthe only reader of the\nparameters: every \"auto\"\nresolved once -> FitConfig",
     "PARAMETER_CONSTRAINTS,\nnested keys, ObjectiveConfig,\nEmbeddingConfig"),
    ("trainer", "deep/_trainer.py",
     "DeepTrainer(config, objective)\nbuilds backbone + network,\nloaders, optimiser;\nrestore() on warm_start",
     "_network, _inputs, _data,\n_hooks, _trainable,\n_plan.build_objective"),
    ("engine", "_training/_engine.py",
     "train_epochs(...)\nthe one loop: steps the\noptimiser, non-finite guard,\ncallbacks after each step/epoch",
     "Validation, EarlyStopping,\nLRSchedule, Checkpoint,\nProgress, user callbacks"),
    ("state", "deep/_state.py",
     "TrainingState\nthe one checkpoint schema:\nwritten each epoch, kept\nas _resume_state",
     "_training._checkpoint\n(atomic file + SHA-256)"),
]


def draw(path=OUT):
    fig, ax = plt.subplots(figsize=(16, 5.2), dpi=100)
    ax.set_xlim(0, 16.4)
    ax.set_ylim(0, 5.2)
    ax.axis("off")
    width, gap, left = 2.65, 0.62, 0.25
    for i, (title, module, body, helpers) in enumerate(STAGES):
        x = left + i * (width + gap)
        ax.add_patch(FancyBboxPatch((x, 1.55), width, 2.45, boxstyle="round,pad=0.04",
                                    facecolor="#e8f0fb", edgecolor="#2f5d9b", linewidth=1.5))
        ax.text(x + width / 2, 3.78, title, ha="center", va="center", fontsize=12,
                fontweight="bold", color="#1d3c66")
        ax.text(x + width / 2, 3.47, module, ha="center", va="center", fontsize=8.5,
                family="monospace", color="#1d3c66")
        ax.text(x + width / 2, 2.45, body, ha="center", va="center", fontsize=8.3,
                linespacing=1.35)
        ax.add_patch(FancyBboxPatch((x, 0.45), width, 0.8, boxstyle="round,pad=0.04",
                                    facecolor="#f6f6f6", edgecolor="#999999", linewidth=1))
        ax.text(x + width / 2, 0.85, helpers, ha="center", va="center", fontsize=7.6,
                family="monospace", color="#333333", linespacing=1.3)
        if i:
            ax.add_patch(FancyArrowPatch((x - gap + 0.02, 2.95), (x - 0.04, 2.95),
                                         arrowstyle="-|>", mutation_scale=16, linewidth=1.6,
                                         color="#2f5d9b"))
    labels = ["params", "FitConfig", "batches,\nTrainable", "state()\neach epoch"]
    for i, label in enumerate(labels):
        x = left + (i + 1) * (width + gap) - gap / 2
        ax.text(x, 3.08, label, ha="center", va="bottom", fontsize=7.2, color="#2f5d9b")
    # the fitted attributes go back to the estimator only once the fit has finished
    trainer_x = left + 2 * (width + gap) + width / 2
    estimator_x = left + width / 2
    ax.add_patch(FancyArrowPatch((trainer_x, 4.08), (estimator_x, 4.08),
                                 connectionstyle="arc3,rad=0.12", arrowstyle="-|>",
                                 mutation_scale=16, linewidth=1.3, color="#b5542c"))
    ax.text((trainer_x + estimator_x) / 2, 4.62, "fitted attributes (module_, n_components_, "
            "history_, ...) set only when fit finishes", ha="center", fontsize=8,
            color="#b5542c")
    ax.text(0.25, 0.12, "One deep fit. Below each stage: the modules and names it uses.",
            fontsize=8, color="#555555")
    fig.savefig(path, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return path


if __name__ == "__main__":
    print(draw())
