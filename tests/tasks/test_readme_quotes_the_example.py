"""The tasks how-to (docs/howto/tasks.md) quotes the example app's files by including them whole with MyST's
literalinclude, so what the docs show is what the example's tests run (tests/tasks/test_tasks_example.py)."""

from __future__ import annotations

import pathlib
import re

import pytest

__all__: list[str] = []

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "howto" / "tasks.md"


def literalincludes(markdown: str) -> list[tuple[str, str]]:
    """(the included path, the directive's options) of each literalinclude fence of a MyST page."""
    return [
        (m.group(1).strip(), m.group(2))
        for m in re.finditer(r"^```\{literalinclude\}\s+(\S+)\n((?::.*\n)*)```$", markdown, flags=re.M)
    ]


@pytest.mark.parametrize("example", ["tasks.py", "test_tasks.py"])
def test_the_tasks_howto_includes_the_example_file_whole(example: str) -> None:
    included = dict(literalincludes(PAGE.read_text(encoding="utf-8")))
    path = f"../../examples/tasks_app/{example}"

    assert path in included, f"docs/howto/tasks.md no longer includes examples/tasks_app/{example}"
    assert (PAGE.parent / path).resolve().is_file()
    partial = re.compile(r"^:(lines|start-after|end-before|start-at|end-at|pyobject):", flags=re.M)
    assert not partial.search(included[path]), (
        f"docs/howto/tasks.md includes only part of examples/tasks_app/{example}"
    )
