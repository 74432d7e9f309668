"""One way to draw a benchmark's PNG: headless matplotlib, a figure saved and closed on exit."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def plotted(draw: Callable[[], object], name: str) -> str:
    """Runs `draw` (which writes PNG `name`) where matplotlib is installed; returns how a "wrote
    ..." line names it: ", NAME", or " (no NAME: why)" where it is not. A benchmark that may run
    without matplotlib then still writes its JSON and page instead of stopping at its plot."""
    if importlib.util.find_spec("matplotlib") is None:
        return f" (no {name}: matplotlib is not installed here)"
    draw()
    return f", {name}"


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
