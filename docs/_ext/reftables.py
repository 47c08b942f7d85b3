"""The tables of the generated reference pages (sqlref.py, clickref.py), as docutils nodes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeAlias

from docutils import nodes  # type: ignore[import-untyped]

__all__ = ["Cell", "table"]

# What a cell holds: plain text, or a node of inline content (a literal, a cross-reference)
Cell: TypeAlias = "nodes.Node | str"


def table(headers: Sequence[str], rows: Iterable[Sequence[Cell]], widths: Sequence[int]) -> nodes.table:
    """A table with a header row, the rows given, and the columns' relative widths."""
    result = nodes.table(classes=["jobq-reference"])
    group = nodes.tgroup(cols=len(headers))
    result += group
    for width in widths:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    head += _row(headers)
    group += head
    body = nodes.tbody()
    for cells in rows:
        body += _row(cells)
    group += body
    return result


def _row(cells: Sequence[Cell]) -> nodes.row:
    """A row of the cells, each a paragraph."""
    row = nodes.row()
    for cell in cells:
        paragraph = nodes.paragraph()
        paragraph += nodes.Text(cell) if isinstance(cell, str) else cell
        entry = nodes.entry()
        entry += paragraph
        row += entry
    return row
