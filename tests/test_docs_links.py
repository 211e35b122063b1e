"""The user's documents link to what exists: every relative link in README.md and docs/ names a
file or folder of the repository, and every ``#fragment`` into a markdown file names one of its
headings (as GitHub makes fragments of headings)."""

from __future__ import annotations

import functools
import re
from pathlib import Path

from benchmarks.tools.results_page import anchor

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+)$", re.M)


@functools.cache
def headings(path: Path) -> set[str]:
    """The fragments of a markdown file's headings (those inside code blocks left out), read once
    however many links point into it."""
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    return {anchor(title) for title in HEADING.findall(text)}


def broken_links(document: Path) -> list[str]:
    broken = []
    for link in LINK.findall(document.read_text()):
        if re.match(r"[a-z]+:", link):  # https:, mailto:
            continue
        path, _, fragment = link.partition("#")
        target = (document.parent / path).resolve() if path else document
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif fragment and target.suffix == ".md" and fragment.lower() not in headings(target):
            broken.append(f"{link}: no such heading in {target.name}")
    return broken


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_every_link_of_a_document_names_a_file_and_heading_that_exist(document):
    assert broken_links(document) == []


def test_a_broken_link_and_a_missing_heading_are_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## The bias's cost, in β\n\n```\n# not a heading\n```\n")
    document = tmp_path / "doc.md"
    document.write_text(
        "[ok](other.md#the-biass-cost-in-β) [gone](missing.md) [no heading](other.md#not-a-heading) "
        "[web](https://example.org/x#y) [here](#doc)\n\n# Doc\n"
    )
    assert broken_links(document) == [
        "missing.md: no such file",
        "other.md#not-a-heading: no such heading in other.md",
    ]
