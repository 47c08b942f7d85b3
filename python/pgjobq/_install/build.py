"""The full install script of the current version, put together from sql/src/: its one builder.

The script is a header naming it, then every ``.sql`` file of ``sql/src/`` in name order, each after a
line naming it.  Three places build it, all through ``script``:

- ``make build`` (and ``make install``), which run this file with the system's ``python3`` before any
  virtualenv exists::

      python3 python/pgjobq/_install/build.py --version 0.9.0 --output sql/pgjobq--0.9.0.sql sql/src

- ``pgjobq._install.plain``, for the plain-SQL and pg_tle installs, from the sources the package ships;
- the tests, for the extension files of every server they start (the working tree's SQL, never a script
  installed earlier).

Standard library only, and no import of pgjobq: it runs from a bare checkout.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importlib.resources.abc is Python 3.11's; annotations are not evaluated at run time
    from importlib.resources.abc import Traversable

__all__ = ["VERSION", "main", "read_sources", "script", "script_name"]

VERSION = re.compile(r"\d+\.\d+\.\d+")  # what default_version holds: three numbers


def script_name(version: str) -> str:
    """The file name of version's full install script: ``pgjobq--<version>.sql``."""
    return f"pgjobq--{version}.sql"


def read_sources(folder: Traversable) -> list[tuple[str, str]]:
    """The ``.sql`` files of folder (``sql/src``) in name order: (file name, text) pairs.

    Raises FileNotFoundError when folder has none.
    """
    entries = sorted((entry for entry in folder.iterdir() if entry.name.endswith(".sql")), key=_name)
    if not entries:
        raise FileNotFoundError(f"no .sql files in {folder}")
    # bytes, decoded: read_text would turn a CRLF into LF, and cat (make build's old rule) keeps it
    return [(entry.name, entry.read_bytes().decode("utf-8")) for entry in entries]


def _name(entry: Traversable) -> str:
    return entry.name


def script(version: str, sources: Iterable[tuple[str, str]]) -> str:
    """The full install script of version: a header, then each source (file name, text), in the order
    given, after a line naming it (``-- sql/src/<name>``).

    Raises ValueError when version is not three numbers such as 0.9.0.
    """
    if VERSION.fullmatch(version) is None:
        raise ValueError(f"version must be three numbers such as 0.9.0, got {version!r}")
    parts = [
        f"/* sql/{script_name(version)}: pgjobq {version}, the job queue in schema jobq.\n"
        " * Built by make from sql/src/: edit those files, not this one. */\n"
    ]
    for name, text in sources:
        parts.append(f"\n-- sql/src/{name}\n\n{text}")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    """The command line: write version's script, built from a source folder, to a file (or stdout)."""
    parser = argparse.ArgumentParser(description="Build pgjobq's full install script from sql/src/.")
    parser.add_argument("--version", required=True, help="the version the script installs, e.g. 0.9.0")
    parser.add_argument("--output", type=Path, help="the file to write (default: standard output)")
    parser.add_argument("sources", type=Path, help="the folder of source files (sql/src)")
    args = parser.parse_args(argv)
    try:
        text = script(args.version, read_sources(args.sources))
    except (OSError, ValueError) as exc:
        parser.exit(1, f"build.py: {exc}\n")
    if args.output is None:
        sys.stdout.write(text)
        return 0
    # written beside the target, then renamed over it: a failed build leaves no half-written script
    partial = args.output.with_name(args.output.name + ".tmp")
    partial.write_bytes(text.encode("utf-8"))
    os.replace(partial, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
