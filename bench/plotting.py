"""One way to draw a benchmark's PNG: headless matplotlib, a figure saved and closed on exit."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def plotting_problem() -> str | None:
    """Why no PNG can be drawn here, in a sentence, or None. A benchmark that also runs where
    matplotlib is not installed (the GPU machine has none) writes its JSON and page and says
    this instead of stopping at its plot."""
    if importlib.util.find_spec("matplotlib") is None:
        return "matplotlib is not installed here"
    return None


@contextmanager
def figure(path: Path, size: tuple[float, float], ncols: int = 1) -> Iterator[Any]:
    """Yields the axes (`ncols` > 1: an array of them, side by side); on exit the figure is laid
    out, written to `path` and closed."""
    import matplotlib

    matplotlib.use("Agg")  # no display on CI or servers
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, ncols, figsize=size)
    try:
        yield ax
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
