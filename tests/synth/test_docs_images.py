"""The docs embed only images the repository holds (docs/synthesis.md once embedded a run's histogram)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_embedded_images_are_in_the_repository(doc):
    missing = [src for src in IMAGE.findall(doc.read_text()) if "://" not in src
               and not (doc.parent / src.split("#")[0]).is_file()]
    assert not missing, f"{doc.name} embeds images that are not in the repository: {missing}"
