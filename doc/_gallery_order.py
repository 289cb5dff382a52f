"""The gallery's order: the flagship example first, the others by file name."""

FIRST = "plot_zero_shot_retrieval.py"


class FlagshipFirst:
    """sphinx-gallery ``within_subsection_order`` key: :data:`FIRST`, then by file name."""

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename):
        return (filename != FIRST, filename)

    def __repr__(self):
        return f"<{type(self).__name__}>"
