"""The examples of the documentation, run against a real PostgreSQL and compared with what the page shows.

- A page is Markdown.  Its fenced blocks (``` or ~~~) whose info string starts with ``sql``, ``python``
  or ``console`` run, in the order of the page; those of ``SHOWN`` and MyST directives (``{name}``) are
  only shown; any other info string, or none, is an error of the page (a block meant to run must not pass
  unseen as one that is only shown), and so is an empty runnable block.  The directive
  ``<!-- doctest: skip: REASON -->`` on the line before a runnable block (blank lines allowed between)
  leaves that block out; ``<!-- doctest: empty-database -->`` gives the page a database without pgjobq.
  An unknown directive, a skip before no block or before a block that is only shown, and a comment that
  names doctest but is no directive are errors of the page, as is an unclosed fence.
- ``sql``: the block is a psql session as ``psql -X -q -a --pset footer=off -v SHOW_CONTEXT=never``
  prints it.  Its statements (``split_session``) are fed to one psql session, and psql's output (stderr
  merged) is compared with the whole block.
- ``python``: the blocks of a page run in one clean interpreter (pydriver.py), in one namespace with
  ``dsn`` defined; a block starting ``# file: NAME.py`` is written to that file instead.  What a block
  prints is compared with a ```text block that follows it (only blank lines between); a block that prints
  and has no such block fails.
- ``console``: ``$ `` lines are bash commands (a trailing ``\\`` continues one), the lines after each its
  output; machine set-up commands (``SETUP_COMMANDS``) are not run.  A command that exits with a
  non-zero status and prints nothing fails (the page could not show it failed).

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = [
    "BLOCK_TIMEOUT",
    "RUNNABLE",
    "SETUP_COMMANDS",
    "SHOWN",
    "Block",
    "Command",
    "Database",
    "Failure",
    "Page",
    "PythonSession",
    "Ran",
    "collect_pages",
    "compare",
    "environment",
    "expand_dots",
    "included_pages",
    "lines_match",
    "parse_page",
    "run_commands",
    "run_console",
    "run_page",
    "run_process",
    "run_sql",
    "split_console",
    "split_session",
    "write_file_block",
]

RUNNABLE = frozenset({"sql", "python", "console"})
# The info strings of blocks that are shown, not run (a fragment of a file, a crontab line, a manifest)
SHOWN = frozenset({"text", "ini", "yaml", "toml", "json", "dockerfile", "sh", "markdown", "diff"})
# MyST directives that show code in a language of their own: they must not hide a block that should run
CODE_DIRECTIVES = frozenset({"{code-block}", "{code}", "{sourcecode}"})
RST_CODE = re.compile(r"^\s*\.\.\s+(?:code-block|code|sourcecode)::\s*(?P<language>\S+)", re.MULTILINE)
DRIVER = Path(__file__).resolve().with_name("pydriver.py")
BLOCK_TIMEOUT = 120.0  # seconds a block may take (a worker in an example must stop by itself)
COMMAND_ENDED = "@@doctest-command-ended@@"  # what the shell prints after each command, with its status

FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<info>.*?)\s*$")
DIRECTIVE = re.compile(r"^\s*<!--\s*doctest:\s*(?P<body>.*?)\s*-->\s*$")
# a line that looks meant as a directive (a comment naming doctest) but is not one
LIKE_A_DIRECTIVE = re.compile(r"^\s*<!--.*\bdoctest\b", re.IGNORECASE)
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
    info: str  # the info string's first word (sql, python, {include}...)
    text: str
    skip: str | None = None  # the reason of a doctest skip directive before it ("" when none was given)
    argument: str = ""  # the rest of the info string (a directive's argument: {code-block} python)

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
    """What went wrong with one block (a message with a diff or a traceback), or with the page's markup
    (block None: the message names the page and line itself)."""

    block: Block | None
    message: str

    def __str__(self) -> str:
        if self.block is None:
            return self.message
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
    """The blocks and directives of a Markdown page (path names it in messages), and its markup mistakes."""
    lines = text.splitlines()
    page = Page(path, lines=lines)
    pending_skip: tuple[int, str] | None = None  # (line, reason) of a skip directive waiting for its block
    index = 0
    while index < len(lines):
        line = lines[index]
        number = index + 1
        opening = FENCE.match(line)
        if opening is not None and not (opening["fence"][0] == "`" and "`" in opening["info"]):
            block, index = _read_block(page, opening, index)
            if pending_skip is not None:
                block = _skipped(page, block, *pending_skip)
                pending_skip = None
            page.errors += _block_problems(block)
            page.blocks.append(block)
            continue
        directive = DIRECTIVE.match(line)
        if directive is not None:
            body = directive["body"]
            if body == "empty-database":
                page.empty_database = True
            elif body == "skip" or body.startswith(("skip:", "skip ")):
                if pending_skip is not None:
                    page.errors.append(f"{path}:{pending_skip[0]}: a skip directive not followed by a block")
                pending_skip = (number, body[len("skip") :].lstrip(":").strip())
            else:
                page.errors.append(
                    f"{path}:{number}: unknown doctest directive {body!r}"
                    " (known: 'empty-database', 'skip: REASON')"
                )
        elif LIKE_A_DIRECTIVE.match(line):
            page.errors.append(
                f"{path}:{number}: {line.strip()!r} is not a doctest directive: write"
                " '<!-- doctest: skip: REASON -->' or '<!-- doctest: empty-database -->' alone on its line"
            )
        elif line.strip() and pending_skip is not None:
            page.errors.append(f"{path}:{pending_skip[0]}: a skip directive not followed by a block")
            pending_skip = None
        index += 1
    if pending_skip is not None:
        page.errors.append(f"{path}:{pending_skip[0]}: a skip directive not followed by a block")
    return page


def _read_block(page: Page, opening: re.Match[str], index: int) -> tuple[Block, int]:
    """The block whose opening fence is at lines[index], and the index of the line after its closing fence
    (an unclosed block runs to the end of the page, and is an error of the page)."""
    lines = page.lines
    number = index + 1
    indent, fence = len(opening["indent"]), opening["fence"]
    info, _, argument = opening["info"].partition(" ")
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
        page.errors.append(f"{page.path}:{number}: the {fence}{info} block opened here is never closed")
    body = "\n".join(content) + "\n" if content else ""
    return Block(page.path, number, index + 1, info, body, argument=argument.strip()), index + 1


def _skipped(page: Page, block: Block, line: int, reason: str) -> Block:
    """block left out by the skip directive at line; a block that would not run anyway is an error."""
    if block.info not in RUNNABLE:
        page.errors.append(
            f"{page.path}:{line}: a skip directive before a ```{block.info} block, which is only shown,"
            " never run: remove the directive"
        )
        return block
    return replace(block, skip=reason)


def _block_problems(block: Block) -> list[str]:
    """What is wrong with a block for the runner: an info string it does not know (a block that should
    run, misspelt, would pass unseen), an empty runnable block, code shown by a directive in a runnable
    language, a ``# file:`` name leading out of the page's folder."""
    where, info = block.where, block.info
    if info in RUNNABLE:
        problems = [] if block.text.strip() else [f"{where}: the ```{info} block is empty: remove it"]
        named = _file_name(block)
        if named is not None and (named.startswith("/") or ".." in Path(named).parts):
            problems.append(f"{where}: '# file: {named}' must name a file inside the page's folder")
        return problems
    if info == "":
        return [
            f"{where}: a block without an info string: write ```sql, ```python or ```console to run it,"
            f" or one of {', '.join(sorted(SHOWN))} to show it"
        ]
    if info in CODE_DIRECTIVES:
        language, rst = block.argument.split(" ", 1)[0], None
    elif info == "{eval-rst}":
        found = RST_CODE.search(block.text)
        language, rst = (found["language"], found) if found is not None else ("", None)
    elif info.startswith("{") or info in SHOWN:
        return []
    else:
        return [
            f"{where}: unknown info string ```{info}: write ```sql, ```python or ```console to run the"
            f" block, or one of {', '.join(sorted(SHOWN))} to show it"
        ]
    if language in RUNNABLE:
        how = "a code-block directive in it" if rst is not None else f"```{info} {language}"
        return [f"{where}: {how} shows {language} that never runs: write it as a ```{language} block"]
    return []


def _file_name(block: Block) -> str | None:
    """The NAME of a python block starting ``# file: NAME.py`` (written to that file, not run)."""
    if block.info != "python" or not block.text:
        return None
    named = FILE_LINE.match(block.text.splitlines()[0])
    return None if named is None else named["name"]


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
        raise ValueError(
            f"the statement {current[0].strip()!r} never ends: end it with ';' (psql would wait for the rest)"
        )
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
                raise ValueError(
                    f"the line {line!r} comes before any command: start a command with '$ ', and show its"
                    " output after it"
                )
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


@dataclass(frozen=True)
class Ran:
    """What one command of a console block did: its output (stdout and stderr together), its exit status."""

    output: str
    status: int


def run_commands(
    commands: Sequence[str],
    env: Mapping[str, str],
    folder: Path,
    timeout: float,
    prelude: Sequence[str] = (),
) -> tuple[list[Ran], str, bool]:
    """Run commands one after the other in one bash (stdin empty), after prelude's commands (their output
    dropped): what each did, in order (fewer than commands when the shell ended early), what was printed
    after the last one that ended, and whether it all finished within timeout seconds."""
    script = [f"{{ {command}\n}} >/dev/null 2>&1" for command in prelude]
    for command in commands:
        script += [command, f"printf '\\n%s %s\\n' '{COMMAND_ENDED}' \"$?\""]
    output, finished = run_process(
        ["bash", "--noprofile", "--norc", "-c", "\n".join(script)], "", env, folder, timeout
    )
    pieces = re.split(rf"\n{COMMAND_ENDED} (\d+)\n", output)
    ran = [Ran(text, int(status)) for text, status in zip(pieces[0:-1:2], pieces[1::2], strict=True)]
    return ran, pieces[-1], finished


def run_console(
    block: Block,
    env: Mapping[str, str],
    folder: Path,
    timeout: float = BLOCK_TIMEOUT,
    *,
    setup: Callable[[str], str] | None = None,
    prelude: Sequence[str] = (),
) -> Failure | None:
    """Run a ```console block's commands in one bash and compare their output with the block's.

    The set-up commands (SETUP_COMMANDS) are not run, and their shown output stands; given setup, they run
    too, as setup rewrites them, and must exit 0 (their output is still not compared).  prelude's commands
    run first, silently (the shell state of the blocks before).  A command that exits with a non-zero
    status and prints nothing fails: nothing on the page would show that it failed."""
    try:
        commands = split_console(block.text)
    except ValueError as exc:
        return Failure(block, str(exc))
    to_run = [command for command in commands if setup is not None or not command.setup]
    argv = [setup(c.command) if setup is not None and c.setup else c.command for c in to_run]
    results, rest, finished = run_commands(argv, env, folder, timeout, prelude)
    if not finished:
        printed = "".join(result.output for result in results) + rest
        return Failure(block, f"the commands did not finish in {timeout:g} s; their output:\n{printed}")
    if len(results) < len(to_run):
        stopped = to_run[len(results)].command
        return Failure(
            block, f"the shell ended during `{stopped}`, leaving the rest unrun; its output:\n{rest}"
        )
    outcome = dict(zip(map(id, to_run), results, strict=True))
    actual: list[str] = []
    for command in commands:
        ran = outcome.get(id(command))
        if ran is not None and ran.status != 0 and (command.setup or not ran.output.strip()):
            return Failure(block, _failed(command, ran))
        actual += command.prompt
        actual += command.shown if command.setup or ran is None else ran.output.splitlines()
    problem = compare(block.text, actual, block, block.first_line)
    return None if problem is None else Failure(block, problem)


def _failed(command: Command, ran: Ran) -> str:
    """Why a command that exited with a non-zero status fails its block although its output may match."""
    if command.setup:
        return (
            f"`{command.command}` (set-up, which must succeed) exited with status {ran.status}:\n{ran.output}"
        )
    return (
        f"`{command.command}` exited with status {ran.status} and printed nothing, so the page cannot show"
        ' that it failed: fix it, or end it with `|| echo "exit $?"` if failing is the point'
    )


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

    def close(self, grace: float = 10.0) -> None:
        """End the interpreter (given grace seconds to end by itself) and whatever it started."""
        os.close(self.requests)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(grace)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        os.close(self.replies)
        for item in self.capture.iterdir():
            item.unlink()
        self.capture.rmdir()


def _steps(page: Page) -> Iterator[tuple[Block, Block | None]]:
    """Each block that runs with, for a python block, the ```text block right after it (only blank lines
    between) that shows its output."""
    blocks = page.blocks
    for index, block in enumerate(blocks):
        if block.info not in RUNNABLE or block.skip is not None:
            continue
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        shown = None
        if (
            block.info == "python"
            and following is not None
            and following.info == "text"
            and not any(line.strip() for line in page.lines[block.end : following.line - 1])
        ):
            shown = following
        yield block, shown


def write_file_block(block: Block, folder: Path) -> bool:
    """Write a python block starting ``# file: NAME.py`` to folder/NAME.py; whether it was one."""
    name = _file_name(block)
    if name is None:
        return False
    target = folder / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(block.text, encoding="utf-8")
    return True


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
    failures = [Failure(None, error) for error in page.errors]
    env = environment(database, folder, bindir)
    psql = str(bindir / "psql") if bindir is not None and (bindir / "psql").exists() else "psql"
    python: PythonSession | None = None
    stopped: Block | None = None  # the python block after which the page's interpreter was stopped
    try:
        for block, shown in _steps(page):
            if block.info == "sql":
                failure = run_sql(block, env, psql, folder, timeout)
            elif block.info == "console":
                failure = run_console(block, env, folder, timeout)
            elif write_file_block(block, folder):
                continue
            elif stopped is not None:
                failure = Failure(block, f"not run: the page's python stopped at {stopped.where}")
            else:
                if python is None:
                    python = PythonSession(env, folder, source, timeout)
                failure, ended = _run_python(python, block, shown)
                if ended:  # stuck or gone: nothing to wait for
                    python.close(grace=0)
                    python, stopped = None, block
            if failure is not None:
                failures.append(failure)
    finally:
        if python is not None:
            python.close()
    return failures


def _run_python(python: PythonSession, block: Block, shown: Block | None) -> tuple[Failure | None, bool]:
    """Run a python block in the page's interpreter and compare what it prints with shown; the failure,
    and whether the interpreter is gone or stuck (the block did not finish, or it ended)."""
    try:
        output, error = python.run(block)
    except (TimeoutError, RuntimeError) as exc:
        return Failure(block, str(exc)), True
    if error is not None:
        printed = f"\nwhat it printed before:\n{output}" if output.strip() else ""
        return Failure(block, f"the block raised:\n{error}{printed}"), False
    if shown is None:
        if output.strip():
            message = (
                "the block prints, and no ```text block right after it shows what: add one with this"
                " output (a line '...' for lines that change from run to run):\n" + output
            )
            return Failure(block, message), False
        return None, False
    problem = compare(shown.text, output, shown, shown.first_line, f"the ```text block at line {shown.line}")
    return (None if problem is None else Failure(block, problem)), False


def included_pages(page: Path) -> list[Path]:
    """The Markdown files a page's ``{include}`` blocks bring into the site (their examples are shown there
    and must run)."""
    parsed = parse_page(page.read_text(encoding="utf-8"), page.name)
    return [
        (page.parent / block.argument).resolve()
        for block in parsed.blocks
        if block.info == "{include}" and block.argument.endswith(".md")
    ]


def collect_pages(root: Path) -> dict[str, Path]:
    """The pages whose examples run, by path relative to root: README.md, CONTRIBUTING.md, docs/**/*.md
    (the built site in docs/_build left out) and the Markdown files those include, in that order."""
    found = [root / "README.md", root / "CONTRIBUTING.md"]
    found += sorted(
        path for path in (root / "docs").rglob("*.md") if "_build" not in path.relative_to(root).parts
    )
    found += [included for page in found if page.is_file() for included in included_pages(page)]
    return {path.relative_to(root).as_posix(): path for path in found if path.is_file()}
