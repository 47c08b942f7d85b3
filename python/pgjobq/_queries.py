"""Named SQL statements, read once from the package's .sql files (queries.sql and those of the extras)."""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # typing.LiteralString is Python 3.11's; annotations are not evaluated at run time
    from typing import LiteralString

__all__ = ["query", "statements"]

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@functools.cache
def statements(package: str, filename: str) -> dict[str, str]:
    """The statements of package's file filename, by the name each follows (a line ``-- name: NAME``)."""
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    parts = _NAME.split(text)
    # parts: [preamble, name1, body1, name2, body2, ...]
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def query(name: str) -> LiteralString:
    """The statement called name in queries.sql (a constant of the package, never user input)."""
    return statements("pgjobq", "queries.sql")[name]  # type checkers read LiteralString as str
