"""README.md is the front door, not the manual (issue 24): at most 300 lines, its first section the
quickstart that tests/packaging/test_quickstart.py runs from the built wheel."""

from __future__ import annotations

import re

from helpers.fixtures import REPO_ROOT

README = REPO_ROOT / "README.md"
MAX_LINES = 300


def test_the_readme_has_at_most_300_lines() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines: move the rest into a page of docs/"


def test_the_readme_s_first_section_holds_the_quickstart() -> None:
    text = README.read_text(encoding="utf-8")
    sections = [match.start() for match in re.finditer(r"^## ", text, re.MULTILINE)]
    assert text.count("<!-- quickstart -->") == 1, "README.md must mark its quickstart once"
    assert len(sections) >= 2, "README.md has fewer than two sections"
    start = text.index("<!-- quickstart -->")
    assert sections[0] < start < sections[1], "the quickstart is not in README.md's first ## section"
