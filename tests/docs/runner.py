"""The examples of the documentation, run against a real PostgreSQL and compared with what the page shows.

- A page is Markdown.  Its fenced blocks (``` or ~~~) whose info string starts with ``sql``, ``python``
  or ``console`` run, in the order of the page; any other block is only shown.  The directive
  ``<!-- doctest: skip: REASON -->`` on the line before a block (blank lines allowed between) leaves that
  block out; ``<!-- doctest: empty-database -->`` gives the page a database without pgjobq.
- ``sql``: the block is a psql session as ``psql -X -q -a --pset footer=off -v SHOW_CONTEXT=never``
  prints it.  Its statements (``split_session``) are fed to one psql session, and psql's output (stderr
  merged) is compared with the whole block.
- ``python``: the blocks of a page run in one clean interpreter (pydriver.py), in one namespace with
  ``dsn`` defined; a block starting ``# file: NAME.py`` is written to that file instead.  What a block
  prints is compared with a ```text block that follows it (only blank lines between); a block that prints
  and has no such block fails.
- ``console``: ``$ `` lines are bash commands (a trailing ``\\`` continues one), the lines after each its
  output; machine set-up commands (``SETUP_COMMANDS``) are not run.

Every block runs in the page's folder (its current directory, on PYTHONPATH) with the libpq variables,
DATABASE_URL and PGJOBQ_DSN naming the page's database.  Comparisons ignore trailing spaces and blank
lines, and a line ``...`` in the expected text matches any number of lines.  A failure names the page,
the block's line and the first differing line, and shows a unified diff of what the page shows against
what ran.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "RUNNABLE",
    "SETUP_COMMANDS",
    "Block",
    "Database",
    "Failure",
    "Page",
    "collect_pages",
    "compare",
    "expand_dots",
    "lines_match",
    "parse_page",
    "run_page",
    "split_console",
    "split_session",
]

RUNNABLE = frozenset({"sql", "python", "console"})
DRIVER = Path(__file__).resolve().with_name("pydriver.py")
BLOCK_TIMEOUT = 120.0  # seconds a block may take (a worker in an example must stop by itself)

FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<info>.*?)\s*$")
DIRECTIVE = re.compile(r"^\s*<!--\s*doctest:\s*(?P<body>.*?)\s*-->\s*$")
FILE_LINE = re.compile(r"^#\s*file:\s*(?P<name>[\w./-]+\.py)\s*$")

# The words a psql statement may start with (outside a statement, a line starting with one of them starts
# a statement; psql's output lines never do: they start with a space, a dash, or ERROR:, NOTICE:, ...).
SQL_KEYWORDS = frozenset(
    (
        "ABORT",
        "ALTER",
        "ANALYZE",
        "BEGIN",
        "CALL",
        "CHECKPOINT",
        "CLOSE",
        "CLUSTER",
        "COMMENT",
        "COMMIT",
        "COPY",
        "CREATE",
        "DEALLOCATE",
        "DECLARE",
        "DELETE",
        "DISCARD",
        "DO",
        "DROP",
        "END",
        "EXECUTE",
        "EXPLAIN",
        "FETCH",
        "GRANT",
        "IMPORT",
        "INSERT",
        "LISTEN",
        "LOAD",
        "LOCK",
        "MERGE",
        "MOVE",
        "NOTIFY",
        "PREPARE",
        "REASSIGN",
        "REFRESH",
        "REINDEX",
        "RELEASE",
        "RESET",
        "REVOKE",
        "ROLLBACK",
        "SAVEPOINT",
        "SECURITY",
        "SELECT",
        "SET",
        "SHOW",
        "START",
        "TABLE",
        "TRUNCATE",
        "UNLISTEN",
        "UPDATE",
        "VACUUM",
        "VALUES",
        "WITH",
    )
)
FIRST_WORD = re.compile(r"^([A-Za-z]+)(?![\w])")
COMMENT_LINE = re.compile(r"^--(\s|$)")
DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")

# Console commands that set a machine up; shown, not run (their shown output is not compared).
SETUP_COMMANDS = re.compile(
    r"^(?:pip3?\s|uv\s|pipx\s|virtualenv\s|python3?\s+-m\s+(?:venv|pip)\s|\.\s|source\s|deactivate\b)"
)


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: its info string's first word, its text, where it is."""

    page: str  # the page's path, as shown in messages (relative to the repository)
    line: int  # the line of the opening fence (1-based)
    end: int  # the line of the closing fence
    info: str
    text: str
    skip: str | None = None  # the reason of a doctest skip directive before it ("" when none was given)

    @property
    def first_line(self) -> int:
        """The page line of the block's first text line."""
        return self.line + 1

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass
class Page:
    """A parsed page: its blocks in order, its page-level directives, and what was wrong with its markup."""

    path: str
    blocks: list[Block] = field(default_factory=list)
    empty_database: bool = False
    errors: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @property
    def runnable(self) -> list[Block]:
        """The blocks that run (not skipped)."""
        return [block for block in self.blocks if block.info in RUNNABLE and block.skip is None]

    @property
    def skipped(self) -> list[Block]:
        """The runnable blocks left out by a skip directive."""
        return [block for block in self.blocks if block.info in RUNNABLE and block.skip is not None]


@dataclass(frozen=True)
class Failure:
    """What went wrong with one block: a message (with a diff or a traceback)."""

    block: Block
    message: str

    def __str__(self) -> str:
        return f"{self.block.where}: ```{self.block.info} block: {self.message}"


@dataclass(frozen=True)
class Database:
    """Where a page's examples run: a database on a server, reached as a superuser."""

    host: str
    port: int
    user: str
    dbname: str

    @property
    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user={self.user} dbname={self.dbname}"

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{self.dbname}"


# -- parsing -----------------------------------------------------------------------------------------


def parse_page(text: str, path: str) -> Page:
    """The blocks and directives of a Markdown page (path names it in messages)."""
    lines = text.splitlines()
    page = Page(path, lines=lines)
    pending_skip: tuple[int, str] | None = None  # (line, reason) of a skip directive waiting for its block
    index = 0
    while index < len(lines):
        line = lines[index]
        number = index + 1
        opening = FENCE.match(line)
        if opening is not None and not (opening["fence"][0] == "`" and "`" in opening["info"]):
            indent, fence = len(opening["indent"]), opening["fence"]
            info = opening["info"].split()[0] if opening["info"] else ""
            content: list[str] = []
            index += 1
            while index < len(lines):
                closing = FENCE.match(lines[index])
                if (
                    closing is not None
                    and closing["fence"][0] == fence[0]
                    and len(closing["fence"]) >= len(fence)
                    and not closing["info"]
                ):
                    break
                content.append(_dedent(lines[index], indent))
                index += 1
            else:
                page.errors.append(f"{path}:{number}: the ```{info} block opened here is never closed")
            skip = None
            if pending_skip is not None:
                skip = pending_skip[1]
                pending_skip = None
            body = "\n".join(content) + "\n" if content else ""
            page.blocks.append(Block(path, number, index + 1, info, body, skip))
            index += 1
            continue
        directive = DIRECTIVE.match(line)
        if directive is not None:
            body = directive["body"]
            if body == "empty-database":
                page.empty_database = True
            elif body == "skip" or body.startswith("skip:") or body.startswith("skip "):
                if pending_skip is not None:
                    page.errors.append(f"{path}:{pending_skip[0]}: a skip directive not followed by a block")
                pending_skip = (number, body[len("skip") :].lstrip(":").strip())
            else:
                page.errors.append(
                    f"{path}:{number}: unknown doctest directive {body!r}"
                    " (known: 'empty-database', 'skip: REASON')"
                )
        elif line.strip() and pending_skip is not None:
            page.errors.append(f"{path}:{pending_skip[0]}: a skip directive not followed by a block")
            pending_skip = None
        index += 1
    if pending_skip is not None:
        page.errors.append(f"{path}:{pending_skip[0]}: a skip directive not followed by a block")
    return page


def _dedent(line: str, indent: int) -> str:
    """line without up to indent leading spaces (a fence indented in a list item)."""
    stripped = len(line) - len(line.lstrip(" "))
    return line[min(indent, stripped) :]


def split_session(text: str) -> list[str]:
    """The input psql is given for a ```sql block: its statements, meta-commands and comment lines.

    Outside a statement, a line starting (at its first column) with an SQL keyword starts a statement, which
    ends at the line that ends, outside quotes and comments, with ``;`` (or a ``\\g`` meta-command); a line
    starting with ``\\`` is a meta-command, one starting with ``--`` a comment, each one line.  Every other
    line is psql's output.  Raises ValueError for a statement that never ends.
    """
    statements: list[str] = []
    current: list[str] = []
    state: str | None = None
    for line in text.splitlines():
        if current:
            current.append(line)
            state, ends = _scan(line, state)
            if ends:
                statements.append("\n".join(current))
                current = []
            continue
        word = FIRST_WORD.match(line)
        if line.startswith("\\") or COMMENT_LINE.match(line):
            statements.append(line)
        elif word is not None and word[1].upper() in SQL_KEYWORDS:
            state, ends = _scan(line, None)
            if ends:
                statements.append(line)
            else:
                current = [line]
    if current:
        raise ValueError(f"the statement {current[0].strip()!r} does not end with ';' in the block")
    return statements


def _scan(line: str, state: str | None) -> tuple[str | None, bool]:
    """Scan one line of a statement from state (None, a quote, a dollar tag or '/*'): the state at its end,
    and whether the statement ends there (a ';' or a psql meta-command last, outside quotes and comments)."""
    last = ""
    index = 0
    while index < len(line):
        if state is None:
            char = line[index]
            if line.startswith("--", index):
                break
            if line.startswith("/*", index):
                state, index = "/*", index + 2
                continue
            if char == "\\":
                return None, True  # a meta-command (\g, \gx, \gset ...) ends the statement
            if char in "'\"":
                state = char
            elif char == "$":
                tag = DOLLAR_TAG.match(line, index)
                if tag is not None and not line[index + 1 : index + 2].isdigit():
                    state, index = tag.group(), tag.end()
                    last = "$"
                    continue
            if not char.isspace():
                last = char
            index += 1
        else:
            closing = "*/" if state == "/*" else state
            found = line.find(closing, index)
            if found < 0:
                return state, False
            index = found + len(closing)
            if state in ("'", '"') and line.startswith(state, index):
                index += 1  # a doubled quote inside the string
                continue
            if state != "/*":
                last = closing[-1]
            state = None
    return state, state is None and last == ";"


@dataclass(frozen=True)
class Command:
    """One ``$`` command of a console block, with the output the page shows for it."""

    prompt: list[str]  # the page's lines of the command, prompt included
    command: str  # the command as bash gets it
    shown: list[str]  # the output the page shows
    setup: bool  # a machine set-up command: shown, not run


def split_console(text: str) -> list[Command]:
    """The commands of a ```console block.  Raises ValueError for text before the first ``$`` line."""
    commands: list[Command] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.startswith("$ ") and line.rstrip() != "$":
            if line.strip():
                raise ValueError(f"the line {line!r} comes before any '$ ' command")
            index += 1
            continue
        prompt = [line]
        while prompt[-1].endswith("\\") and index + 1 < len(lines):
            index += 1
            prompt.append(lines[index])
        index += 1
        shown = []
        while index < len(lines) and not lines[index].startswith("$ "):
            shown.append(lines[index])
            index += 1
        command = "\n".join([prompt[0][2:], *prompt[1:]])
        commands.append(Command(prompt, command, shown, SETUP_COMMANDS.match(command.lstrip()) is not None))
    return commands


# -- comparing -----------------------------------------------------------------------------------------


def _significant(text: str | Sequence[str]) -> list[tuple[int, str]]:
    """The lines that count, with their index: trailing spaces cut, blank lines left out."""
    lines = text.splitlines() if isinstance(text, str) else text
    return [(index, line.rstrip()) for index, line in enumerate(lines) if line.strip()]


def lines_match(expected: Sequence[str], actual: Sequence[str]) -> tuple[bool, int]:
    """Whether actual matches expected, where an expected line ``...`` matches any lines (none too); and
    the index of the first expected line no way of matching got past (len(expected) on a match)."""
    positions = {0}  # the indexes into actual that the expected lines so far can end at
    for index, line in enumerate(expected):
        if line == "...":
            positions = set(range(min(positions), len(actual) + 1))
        else:
            positions = {at + 1 for at in positions if at < len(actual) and actual[at] == line}
        if not positions:
            return False, index
    if len(actual) in positions:
        return True, len(expected)
    return False, len(expected)


def expand_dots(expected: Sequence[str], actual: Sequence[str]) -> list[str]:
    """expected with each ``...`` line replaced by the actual lines it stands for, as far as a walk along
    both finds them (up to the next expected line found in actual), so that a diff shows only the lines
    that differ.  For showing a difference only: the comparison is lines_match's."""
    shown: list[str] = []
    at = 0
    for index, line in enumerate(expected):
        if line != "...":
            shown.append(line)
            at += 1
            continue
        following = next((later for later in expected[index + 1 :] if later != "..."), None)
        end = len(actual)
        if following is not None:
            end = next((k for k in range(at, len(actual)) if actual[k] == following), at)
        shown += actual[at:end] if end > at else ["..."]
        at = max(at, end)
    return shown


def compare(
    expected: str | Sequence[str],
    actual: str | Sequence[str],
    block: Block,
    first_line: int,
    shown_in: str = "the page",
) -> str | None:
    """None if actual matches expected (the page's text from page line first_line), else a message with the
    first differing line and a unified diff (blank lines and trailing spaces left out of both)."""
    wanted = _significant(expected)
    got = _significant(actual)
    ok, stop = lines_match([line for _, line in wanted], [line for _, line in got])
    if ok:
        return None
    if stop < len(wanted):
        where = (
            f"first difference at {block.page}:{first_line + wanted[stop][0]}: {wanted[stop][1].strip()!r}"
        )
    else:
        where = "the output goes on after the last line shown"
    diff = difflib.unified_diff(
        expand_dots([line for _, line in wanted], [line for _, line in got]),
        [line for _, line in got],
        f"{block.page}:{block.line} (shown)",
        "actual",
        lineterm="",
        n=3,
    )
    return (
        f"the output differs from {shown_in} ({where}; blank lines and trailing spaces are ignored,"
        " a line '...' matches any lines)\n" + "\n".join(diff)
    )


# -- running -----------------------------------------------------------------------------------------


def environment(database: Database, folder: Path, bindir: Path | None) -> dict[str, str]:
    """The environment of a page's blocks: the libpq variables, DATABASE_URL and PGJOBQ_DSN naming its
    database, the suite's venv (and the server's programs) first on PATH, the page's folder on PYTHONPATH."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("PG", "PYTEST", "DATABASE_URL", "COV_", "VIRTUAL_ENV"))
    }
    venv_bin = Path(sys.executable).parent
    path = [str(venv_bin), *([str(bindir)] if bindir is not None else []), env.get("PATH", os.defpath)]
    env.update(
        PATH=os.pathsep.join(path),
        VIRTUAL_ENV=str(venv_bin.parent),
        PYTHONPATH=str(folder),
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
        PGHOST=database.host,
        PGPORT=str(database.port),
        PGUSER=database.user,
        PGDATABASE=database.dbname,
        DATABASE_URL=database.url,
        PGJOBQ_DSN=database.dsn,
        COLUMNS="100",
        TZ="UTC",
        LC_ALL="C.UTF-8",
    )
    return env


def run_process(
    argv: Sequence[str], stdin: str, env: Mapping[str, str], folder: Path, timeout: float
) -> tuple[str, bool]:
    """Run argv in folder with stdin as its input; its output (stdout and stderr together), and whether it
    finished within timeout seconds.  Whatever it started and left running is killed when it ends."""
    with tempfile.TemporaryFile() as output, tempfile.TemporaryFile() as given:
        given.write(stdin.encode())
        given.seek(0)
        process = subprocess.Popen(
            argv,
            stdin=given,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=folder,
            start_new_session=True,
        )
        try:
            process.wait(timeout)
            finished = True
        except subprocess.TimeoutExpired:
            finished = False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        output.seek(0)
        return output.read().decode(errors="replace"), finished


def run_sql(
    block: Block, env: Mapping[str, str], psql: str, folder: Path, timeout: float = BLOCK_TIMEOUT
) -> Failure | None:
    """Run a ```sql block in one psql session and compare its output with the block."""
    try:
        statements = split_session(block.text)
    except ValueError as exc:
        return Failure(block, str(exc))
    script = "".join(statement + "\n" for statement in statements)
    argv = [psql, "-X", "-q", "-a", "--pset", "footer=off", "-v", "SHOW_CONTEXT=never"]
    output, finished = run_process(argv, script, env, folder, timeout)
    if not finished:
        return Failure(block, f"psql did not finish in {timeout:g} s; its output:\n{output}")
    problem = compare(block.text, output, block, block.first_line)
    return None if problem is None else Failure(block, problem)


def run_console(
    block: Block, env: Mapping[str, str], folder: Path, timeout: float = BLOCK_TIMEOUT
) -> Failure | None:
    """Run a ```console block's commands in one bash and compare their output with the block's."""
    try:
        commands = split_console(block.text)
    except ValueError as exc:
        return Failure(block, str(exc))
    marker = "@@doctest-command-ended@@"
    script = []
    for command in commands:
        if not command.setup:
            script += [command.command, f"printf '\\n%s\\n' '{marker}'"]
    argv = ["bash", "--noprofile", "--norc", "-c", "\n".join(script)]
    output, finished = run_process(argv, "", env, folder, timeout)
    if not finished:
        return Failure(block, f"the commands did not finish in {timeout:g} s; their output:\n{output}")
    outputs = iter(output.split(f"\n{marker}\n"))
    actual: list[str] = []
    for command in commands:
        actual += command.prompt
        actual += command.shown if command.setup else next(outputs, "").splitlines()
    problem = compare(block.text, actual, block, block.first_line)
    return None if problem is None else Failure(block, problem)


class PythonSession:
    """The page's interpreter (pydriver.py): runs python blocks one by one in one namespace."""

    def __init__(
        self, env: Mapping[str, str], folder: Path, source: Path | None = None, timeout: float = BLOCK_TIMEOUT
    ) -> None:
        self.source = source
        self.timeout = timeout
        self.capture = Path(tempfile.mkdtemp(prefix="pgjobq-doctest-"))
        requests_read, self.requests = os.pipe()
        self.replies, replies_write = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, str(DRIVER), str(requests_read), str(replies_write), str(self.capture)],
            stdin=subprocess.DEVNULL,
            env=dict(env),
            cwd=folder,
            pass_fds=(requests_read, replies_write),
            start_new_session=True,
        )
        os.close(requests_read)
        os.close(replies_write)
        self.pending = b""

    def run(self, block: Block) -> tuple[str, str | None]:
        """What the block printed, and its traceback (None if it did not raise).  Raises TimeoutError."""
        request = (
            json.dumps({"code": block.text, "path": str(self.source or block.page), "line": block.first_line})
            + "\n"
        )
        os.write(self.requests, request.encode())
        while b"\n" not in self.pending:
            ready, _, _ = select.select([self.replies], [], [], self.timeout)
            if not ready:
                raise TimeoutError(f"the block did not finish in {self.timeout:g} s")
            chunk = os.read(self.replies, 1 << 16)
            if not chunk:
                raise RuntimeError(f"the page's python interpreter ended (exit status {self.process.wait()})")
            self.pending += chunk
        reply, self.pending = self.pending.split(b"\n", 1)
        answer = json.loads(reply)
        return answer["output"], answer["error"]

    def close(self) -> None:
        """End the interpreter and whatever it started."""
        os.close(self.requests)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        os.close(self.replies)
        for item in self.capture.iterdir():
            item.unlink()
        self.capture.rmdir()


def _python_steps(page: Page) -> Iterator[tuple[Block, Block | None]]:
    """Each runnable block with, for a python block, the ```text block that shows its output."""
    blocks = page.blocks
    for index, block in enumerate(blocks):
        if block.info not in RUNNABLE or block.skip is not None:
            continue
        shown = None
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        if (
            block.info == "python"
            and following is not None
            and following.info == "text"
            and not any(line.strip() for line in page.lines[block.end : following.line - 1])
        ):
            shown = following
        yield block, shown


def run_page(
    text: str,
    path: str,
    database: Database,
    folder: Path,
    bindir: Path | None = None,
    source: Path | None = None,
    timeout: float = BLOCK_TIMEOUT,
) -> list[Failure]:
    """Run every runnable block of the page (text, named path in messages) on database, in folder (its
    current directory, on sys.path); the failures, in page order (empty: the page is right).

    bindir is the server's programs (psql is taken from there); source, the page's file, lets a traceback
    show the page's lines; a block taking more than timeout seconds fails."""
    page = parse_page(text, path)
    failures = [Failure(Block(path, 1, 1, "", ""), error) for error in page.errors]
    env = environment(database, folder, bindir)
    psql = str(bindir / "psql") if bindir is not None and (bindir / "psql").exists() else "psql"
    python: PythonSession | None = None
    try:
        for block, shown in _python_steps(page):
            if block.info == "sql":
                failure = run_sql(block, env, psql, folder, timeout)
            elif block.info == "console":
                failure = run_console(block, env, folder, timeout)
            else:
                named = FILE_LINE.match(block.text.splitlines()[0]) if block.text else None
                if named is not None:
                    target = folder / named["name"]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(block.text, encoding="utf-8")
                    continue
                if python is None:
                    python = PythonSession(env, folder, source, timeout)
                failure = _run_python(python, block, shown)
            if failure is not None:
                failures.append(failure)
    finally:
        if python is not None:
            python.close()
    return failures


def _run_python(python: PythonSession, block: Block, shown: Block | None) -> Failure | None:
    try:
        output, error = python.run(block)
    except (TimeoutError, RuntimeError) as exc:
        return Failure(block, str(exc))
    if error is not None:
        printed = f"\nwhat it printed before:\n{output}" if output.strip() else ""
        return Failure(block, f"the block raised:\n{error}{printed}")
    if shown is None:
        if output.strip():
            return Failure(
                block,
                "the block prints, and no ```text block right after it shows what:\n" + output,
            )
        return None
    problem = compare(shown.text, output, shown, shown.first_line, f"the ```text block at line {shown.line}")
    return None if problem is None else Failure(block, problem)


def collect_pages(root: Path) -> dict[str, Path]:
    """The pages whose examples run, by path relative to root: README.md, CONTRIBUTING.md and docs/**/*.md
    (the built site in docs/_build left out), in that order."""
    found = [root / "README.md", root / "CONTRIBUTING.md"]
    found += sorted(
        path for path in (root / "docs").rglob("*.md") if "_build" not in path.relative_to(root).parts
    )
    return {path.relative_to(root).as_posix(): path for path in found if path.is_file()}
