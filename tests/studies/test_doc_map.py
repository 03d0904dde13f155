"""docs/README.md is the doc map: every page of docs/ is listed there with the topic it owns, and every
relative link of the documentation leads to a file that exists (and to a heading of it, for an anchor)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import ROOT

DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "benchmarks" / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _listed() -> list[str]:
    return re.findall(r"^\| \[([^\]]+)\]\(([^)]+)\) \| (.+) \|$", (DOCS / "README.md").read_text(), re.M)


def _prose(text: str) -> str:
    """``text`` without its fenced code blocks and inline code, where a bracket is not a link."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))


def _anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of ``path`` (a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#+ (.+)$", re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


def test_every_page_is_listed_once_with_what_it_owns():
    listed = _listed()
    names = [link for _, link, _ in listed]
    assert sorted(names) == sorted(p.name for p in DOCS.glob("*.md") if p.name != "README.md")
    assert len(set(names)) == len(names)
    assert all(title == link and owns.strip() for title, link, owns in listed)


def test_the_readme_links_the_doc_map_and_the_command_reference():
    text = (ROOT / "README.md").read_text()
    assert "(docs/README.md)" in text and "(docs/cli.md)" in text


def test_every_relative_link_resolves():
    broken = []
    for page in PAGES:
        for target in LINK.findall(_prose(page.read_text())):
            if re.match(r"[a-z]+:", target):
                continue  # a web address
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            if not path.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_anchors_are_githubs():
    page = DOCS / "README.md"
    assert _anchors(page) == {"the-documentation-page-by-page"}
