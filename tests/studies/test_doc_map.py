"""docs/README.md is the doc map: every page of docs/ is listed there with the topic it owns."""

from __future__ import annotations

import re

from tests.helpers import ROOT

DOCS = ROOT / "docs"


def _listed() -> list[str]:
    return re.findall(r"^\| \[([^\]]+)\]\(([^)]+)\) \| (.+) \|$", (DOCS / "README.md").read_text(), re.M)


def test_every_page_is_listed_once_with_what_it_owns():
    listed = _listed()
    names = [link for _, link, _ in listed]
    assert sorted(names) == sorted(p.name for p in DOCS.glob("*.md") if p.name != "README.md")
    assert len(set(names)) == len(names)
    assert all(title == link and owns.strip() for title, link, owns in listed)


def test_the_readme_links_the_doc_map():
    assert "docs/README.md" in (ROOT / "README.md").read_text()
