"""Make python/README.md, pgjobq-py's description on the package index, from the repository's README.md.

The index shows the description away from the repository, so its relative links would lead nowhere. This
rewrites every relative link target to an absolute address built from python/pyproject.toml's
[project.urls] (the only place the addresses are written):

- a documentation page, ``docs/howto/schedules.md#anchor``, to its page on the documentation site,
  ``<Documentation>en/latest/howto/schedules.html#anchor``;
- an image, ``![...](docs/dashboard.png)``, to the file's raw address on the main branch;
- any other file or folder of the repository to its page on the main branch (``<Source>/blob/main/PATH``,
  ``<Source>/tree/main/PATH`` for a folder).

HTML comments (``<!-- quickstart -->``, ``<!-- doctest: ... -->``) are dropped, and a line left empty by
one is dropped with it. Fenced code blocks and inline code spans are copied unchanged.

    python3 tools/pypi_readme.py          # writes python/README.md (make python/README.md)
    python3 tools/pypi_readme.py --check  # exit status 1 and a diff when python/README.md is stale

Standard library only (Python 3.11: tomllib), like the Makefile's other helpers.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import tomllib

__all__ = ["Addresses", "addresses", "description", "main", "relative_targets"]

REPO_ROOT = Path(__file__).resolve().parent.parent
SOURCE = REPO_ROOT / "README.md"
TARGET = REPO_ROOT / "python" / "README.md"
PYPROJECT = REPO_ROOT / "python" / "pyproject.toml"
BRANCH = "main"

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
# [text](target "title") and ![alt](target); the text may run over a line break, never over a blank line
_LINK = re.compile(r"(!?)\[((?:[^\[\]\n]|\n(?!\s*\n))*)\]\(\s*<?([^)\s>]+)>?((?:\s+\"[^\"]*\")?)\s*\)")
_REFERENCE = re.compile(r"^( {0,3}\[[^\]]+\]:\s*)(\S+)(.*)$", re.MULTILINE)
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_ABSOLUTE = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|#|/)")


@dataclass(frozen=True)
class Addresses:
    """Where the repository's files and its documentation are published."""

    source: str  # https://github.com/OWNER/NAME
    documentation: str  # https://HOST/ (the site; pages are under en/latest/)

    def page(self, path: str, anchor: str) -> str:
        """The documentation site's address of docs/<path>.md."""
        return f"{self.documentation.rstrip('/')}/en/latest/{path.removesuffix('.md')}.html{anchor}"

    def file(self, path: str, anchor: str, *, folder: bool) -> str:
        """The repository page of a file or folder, on the main branch."""
        return f"{self.source.rstrip('/')}/{'tree' if folder else 'blob'}/{BRANCH}/{path}{anchor}"

    def raw(self, path: str) -> str:
        """The raw content address of a file on the main branch (images)."""
        owner_name = self.source.rstrip("/").removeprefix("https://github.com/")
        return f"https://raw.githubusercontent.com/{owner_name}/{BRANCH}/{path}"


def addresses(pyproject: Path = PYPROJECT) -> Addresses:
    """The Source and Documentation addresses of pyproject's [project.urls]."""
    urls = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["urls"]
    source = urls["Source"]
    if not source.startswith("https://github.com/"):
        raise ValueError(f"[project.urls] Source must be a https://github.com/ address, got {source!r}")
    return Addresses(source=source, documentation=urls["Documentation"])


def _is_relative(target: str) -> bool:
    return _ABSOLUTE.match(target) is None


def _absolute(target: str, *, image: bool, where: Addresses, root: Path) -> str:
    path, hash_sign, fragment = target.partition("#")
    anchor = f"#{fragment}" if hash_sign else ""
    path = path.removeprefix("./")
    if image:
        return where.raw(path)
    if path.startswith("docs/") and path.endswith(".md"):
        return where.page(path.removeprefix("docs/"), anchor)
    return where.file(path.rstrip("/"), anchor, folder=(root / path).is_dir())


def _closes(fence: str, line: re.Match[str]) -> bool:
    """Whether a fence line closes the block that fence opened: the same character, as many or more, and
    no info string (a line such as ```python inside a ```` block is the block's text)."""
    chars, rest = line.group(1), line.group(2)
    return chars[0] == fence[0] and len(chars) >= len(fence) and not rest.strip()


def _outside_code(text: str) -> list[tuple[bool, str]]:
    """text cut into (is a fenced code block, part), in order."""
    parts: list[tuple[bool, str]] = []
    current: list[str] = []
    fence: str | None = None
    for line in text.splitlines(keepends=True):
        opening = _FENCE.match(line)
        if fence is None and opening is not None:
            parts.append((False, "".join(current)))
            current, fence = [line], opening.group(1)
        elif fence is not None and opening is not None and _closes(fence, opening):
            current.append(line)
            parts.append((True, "".join(current)))
            current, fence = [], None
        else:
            current.append(line)
    parts.append((fence is not None, "".join(current)))
    return [(code, part) for code, part in parts if part]


def _masked(prose: str) -> tuple[str, list[str]]:
    """prose with its inline code spans replaced by placeholders (their text in the list)."""
    spans: list[str] = []

    def keep(match: re.Match[str]) -> str:
        spans.append(match.group(0))
        return f"\x00{len(spans) - 1}\x00"

    return _CODE_SPAN.sub(keep, prose), spans


def _unmasked(prose: str, spans: list[str]) -> str:
    return re.sub(r"\x00(\d+)\x00", lambda match: spans[int(match.group(1))], prose)


def relative_targets(text: str) -> list[str]:
    """The relative link and image targets of a Markdown text (outside code), in order, as written."""
    found: list[str] = []
    for code, part in _outside_code(_COMMENT.sub("", text)):
        if not code:
            prose, _ = _masked(part)
            found += [m.group(3) for m in _LINK.finditer(prose) if _is_relative(m.group(3))]
            found += [m.group(2) for m in _REFERENCE.finditer(prose) if _is_relative(m.group(2))]
    return found


def _rewrite(prose: str, where: Addresses, root: Path) -> str:
    masked, spans = _masked(prose)

    def link(match: re.Match[str]) -> str:
        bang, label, target, title = match.groups()
        if not _is_relative(target):
            return match.group(0)
        return f"{bang}[{label}]({_absolute(target, image=bool(bang), where=where, root=root)}{title})"

    def reference(match: re.Match[str]) -> str:
        head, target, tail = match.groups()
        if not _is_relative(target):
            return match.group(0)
        image = target.lower().endswith((".png", ".svg", ".jpg", ".jpeg", ".gif", ".webp"))
        return f"{head}{_absolute(target, image=image, where=where, root=root)}{tail}"

    masked = _REFERENCE.sub(reference, _LINK.sub(link, masked))
    # a line that held only a comment goes, and blank lines left in a row by that collapse to one
    masked = re.sub(r"^[ \t]*<!--.*?-->[ \t]*\n", "", masked, flags=re.MULTILINE | re.DOTALL)
    masked = _COMMENT.sub("", masked)
    masked = re.sub(r"\n{3,}", "\n\n", masked)
    return _unmasked(masked, spans)


def description(text: str, where: Addresses, root: Path = REPO_ROOT) -> str:
    """The package index's description made of the README text (see the module docstring)."""
    made = "".join(part if code else _rewrite(part, where, root) for code, part in _outside_code(text))
    return made.rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write python/README.md, or with --check say whether it is current."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="do not write: exit 1 with a diff if stale")
    options = parser.parse_args(argv)
    made = description(SOURCE.read_text(encoding="utf-8"), addresses())
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
    if options.check:
        if made == current:
            return 0
        diff = difflib.unified_diff(
            current.splitlines(keepends=True),
            made.splitlines(keepends=True),
            "python/README.md",
            "python/README.md as made from README.md",
        )
        sys.stdout.writelines(diff)
        print("python/README.md is stale: run `make python/README.md` (python3 tools/pypi_readme.py)")
        return 1
    if made != current:
        TARGET.write_text(made, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
