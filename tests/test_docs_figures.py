"""Every figure under docs/results is shown somewhere: embedded or linked from a Markdown page.

A PNG that no page references is a result nobody reading the docs sees. References are Markdown
links and images, `[text](target)` or `![caption](target)`, resolved against the page that holds
them; a file name merely mentioned in prose does not count.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _referenced() -> set[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found: set[Path] = set()
    for page in pages:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            target = target.split("#", 1)[0]
            if target and "://" not in target:
                found.add((page.parent / target).resolve())
    return found


def test_every_results_figure_is_referenced_by_a_page() -> None:
    figures = sorted((ROOT / "docs" / "results").rglob("*.png"))
    assert figures, "no figures under docs/results"
    referenced = _referenced()
    unshown = [str(f.relative_to(ROOT)) for f in figures if f.resolve() not in referenced]
    assert not unshown, f"figures no Markdown page under docs/ or README.md links or embeds: {unshown}"


def test_every_figure_a_page_embeds_exists() -> None:
    """The other way round: an embedded or linked PNG that is not there is a broken figure."""
    missing = sorted(str(p) for p in _referenced() if p.suffix == ".png" and not p.is_file())
    assert not missing, missing
