"""The README's tasks section quotes the example app's files as they are, so what it shows is what the
example's tests run (tests/tasks/test_tasks_example.py)."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def python_blocks(markdown: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^```python\n(.*?)^```$", markdown, flags=re.M | re.S)]


@pytest.mark.parametrize("example", ["tasks.py", "test_tasks.py"])
def test_the_readme_quotes_the_example_file_whole(example: str) -> None:
    source = (ROOT / "examples" / "tasks_app" / example).read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert source in python_blocks(readme), (
        f"README.md no longer quotes examples/tasks_app/{example} as it is"
    )
