"""The example runner itself (runner.py), on small pages written here: what passes, and that a page whose
shown output is not what runs fails, saying where and how."""

from __future__ import annotations

from pathlib import Path

import pytest
from throwaway_pg import find_bindir

from .conftest import PageDatabase
from .runner import (
    Failure,
    collect_pages,
    expand_dots,
    lines_match,
    parse_page,
    run_page,
    split_console,
    split_session,
)

FENCE = "```"


def page(*parts: str) -> str:
    """A Markdown page from its parts; '```' stands for the fence (so the strings stay readable)."""
    return "\n".join(parts) + "\n"


def run(
    text: str, page_database: PageDatabase, folder: Path, *, empty: bool = False, timeout: float = 60
) -> list[Failure]:
    with page_database(empty) as database:
        return run_page(text, "page.md", database, folder, find_bindir(), timeout=timeout)


def only_failure(failures: list[Failure]) -> str:
    assert len(failures) == 1, failures
    return str(failures[0])


# -- parsing ---------------------------------------------------------------------------------------------


def test_the_blocks_of_a_page_are_found_with_their_lines() -> None:
    text = page(
        "# Title",
        "```sql",
        "SELECT 1;",
        "```",
        "~~~python",
        "print(1)",
        "~~~",
        "````markdown",
        "```sql",
        "not a block of its own",
        "```",
        "````",
        "- item",
        "",
        "   ```console",
        "   $ true",
        "   ```",
    )
    found = [(block.info, block.line, block.text) for block in parse_page(text, "p.md").blocks]
    assert found == [
        ("sql", 2, "SELECT 1;\n"),
        ("python", 5, "print(1)\n"),
        ("markdown", 8, "```sql\nnot a block of its own\n```\n"),
        ("console", 15, "$ true\n"),
    ]


def test_a_skip_directive_leaves_the_next_block_out_with_its_reason() -> None:
    text = page("<!-- doctest: skip: needs Kubernetes -->", "", "```console", "$ kubectl apply", "```")
    parsed = parse_page(text, "p.md")
    assert parsed.runnable == []
    assert [(block.line, block.skip) for block in parsed.skipped] == [(3, "needs Kubernetes")]


def test_a_skip_directive_without_a_reason_has_an_empty_reason() -> None:
    parsed = parse_page(page("<!-- doctest: skip -->", "```sql", "SELECT 1;", "```"), "p.md")
    assert [block.skip for block in parsed.skipped] == [""]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (page("<!-- doctest: skipp: typo -->"), "p.md:1: unknown doctest directive 'skipp: typo'"),
        (
            page("<!-- doctest: skip: why -->", "text", "```sql", "SELECT 1;", "```"),
            "p.md:1: a skip directive not followed",
        ),
        (
            page("<!-- doctest: skip: why -->", "```text", "shown", "```"),
            "p.md:1: a skip directive before a ```text block, which is only shown",
        ),
        (
            page("<!-- doctest skip: no colon -->"),
            "p.md:1: '<!-- doctest skip: no colon -->' is not a doctest",
        ),
        (page("```sql", "SELECT 1;"), "p.md:1: the ```sql block opened here is never closed"),
        (page("```py", "print(1)", "```"), "p.md:1: unknown info string ```py: write ```sql, ```python"),
        (page("```", "SELECT 1;", "```"), "p.md:1: a block without an info string"),
        (page("```sql", "", "```"), "p.md:1: the ```sql block is empty"),
        (
            page("```{code-block} python", "print(1)", "```"),
            "p.md:1: ```{code-block} python shows python that never runs",
        ),
        (
            page("```{eval-rst}", ".. code-block:: sql", "", "   SELECT 1;", "```"),
            "p.md:1: a code-block directive in it shows sql that never runs",
        ),
        (
            page("```python", "# file: ../outside.py", "x = 1", "```"),
            "p.md:1: '# file: ../outside.py' must name a file inside the page's folder",
        ),
    ],
    ids=[
        "unknown directive",
        "skip before text",
        "skip before a shown block",
        "a directive misspelt",
        "unclosed fence",
        "unknown info string",
        "no info string",
        "empty block",
        "code-block directive",
        "code-block in eval-rst",
        "file out of the folder",
    ],
)
def test_a_markup_mistake_is_an_error_of_the_page(text: str, error: str) -> None:
    errors = parse_page(text, "p.md").errors
    assert len(errors) == 1
    assert errors[0].startswith(error)


def test_shown_blocks_and_myst_directives_are_no_error() -> None:
    text = page("```text", "out", "```", "```yaml", "a: 1", "```", "```{include} ../README.md", "```")
    assert parse_page(text, "p.md").errors == []


def test_a_markup_mistake_fails_the_page_naming_its_line(page_database: PageDatabase, tmp_path: Path) -> None:
    assert only_failure(run(page("# Title", "```pyhton", "print(1)", "```"), page_database, tmp_path)) == (
        "page.md:2: unknown info string ```pyhton: write ```sql, ```python or ```console to run the block,"
        " or one of diff, dockerfile, ini, json, markdown, sh, text, toml, yaml to show it"
    )


def test_the_pages_are_the_readme_contributing_the_docs_and_what_they_include(tmp_path: Path) -> None:
    (tmp_path / "docs" / "_build").mkdir(parents=True)
    for name in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "docs/b.md", "docs/_build/built.md"):
        (tmp_path / name).write_text("# Title\n")
    (tmp_path / "docs" / "a.md").write_text(page("```{include} ../CHANGELOG.md", "```"))
    pages = collect_pages(tmp_path)
    assert list(pages) == ["README.md", "CONTRIBUTING.md", "docs/a.md", "docs/b.md", "CHANGELOG.md"]


def test_the_empty_database_directive_is_read() -> None:
    assert parse_page(page("<!-- doctest: empty-database -->", "# Title"), "p.md").empty_database


def test_a_session_is_split_into_statements_and_output() -> None:
    session = page(
        "-- a comment",
        "SELECT jobq.enqueue('emails', '{}');  -- trailing; comment",
        " enqueue",
        "---------",
        "       1",
        "",
        "CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$",
        "BEGIN",
        "  RETURN NEW;",
        "END $$;",
        "\\x",
        "select 'a;",
        "b';",
        "ERROR:  something",
        "SELECT 1 \\gx",
    )
    assert split_session(session) == [
        "-- a comment",
        "SELECT jobq.enqueue('emails', '{}');  -- trailing; comment",
        "CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n  RETURN NEW;\nEND $$;",
        "\\x",
        "select 'a;\nb';",
        "SELECT 1 \\gx",
    ]


def test_a_statement_that_never_ends_is_an_error() -> None:
    with pytest.raises(ValueError, match="never ends: end it with ';'"):
        split_session("SELECT 1\n")


def test_a_console_block_is_split_into_commands_and_their_output() -> None:
    commands = split_console(page("$ pip install pgjobq-py", "done", "$ echo a \\", "  b", "a b"))
    assert [(c.command, c.shown, c.setup) for c in commands] == [
        ("pip install pgjobq-py", ["done"], True),
        ("echo a \\\n  b", ["a b"], False),
    ]


@pytest.mark.parametrize(
    ("expected", "actual", "result"),
    [
        (["a", "...", "d"], ["a", "b", "c", "d"], (True, 3)),
        (["a", "...", "b"], ["a", "b"], (True, 3)),
        (["...", "x"], ["a", "b"], (False, 1)),
        (["a", "b"], ["a", "c"], (False, 1)),
        (["a"], ["a", "b"], (False, 1)),
    ],
    ids=["dots match lines", "dots match none", "after the dots", "a changed line", "more output"],
)
def test_expected_lines_match_with_dots_for_any_lines(
    expected: list[str], actual: list[str], result: tuple[bool, int]
) -> None:
    assert lines_match(expected, actual) == result


# -- sql blocks ------------------------------------------------------------------------------------------

SESSION = page(
    FENCE + "sql",
    "SELECT jobq.enqueue('emails', '{\"to\": \"ada@example.com\"}');",
    " enqueue",
    "---------",
    "       1",
    "",
    "SELECT id, queue, status FROM jobq.jobs;",
    " id | queue  | status",
    "----+--------+--------",
    "  1 | emails | queued",
    "",
    FENCE,
)


def test_a_right_session_passes(page_database: PageDatabase, tmp_path: Path) -> None:
    assert run(SESSION, page_database, tmp_path) == []


def test_a_changed_value_fails_with_a_diff_naming_the_line(
    page_database: PageDatabase, tmp_path: Path
) -> None:
    changed = SESSION.replace("       1", "       2")
    message = only_failure(run(changed, page_database, tmp_path))
    assert message.startswith("page.md:1: ```sql block: the output differs from the page")
    assert "first difference at page.md:5: '2'" in message
    assert "\n-       2\n+       1\n" in message


def test_an_error_shown_as_psql_prints_it_without_context_passes(
    page_database: PageDatabase, tmp_path: Path
) -> None:
    text = page(
        FENCE + "sql",
        "DO $$BEGIN RAISE EXCEPTION 'no such job' USING DETAIL = 'id 42', HINT = 'Check the id.'; END$$;",
        "ERROR:  no such job",
        "DETAIL:  id 42",
        "HINT:  Check the id.",
        FENCE,
    )
    assert run(text, page_database, tmp_path) == []


def test_the_output_of_an_error_is_compared(page_database: PageDatabase, tmp_path: Path) -> None:
    text = page(
        FENCE + "sql",
        "SELECT 1/0;",
        "ERROR:  division by zero",
        "SELECT * FROM nothere;",
        'ERROR:  relation "nothere" does not exist',
        "LINE 1: SELECT * FROM nothere;",
        "                      ^",
        FENCE,
    )
    assert run(text, page_database, tmp_path) == []


def test_a_statement_whose_output_is_not_shown_fails(page_database: PageDatabase, tmp_path: Path) -> None:
    text = page(FENCE + "sql", "SELECT 1 AS one;", "SELECT 2 AS two;", " two", "-----", "   2", FENCE)
    message = only_failure(run(text, page_database, tmp_path))
    assert "first difference at page.md:3: 'SELECT 2 AS two;'" in message
    assert "\n+ one\n+-----\n+   1\n" in message


def test_a_page_without_the_directive_has_pgjobq_and_one_with_it_has_not(
    page_database: PageDatabase, tmp_path: Path
) -> None:
    text = page(
        FENCE + "sql",
        "SELECT count(*) AS installed FROM pg_extension WHERE extname = 'pgjobq';",
        " installed",
        "-----------",
        "         1",
        FENCE,
    )
    assert run(text, page_database, tmp_path) == []
    empty = "<!-- doctest: empty-database -->\n" + text.replace("         1", "         0")
    (tmp_path / "empty").mkdir()
    assert run(empty, page_database, tmp_path / "empty", empty=True) == []


# -- python blocks ---------------------------------------------------------------------------------------

PYTHON = page(
    FENCE + "python",
    "import psycopg",
    "",
    "with psycopg.connect(dsn) as conn:",
    '    count = conn.execute("SELECT count(*) FROM jobq.jobs").fetchone()',
    "print('jobs:', count[0])",
    FENCE,
    "",
    FENCE + "text",
    "jobs: 0",
    FENCE,
    "",
    FENCE + "python",
    "print(count[0] + 1)  # the page's names carry over",
    FENCE,
    FENCE + "text",
    "1",
    FENCE,
)


def test_python_blocks_share_a_namespace_and_show_their_output(
    page_database: PageDatabase, tmp_path: Path
) -> None:
    assert run(PYTHON, page_database, tmp_path) == []


def test_a_changed_printed_value_fails_with_a_diff(page_database: PageDatabase, tmp_path: Path) -> None:
    message = only_failure(run(PYTHON.replace("jobs: 0", "jobs: 3"), page_database, tmp_path))
    assert message.startswith(
        "page.md:1: ```python block: the output differs from the ```text block at line 9"
    )
    assert "first difference at page.md:10: 'jobs: 3'" in message
    assert "\n-jobs: 3\n+jobs: 0" in message


def test_a_dots_line_matches_the_lines_printed_there(page_database: PageDatabase, tmp_path: Path) -> None:
    text = page(
        FENCE + "python",
        "import sys",
        "print('start')",
        "print('12:00:01 a log line', file=sys.stderr)",
        "print('12:00:02 another', file=sys.stderr)",
        "print('end')",
        FENCE,
        FENCE + "text",
        "start",
        "...",
        "end",
        FENCE,
    )
    assert run(text, page_database, tmp_path) == []


def test_a_block_that_prints_without_a_text_block_fails(page_database: PageDatabase, tmp_path: Path) -> None:
    text = page(
        FENCE + "python", "print('hello')", FENCE, "", "Some prose.", "", FENCE + "text", "hello", FENCE
    )
    message = only_failure(run(text, page_database, tmp_path))
    assert "the block prints, and no ```text block right after it shows what: add one" in message
    assert message.endswith("\nhello\n")


def test_an_exception_fails_with_the_traceback_at_the_page_line(
    page_database: PageDatabase, tmp_path: Path
) -> None:
    text = page("# Title", "", FENCE + "python", "x = 1", "y = x / 0", FENCE)
    message = only_failure(run(text, page_database, tmp_path))
    assert message.startswith("page.md:3: ```python block: the block raised:")
    assert 'File "page.md", line 5, in <module>' in message
    assert "ZeroDivisionError: division by zero" in message


def test_a_page_s_python_sees_its_folder_and_not_the_runner_s(
    page_database: PageDatabase, tmp_path: Path
) -> None:
    text = page(
        FENCE + "python",
        "import importlib.util, os, sys",
        "print(sys.path[0] == os.getcwd(), importlib.util.find_spec('pydriver'))",
        FENCE,
        FENCE + "text",
        "True None",
        FENCE,
    )
    assert run(text, page_database, tmp_path) == []


def test_a_file_block_is_written_for_later_blocks_and_commands(
    page_database: PageDatabase, tmp_path: Path
) -> None:
    text = page(
        FENCE + "python",
        "# file: greetings.py",
        "def greet(name: str) -> str:",
        "    return f'hello {name}'",
        FENCE,
        FENCE + "python",
        "from greetings import greet",
        "print(greet('ada'))",
        FENCE,
        FENCE + "text",
        "hello ada",
        FENCE,
        FENCE + "console",
        "$ python -c 'import greetings; print(greetings.greet(\"bob\"))'",
        "hello bob",
        FENCE,
    )
    assert run(text, page_database, tmp_path) == []
    assert (tmp_path / "greetings.py").read_text().startswith("# file: greetings.py\n")


def test_a_block_that_does_not_finish_fails_and_the_page_s_later_python_blocks_do_not_run(
    page_database: PageDatabase, tmp_path: Path
) -> None:
    text = page(FENCE + "python", "import time", "time.sleep(60)", FENCE, FENCE + "python", "x = 1", FENCE)
    first, second = run(text, page_database, tmp_path, timeout=1)
    assert "the block did not finish in 1 s" in str(first)
    assert str(second) == "page.md:5: ```python block: not run: the page's python stopped at page.md:1"


# -- console blocks --------------------------------------------------------------------------------------


def test_commands_run_on_the_page_database_and_show_their_output(
    page_database: PageDatabase, tmp_path: Path
) -> None:
    text = page(
        FENCE + "console",
        "$ python -m venv .venv",
        "$ pip install pgjobq-py",
        "Successfully installed pgjobq-py (shown, not run)",
        "$ psql -Atc 'SELECT jobq.enqueue($$emails$$, $${}$$)'",
        "1",
        "$ pgjobq jobs list --json \\",
        "    | python -c 'import json, sys; print([job[\"queue\"] for job in json.load(sys.stdin)])'",
        "['emails']",
        FENCE,
    )
    failures = run(text, page_database, tmp_path)
    assert failures == []
    assert not (tmp_path / ".venv").exists()


def test_a_changed_command_output_fails_with_a_diff(page_database: PageDatabase, tmp_path: Path) -> None:
    text = page(FENCE + "console", "$ echo one; echo two >&2", "one", "three", FENCE)
    message = only_failure(run(text, page_database, tmp_path))
    assert "first difference at page.md:4: 'three'" in message
    assert "\n-three\n+two" in message


def test_a_command_that_fails_printing_nothing_fails(page_database: PageDatabase, tmp_path: Path) -> None:
    text = page(FENCE + "console", "$ false", '$ false || echo "exit $?"', "exit 1", FENCE)
    message = only_failure(run(text, page_database, tmp_path))
    assert message.startswith("page.md:1: ```console block: `false` exited with status 1 and printed nothing")


def test_a_command_that_ends_the_shell_fails(page_database: PageDatabase, tmp_path: Path) -> None:
    text = page(FENCE + "console", "$ echo bye; exit 0", "bye", "$ echo never", "never", FENCE)
    message = only_failure(run(text, page_database, tmp_path))
    assert "the shell ended during `echo bye; exit 0`, leaving the rest unrun" in message


def test_the_roles_a_page_creates_are_dropped_after_it(page_database: PageDatabase, tmp_path: Path) -> None:
    text = page(FENCE + "sql", "CREATE ROLE app;", "GRANT USAGE ON SCHEMA jobq TO app;", FENCE)
    assert run(text, page_database, tmp_path) == []
    assert run(text, page_database, tmp_path) == []


def test_a_diff_shows_the_lines_a_dots_line_stands_for_as_equal() -> None:
    expected = ["$ pgjobq version", "client: 1.1.0", "...", "done"]
    actual = ["$ pgjobq version", "client: 1.0.0", "server: 15", "log line", "done"]
    assert expand_dots(expected, actual) == [
        "$ pgjobq version",
        "client: 1.1.0",
        "server: 15",
        "log line",
        "done",
    ]
