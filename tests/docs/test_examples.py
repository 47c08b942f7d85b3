"""Every example of README.md, CONTRIBUTING.md and docs/**/*.md runs against a real PostgreSQL and shows
what it prints (the rules: runner.py).

One test per page that has a runnable block, named by the page's path (``-k howto/schedules`` runs one
page; PGJOBQ_DOCS_PAGES=PATH[:PATH...] runs those files instead of the tree's pages); one test per
skipped block, which pytest reports as skipped with the directive's reason (and fails when the directive
gives none).  The examples run on the machine's own PostgreSQL only: they show behaviour, and the rest of
the suite covers the other majors.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from throwaway_pg import find_bindir

from .conftest import PageDatabase
from .runner import Block, collect_pages, parse_page, run_page
from helpers.fixtures import REPO_ROOT

# PGJOBQ_DOCS_PAGES (paths, separated by ':') runs those files instead: a page being written elsewhere, or a
# copy with a changed value that must fail
EXTRA = os.environ.get("PGJOBQ_DOCS_PAGES")
PAGES = (
    {str(Path(path)): Path(path).resolve() for path in EXTRA.split(os.pathsep) if path}
    if EXTRA
    else collect_pages(REPO_ROOT)
)
PARSED = {name: parse_page(path.read_text(encoding="utf-8"), name) for name, path in PAGES.items()}
# the pages with a block to run or a markup mistake to report
TESTED = [name for name, page in PARSED.items() if page.runnable or page.errors]
SKIPPED = [block for page in PARSED.values() for block in page.skipped]


@pytest.mark.parametrize("name", TESTED)
def test_examples(name: str, page_database: PageDatabase, tmp_path: Path) -> None:
    page = PARSED[name]
    with page_database(page.empty_database) as database:
        text = PAGES[name].read_text(encoding="utf-8")
        failures = run_page(text, name, database, tmp_path, find_bindir(), PAGES[name])
    if failures:
        pytest.fail("\n\n".join(str(failure) for failure in failures), pytrace=False)


if SKIPPED:  # (an empty parameter set would show as a skip of its own)

    @pytest.mark.parametrize("block", SKIPPED, ids=[block.where for block in SKIPPED])
    def test_skipped_block(block: Block) -> None:
        if not block.skip:
            pytest.fail(f"{block.where}: the skip directive before this block gives no reason", pytrace=False)
        pytest.skip(f"{block.where}: {block.skip}")
