"""Shared fixtures (a pytest plugin): throwaway PostgreSQL servers, one database per test.

A server is started once per target (as an unprivileged user when the tests
run as root); a template database with the extension installed is built once
per target; every test gets its own database cloned from that template, dropped
after it (Clones).  The servers keep their data in memory where the machine has
a tmpfs with room (in_memory).  tests/conftest.py loads this module
(pytest_plugins), so every test folder has these fixtures.

Targets: every test runs on the machine's own PostgreSQL (Debian's 15).  The
tests of the SQL API (tests/sql), the isolation specs and the install and
upgrade tests (tests/isolation, tests/install/test_installation.py) also run
on every other supported major, 13 to 18 (server builds fetched by
tools/pg_versions.py), unless ``--own-major`` (``make check``) keeps them to
the machine's, and the bad-input table and the state machine of tests/sql once
more on a database installed at the first release and upgraded with ALTER
EXTENSION (ON_THE_UPGRADED_INSTALL).  A major that cannot be had here is
skipped, with the reason, for every test that needs it; where the run requires
the majors (``PGJOBQ_REQUIRE``, helpers/required.py) it fails them instead, and
a download that is not the recorded build (pg_versions.IntegrityError) fails
them everywhere.

Every server runs the working tree's SQL, built from sql/src when the session
starts (helpers/working_tree.py): the machine's own major from a private copy
of it made for the session, each other major from a private copy of its build,
never from what ``make install`` installed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pg_versions
import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row
from pytest_postgresql.executors import NoopExecutor
from pytest_postgresql.janitor import DatabaseJanitor
from throwaway_pg import ThrowawayPostgres, find_bindir

from pgjobq import Job, Worker, WorkerSettings

from helpers import required, working_tree
from helpers.processes import StartWorker, WorkerProcess
from helpers.sqlhelpers import Connect, Db

__all__ = ["FIRST_RELEASE", "RELEASED", "REPO_ROOT", "RunWorker", "Target", "once_per_run"]

RunWorker = Callable[[str, Callable[[Job], object], WorkerSettings], Worker]

REPO_ROOT = Path(__file__).resolve().parents[2]
# the session's copy of the machine's PostgreSQL with the working tree's extension (working_tree)
WORKING_TREE = pytest.StashKey[contextlib.ExitStack]()


def released_versions() -> list[str]:
    """The versions an existing database may have: the first full script's, and each step's start."""
    scripts = [
        path.name.removeprefix("pgjobq--").removesuffix(".sql")
        for path in (REPO_ROOT / "sql" / "updates").glob("pgjobq--*.sql")
    ]
    versions = {name.split("--")[0] for name in scripts}
    return sorted(versions, key=lambda version: tuple(int(part) for part in version.split(".")))


RELEASED = released_versions()
FIRST_RELEASE = RELEASED[0]


@dataclass(frozen=True)
class Target:
    """Where a test runs: a PostgreSQL major (None: the machine's own) and how its template got pgjobq."""

    major: int | None = None
    upgraded_from: str | None = None  # installed at this version, then ALTER EXTENSION pgjobq UPDATE

    @property
    def id(self) -> str:
        name = f"pg{self.major or main_major()}"
        return f"{name}-upgraded" if self.upgraded_from else name


@functools.cache
def main_major() -> int:
    """The major of the machine's own PostgreSQL, the one every test runs on."""
    return ThrowawayPostgres(bindir=find_bindir()).major


# The SQL files that run once more on a database installed at the first release and upgraded: the
# bad-input table (every function's checks) and the state machine (random sequences of every call).
# tests/install/test_installation.py proves the upgraded catalog equal to a fresh one, object by object
# (definitions, privileges, comments, columns, constraints, indexes), so the rest of the SQL tests would
# run the same code again; these two check that the upgraded install also behaves as one.
ON_THE_UPGRADED_INSTALL = {"test_bad_input.py", "test_state_machine.py"}


def targets_for(path: Path, *, other_majors: bool = True) -> list[Target]:
    """The targets of the tests in the file at path (the machine's major only, without other_majors)."""
    layer = path.relative_to(REPO_ROOT / "tests").parts[0]
    majors = pg_versions.MAJORS if other_majors else ()
    others = [Target(major) for major in majors if major != main_major()]
    if layer == "sql":
        upgraded = [Target(upgraded_from=FIRST_RELEASE)] if path.name in ON_THE_UPGRADED_INSTALL else []
        return [Target(), *upgraded, *others]
    if layer == "isolation" or path.name == "test_installation.py":
        return [Target(), *others]
    return [Target()]


def once_per_run(name: str, what: str) -> None:
    """Fail unless this is the first pytest-xdist worker of this run to get here for name.

    A session fixture that runs a harness (the short chaos runs, the failover run) keeps its tests on one
    worker with --dist loadgroup; where that did not hold (pytest 9.2 and pytest-xdist issue 1386), a
    second worker fails them rather than running `what` again.  Nothing to check without pytest-xdist.
    """
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        return
    try:
        (Path(tempfile.gettempdir()) / f"pgjobq-{name}-{run}").touch(exist_ok=False)
    except FileExistsError:
        pytest.fail(
            f"another pytest-xdist worker of this run has {what} already: --dist loadgroup did not keep"
            " its tests together (pytest 9.2 and pytest-xdist issue 1386)"
        )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--require",
        metavar="GROUPS",
        default=None,
        help=f"groups of tests that must not skip, comma-separated, or all: {', '.join(required.GROUPS)}"
        f" (default: ${required.ENVIRONMENT})",
    )
    parser.addoption(
        "--own-major",
        action="store_true",
        help="run the tests on the machine's own PostgreSQL only, leaving the other majors out (make check)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """--require is checked at once and handed on as PGJOBQ_REQUIRE (pytest-xdist workers, nested runs);
    the servers of the session get the working tree's extension (working_tree), handed on the same way."""
    value = config.getoption("--require")
    if value is None:
        value = os.environ.get(required.ENVIRONMENT, "")
    try:
        required.parse(value)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from exc
    os.environ[required.ENVIRONMENT] = value
    try:
        find_bindir()
    except RuntimeError:  # no PostgreSQL server here: the tests that need one fail, saying so
        return
    config.stash[WORKING_TREE] = stack = contextlib.ExitStack()
    try:
        stack.enter_context(working_tree.servers_run_the_working_tree())
    except pg_versions.Unavailable as exc:
        raise pytest.UsageError(f"cannot give the test servers the working tree's extension: {exc}") from exc


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's copy of the machine's PostgreSQL goes (its servers are stopped by then)."""
    stack = config.stash.get(WORKING_TREE, None)
    if stack is not None:
        stack.close()


def pytest_report_header(config: pytest.Config) -> list[str]:
    groups = sorted(required.required())
    lines = [f"required groups ({required.ENVIRONMENT}): {', '.join(groups) if groups else 'none'}"]
    copy = os.environ.get(working_tree.COPY)
    if copy is not None:
        lines.append(f"servers: pgjobq {working_tree.current_version()} from sql/src, in a copy at {copy}")
    return lines


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files that hold slow tests first, each kept whole (their module fixtures are built once):
    under pytest-xdist (make test) the slow tests start while the many quick ones run.

    A test marked edge_releases_elsewhere and parametrized by a released ``version`` runs for every
    release on the machine's major, and for the first and the newest release only on the others (the
    releases between run the same scripts, split at another version)."""
    edges = {RELEASED[0], RELEASED[-1]}
    kept, dropped = [], []
    for item in items:
        params = getattr(item, "callspec", None)
        target = params.params.get("target") if params is not None else None
        if (
            item.get_closest_marker("edge_releases_elsewhere") is not None
            and isinstance(target, Target)
            and target.major is not None
            and params is not None
            and params.params.get("version") not in edges
        ):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
    slow = {item.path for item in items if item.get_closest_marker("slow") is not None}
    items.sort(key=lambda item: item.path not in slow)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "target" in metafunc.fixturenames:
        targets = targets_for(
            Path(metafunc.definition.path), other_majors=not metafunc.config.getoption("own_major")
        )
        if metafunc.definition.get_closest_marker("main_targets") is not None:
            # a second pass over what the other majors already ran: the machine's major, fresh and upgraded
            targets = [t for t in targets if t.major is None]
        metafunc.parametrize("target", targets, ids=[t.id for t in targets], indirect=True, scope="session")


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest) -> Target:
    """The target of this test (see the module docstring)."""
    return getattr(request, "param", Target())


# The test servers keep their data in memory where the machine has room for it in a tmpfs: there a
# file is created in microseconds, where on this machine's disk each openat() that creates one takes
# about 150 us, so that cloning the template (some 360 files) cost a third of a second of system time.
MEMORY = Path("/dev/shm")
MEMORY_NEEDED = 4 * 2**30  # free bytes in it, for the servers of four pytest-xdist workers and more
# ... and, in memory, a bound on the WAL kept between checkpoints (1 GB by default)
IN_MEMORY_SETTINGS = {"max_wal_size": "'128MB'", "min_wal_size": "'32MB'"}


def in_memory() -> bool:
    """Whether MEMORY is a tmpfs with MEMORY_NEEDED free."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
        free = os.statvfs(MEMORY)
    except OSError:
        return False
    tmpfs = any(line.split()[1:3] == [str(MEMORY), "tmpfs"] for line in mounts)
    return tmpfs and free.f_bavail * free.f_frsize >= MEMORY_NEEDED


def throwaway_server(bindir: Path | None = None) -> ThrowawayPostgres:
    """A throwaway server for the tests (its data in memory when there is room)."""
    if in_memory():
        folder = Path(tempfile.mkdtemp(prefix="pgjobq-pg-", dir=MEMORY))
        return ThrowawayPostgres(folder, fast=True, bindir=bindir, settings=IN_MEMORY_SETTINGS)
    return ThrowawayPostgres(fast=True, bindir=bindir)


@pytest.fixture(scope="session")
def pg_server(target: Target) -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL server of our own for the target, for the whole session, with the working tree's
    extension: the machine's major from the session's copy of it (pytest_configure), another from a
    private copy of its build."""
    if target.major is None:
        with throwaway_server() as server:
            yield server
        return
    # not under pytest's own temporary folder: the server's account must reach its programs
    with tempfile.TemporaryDirectory(prefix=f"pgjobq-pg{target.major}-") as folder:
        Path(folder).chmod(0o755)
        try:
            files = working_tree.extension_files(Path(folder) / "extension")
            bindir = pg_versions.private_copy(target.major, Path(folder) / "programs", files)
        except pg_versions.Unavailable as exc:
            required.skip_or_fail("majors", f"PostgreSQL {target.major} is not available here: {exc}")
        with throwaway_server(bindir) as server:
            yield server


@pytest.fixture(scope="session")
def jobq_template(pg_server: ThrowawayPostgres, target: Target) -> Iterator[NoopExecutor]:
    """A template database with pgjobq installed (or installed old and upgraded), cloned for every test."""
    executor = NoopExecutor(
        host=pg_server.host, port=pg_server.port, user=pg_server.user, options="", dbname="pgjobq_test"
    )
    janitor = DatabaseJanitor(
        user=executor.user,
        host=executor.host,
        port=executor.port,
        dbname=executor.template_dbname,
        as_template=True,
    )

    def install(host: str, port: int, user: str, dbname: str, **_: Any) -> None:
        with psycopg.connect(host=host, port=port, user=user, dbname=dbname, autocommit=True) as conn:
            if target.upgraded_from is None:
                conn.execute("CREATE EXTENSION pgjobq")
            else:
                conn.execute(
                    sql.SQL("CREATE EXTENSION pgjobq VERSION {}").format(sql.Literal(target.upgraded_from))
                )
                conn.execute("ALTER EXTENSION pgjobq UPDATE")

    with janitor:
        janitor.load(install)
        yield executor


class Clones:
    """Each test's database on one server: a clone of the template, made before the test, dropped after it.

    One connection to the server's maintenance database is kept for the session and does both (the
    janitor of pytest-postgresql opened two per test, and took three statements to drop a database).
    From 15 on the clone copies the template's files (STRATEGY FILE_COPY): through the WAL, the default,
    it costs a fifth more even in memory.
    """

    def __init__(self, server: ThrowawayPostgres, template: str, name: str) -> None:
        self.server = server
        self.template = template
        self.name = name
        self.admin = psycopg.connect(server.dsn(), autocommit=True)
        create = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(template)
        )
        self.create = create + sql.SQL(" STRATEGY = FILE_COPY") if server.major >= 15 else create
        self.drop = sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name))

    def clone(self) -> None:
        # no session may be left in the template (CREATE DATABASE would refuse to copy it)
        self.admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (self.template,)
        )
        self.admin.execute(self.create)

    def remove(self) -> None:
        """Drop the clone, ending the sessions left in it."""
        self.admin.execute(self.drop)

    def close(self) -> None:
        self.admin.close()


@pytest.fixture(scope="session")
def clones(pg_server: ThrowawayPostgres, jobq_template: NoopExecutor) -> Iterator[Clones]:
    """What makes and drops each test's database on this target's server."""
    made = Clones(pg_server, jobq_template.template_dbname, jobq_template.dbname)
    yield made
    made.close()


@pytest.fixture
def postgresql(clones: Clones) -> Iterator[psycopg.Connection[Any]]:
    """This test's own database, a clone of the template, dropped afterwards; a connection to it."""
    clones.clone()
    try:
        with psycopg.connect(clones.server.dsn(clones.name)) as conn:
            yield conn
    finally:
        clones.remove()


@pytest.fixture
def dsn(postgresql: psycopg.Connection[Any]) -> str:
    """The connection string of this test's database."""
    info = postgresql.info
    return f"host={info.host} port={info.port} user={info.user} dbname={info.dbname}"


@pytest.fixture
def db(dsn: str) -> Iterator[Db]:
    """An autocommit connection to this test's database, rows as dicts."""
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        yield conn


@pytest.fixture
def start_worker(dsn: str, tmp_path: Path) -> Iterator[StartWorker]:
    """Starts real `pgjobq worker helpers.handlers:HANDLER ARGS...` processes; kills those left at the end.

    They work on this test's database unless given another dsn (another role's, a pooler's); name, when
    given, is the worker's --name and names its log.
    """
    started: list[WorkerProcess] = []

    def start(handler: str, *args: str, dsn: str = dsn, name: str | None = None) -> WorkerProcess:
        named = ("--name", name) if name is not None else ()
        log = tmp_path / f"worker-{name if name is not None else len(started)}.log"
        worker = WorkerProcess(dsn, handler, *named, *args, log=log)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


@pytest.fixture
def connect(dsn: str) -> Iterator[Connect]:
    """Opens more connections to this test's database; closes them afterwards."""
    opened: list[psycopg.Connection[Any]] = []

    def _connect(**kwargs: Any) -> psycopg.Connection[Any]:
        kwargs.setdefault("autocommit", True)
        conn = psycopg.connect(dsn, **kwargs)
        opened.append(conn)
        return conn

    yield _connect
    for conn in opened:
        conn.close()


@pytest.fixture
def run_worker() -> Iterator[RunWorker]:
    """Starts Workers on threads of this process; stops and joins them after the test."""
    started: list[tuple[Worker, threading.Thread]] = []

    def run(dsn: str, handler: Callable[[Job], object], settings: WorkerSettings) -> Worker:
        worker = Worker(dsn, handler, settings)
        thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
        thread.start()
        started.append((worker, thread))
        return worker

    yield run
    for worker, _ in started:
        worker.stop()
    for _, thread in started:
        thread.join(60)
        assert not thread.is_alive()
