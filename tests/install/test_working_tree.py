"""The test servers run the working tree's SQL, never a script that ``make install`` put into the
machine's PostgreSQL earlier: after an edit of sql/src, ``pytest -k pg15`` runs the edited SQL
(helpers/working_tree.py).

Each test reads, through the test server itself, the extension files it would install from.
"""

from __future__ import annotations

from pgjobq._install import build

from helpers.sqlhelpers import Db, scalar
from helpers.working_tree import REPO_ROOT, current_version


def served(db: Db, name: str) -> str:
    """The text of the file name in the test server's extension folder, as the server reads it."""
    share = scalar(db, "SELECT setting FROM pg_config WHERE name = 'SHAREDIR'")
    text: str = scalar(db, "SELECT pg_read_file(%s)", (f"{share}/extension/{name}",))
    return text


def test_the_test_server_offers_the_version_of_the_working_tree_control_file(db: Db) -> None:
    offered = scalar(db, "SELECT default_version FROM pg_available_extensions WHERE name = 'pgjobq'")

    assert offered == current_version()


def test_the_script_the_test_server_installs_is_the_one_built_from_sql_src(db: Db) -> None:
    version = current_version()
    built = build.script(version, build.read_sources(REPO_ROOT / "sql" / "src"))

    assert served(db, build.script_name(version)) == built


def test_the_released_scripts_the_test_server_has_are_those_of_sql_updates(db: Db) -> None:
    released = sorted((REPO_ROOT / "sql" / "updates").glob("pgjobq--*.sql"))

    assert released, "sql/updates has no scripts"
    assert {path.name: served(db, path.name) for path in released} == {
        path.name: path.read_text(encoding="utf-8") for path in released
    }
