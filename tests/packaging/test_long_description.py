"""pgjobq-py's description on the package index is the README, with links that work away from the repository.

python/README.md is made from README.md by tools/pypi_readme.py (`make python/README.md`); these tests
fail when it is stale, when a relative link of the README names nothing in the tree, and when the
generator leaves a relative link, a comment, or changes code.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pypi_readme

from helpers.fixtures import REPO_ROOT

GENERATOR = REPO_ROOT / "tools" / "pypi_readme.py"
DOCS = "https://pgjobq.readthedocs.io/"
SOURCE = "https://github.com/pgjobq/pgjobq"


def made(text: str, root: Path = REPO_ROOT) -> str:
    """The description the generator makes of text, for a project published at SOURCE and DOCS."""
    return pypi_readme.description(text, pypi_readme.Addresses(source=SOURCE, documentation=DOCS), root)


def test_python_readme_is_what_the_generator_makes_of_the_readme() -> None:
    result = subprocess.run(
        [sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr


def test_every_relative_link_of_the_readme_names_a_file_or_folder_of_the_tree() -> None:
    targets: list[str] = pypi_readme.relative_targets((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    missing = [target for target in targets if not (REPO_ROOT / target.partition("#")[0]).exists()]
    assert missing == [], f"README.md links to what the tree does not have: {', '.join(missing)}"


def test_python_readme_has_no_relative_link_and_no_comment() -> None:
    text = (REPO_ROOT / "python" / "README.md").read_text(encoding="utf-8")
    assert pypi_readme.relative_targets(text) == []
    assert "<!--" not in text


def test_a_documentation_page_link_goes_to_its_page_on_the_site_with_its_anchor() -> None:
    assert made("See [schedules](docs/howto/schedules.md#cron) now.\n") == (
        "See [schedules](https://pgjobq.readthedocs.io/en/latest/howto/schedules.html#cron) now.\n"
    )


def test_a_link_broken_over_two_lines_is_rewritten() -> None:
    assert made("[running\nworkers](docs/howto/worker.md)\n") == (
        "[running\nworkers](https://pgjobq.readthedocs.io/en/latest/howto/worker.html)\n"
    )


def test_an_image_goes_to_its_raw_file_on_the_main_branch() -> None:
    assert made("![the dashboard](docs/dashboard.png)\n") == (
        "![the dashboard](https://raw.githubusercontent.com/pgjobq/pgjobq/main/docs/dashboard.png)\n"
    )


def test_another_file_or_folder_goes_to_its_page_on_the_main_branch(tmp_path: Path) -> None:
    (tmp_path / "bench").mkdir()
    assert made("[CHANGELOG](CHANGELOG.md), [bench](bench/)\n", tmp_path) == (
        f"[CHANGELOG]({SOURCE}/blob/main/CHANGELOG.md), [bench]({SOURCE}/tree/main/bench)\n"
    )


def test_absolute_links_anchors_code_spans_and_code_blocks_stay_as_they_are() -> None:
    text = (
        "[site](https://example.org/a.md) [here](#quickstart) `[x](docs/a.md)`\n"
        "\n"
        "```python\n"
        "# [y](docs/b.md) <!-- kept -->\n"
        "```\n"
    )
    assert made(text) == text


def test_comments_go_with_the_lines_they_leave_empty() -> None:
    text = (
        "Intro.\n\n<!-- quickstart -->\nStep one.\n<!-- /quickstart -->\n\n<!-- FIGURES -->\n\n"
        "End. <!-- x -->\n"
    )
    assert made(text) == "Intro.\n\nStep one.\n\nEnd. \n"


def test_a_fence_line_with_an_info_string_inside_a_block_does_not_close_it() -> None:
    text = "```text\n```python\n```\n[page](docs/a.md)\n"
    assert made(text) == "```text\n```python\n```\n[page](https://pgjobq.readthedocs.io/en/latest/a.html)\n"
