"""How the commands print what they read: aligned tables, one record as "name: value" lines, and JSON."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta
from typing import Any

import click

from pgjobq._client import sync as client

__all__ = ["duration", "echo_fields", "echo_table", "fields", "json_value", "table_text", "yes_no"]


def echo_table(header: tuple[str, ...], rows: list[tuple[str, ...]], left: tuple[int, ...] = (0,)) -> None:
    """A table: the columns in left (the first one) left-aligned, the others right-aligned."""
    click.echo(table_text(header, rows, left))


def table_text(header: tuple[str, ...], rows: list[tuple[str, ...]], left: tuple[int, ...] = (0,)) -> str:
    """echo_table's text: the columns two spaces apart, each as wide as its widest cell."""
    table = [header, *rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    lines = ("  ".join(cell.ljust(w) if i in left else cell.rjust(w) for i, (cell, w) in
                       enumerate(zip(line, widths, strict=True))).rstrip() for line in table)  # fmt: skip
    return "\n".join(lines)


def fields(row: client.JobState | client.QueueSettings | client.Schedule) -> dict[str, Any]:
    """The row's fields by name, in order (its class's fields, then a subclass's)."""
    return {field.name: getattr(row, field.name) for field in dataclasses.fields(row)}


def echo_fields(record: dict[str, Any], as_json: bool) -> None:
    """One record: as a JSON object, or one "name: value" line per field."""
    if as_json:
        click.echo(json.dumps(record, indent=2, default=json_value, ensure_ascii=False))
        return
    for name, value in record.items():
        if value is None:
            text = "-"
        elif isinstance(value, bool):
            text = yes_no(value)
        elif isinstance(value, timedelta):
            text = duration(value)
        elif isinstance(value, datetime):
            text = value.isoformat()
        elif isinstance(value, (dict, list)) or name == "result":
            text = json.dumps(value, ensure_ascii=False)
        else:
            text = str(value)
        click.echo(f"{name.replace('_', ' ')}: {text}")


def json_value(value: object) -> object:
    """Durations as seconds, moments as ISO 8601; everything else as it is."""
    if isinstance(value, timedelta):
        return round(value.total_seconds(), 3)
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def duration(value: timedelta | None) -> str:
    """A duration as "Ns", N without exponent or trailing zeros ("1209600s", "0.5s"; "-": none)."""
    if value is None:
        return "-"
    return f"{f'{value.total_seconds():.6f}'.rstrip('0').rstrip('.')}s"


def yes_no(value: bool) -> str:
    return "yes" if value else "no"
