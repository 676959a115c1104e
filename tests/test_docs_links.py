"""The README and docs/ link only to files and headings that exist, and every page of docs/ is
reachable from the README, so moving a section cannot strand it."""

from __future__ import annotations

import re
from pathlib import Path

from tests.fixtures.processes import PROJECT

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _pages() -> list[Path]:
    return [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [m.group(1) for m in LINK.finditer(text)]


def test_every_relative_link_points_at_a_file_and_heading_that_exist() -> None:
    broken = []
    for page in _pages():
        for link in _links(page):
            if re.match(r"^[a-z]+://|^mailto:", link):
                continue
            path, _, anchor = link.partition("#")
            target = (page.parent / path).resolve() if path else page
            if not target.exists():
                broken.append(f"{page.relative_to(PROJECT)}: {link} (no such file)")
            elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
                broken.append(f"{page.relative_to(PROJECT)}: {link} (no such heading)")
    assert broken == []


def test_every_page_of_docs_is_linked_from_the_readme() -> None:
    linked = {
        (PROJECT / link.partition("#")[0]).resolve() for link in _links(PROJECT / "README.md")
    }
    orphans = [p.name for p in sorted((PROJECT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert orphans == []


def test_the_readme_stays_short() -> None:
    assert len((PROJECT / "README.md").read_bytes()) < 15_000


def test_no_file_cites_a_page_outside_the_repository() -> None:
    """A reader must be able to open what a docstring or a page cites: a Markdown file named in
    capitals (the way notes kept beside a checkout are named) must be one of the repository's."""
    sources = [
        *_pages(),
        *(
            path
            for package in ("pipelines", "quality", "orchestration", "assets", "benchmarks")
            for path in sorted((PROJECT / package).rglob("*.py"))
        ),
        *sorted((PROJECT / "tests").rglob("*.py")),
        *sorted((PROJECT / "scripts").rglob("*")),
    ]
    names = {path.name for path in PROJECT.glob("*.md")} | {
        path.name for path in (PROJECT / "docs").glob("*.md")
    }
    cited = [
        f"{path.relative_to(PROJECT)}: {match.group(0)}"
        for path in sources
        if path.is_file()
        for match in re.finditer(r"\b[A-Z][A-Z_]*\.md\b", path.read_text(errors="replace"))
        if match.group(0) not in names
    ]
    assert cited == []
