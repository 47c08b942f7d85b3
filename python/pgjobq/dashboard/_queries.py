"""The named SQL statements of dashboard.sql."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pgjobq._queries import statements

if TYPE_CHECKING:  # typing.LiteralString is Python 3.11's; annotations are not evaluated at run time
    from typing import LiteralString

__all__ = ["query"]


def query(name: str) -> LiteralString:
    """The statement called name in dashboard.sql (a constant of the package, never user input)."""
    return statements("pgjobq.dashboard", "dashboard.sql")[name]  # type checkers read LiteralString as str
