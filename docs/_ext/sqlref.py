"""The SQL reference, the privileges table and the error-code table, generated from the catalog.

At build time a throwaway PostgreSQL server (tools/throwaway_pg.py) is started once, with the working
tree's extension (built from sql/src by tests/helpers/working_tree.py, never a copy installed earlier);
``CREATE EXTENSION pgjobq`` runs in it and its catalog is read (``read_catalog``), then the server is
removed.  What the pages show comes from there:

- every public function of schema jobq (name not starting with ``_``): its signature
  (``pg_get_function_arguments``, ``pg_get_function_result``), its ``COMMENT``, the SQLSTATEs it raises
  (read from its source and from the sources of the jobq functions it calls, internal ones included,
  transitively) and the access levels that may call it (one role per level, granted by the level's
  grant function, asked ``has_function_privilege``);
- every public table and view: its comment, its columns and their comments, and what each level may do
  with it;
- the Python exception the client maps each SQLSTATE to (``pgjobq._errors``).

``check`` is the rule the build enforces: a public function without a ``COMMENT``, or one that no level
may call unless its comment says it is the owner's ("Owner or superuser only."), or one that PUBLIC may
execute, is a warning naming it (an error under ``sphinx-build -W``).

Directives: ``jobq-sql-functions``, ``jobq-sql-relations`` (docs/reference/sql.md),
``jobq-sql-privileges`` (privileges.md) and ``jobq-sql-errors`` (errors.md).
"""

from __future__ import annotations

import functools
import re
import secrets
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from docutils import nodes  # type: ignore[import-untyped]
from psycopg import sql
from reftables import table
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from throwaway_pg import ThrowawayPostgres

from helpers.working_tree import servers_run_the_working_tree  # tests/, on sys.path (conf.py)

__all__ = [
    "LEVELS",
    "OWNER_ONLY",
    "Catalog",
    "Column",
    "Function",
    "Level",
    "Relation",
    "check",
    "condition_names",
    "raised_codes",
    "read_catalog",
    "setup",
    "working_tree_catalog",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
SOURCES = REPO_ROOT / "sql" / "src"

# What a function's COMMENT says when only the extension's owner and superusers may call it by design
# (the grant functions): such a function is not an error for having no level.
OWNER_ONLY = "Owner or superuser only."

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Level:
    """An access level: its name in the docs, and the statement that grants it to a role ({role})."""

    name: str
    grant: str


# The levels, as the grant functions of sql/src/70_access.sql give them.  A producer given see_jobs
# also gets the observer's functions (jobq.job, wait, watch).
LEVELS: tuple[Level, ...] = (
    Level("producer", "SELECT jobq.grant_producer({role})"),
    Level("producer with see_jobs", "SELECT jobq.grant_producer({role}, see_jobs => true)"),
    Level("worker", "SELECT jobq.grant_worker({role})"),
    Level("monitor", "SELECT jobq.grant_monitor({role})"),
    Level("admin", "SELECT jobq.grant_admin({role})"),
)

TABLE_PRIVILEGES = ("SELECT", "INSERT", "UPDATE", "DELETE")


@dataclass(frozen=True)
class Function:
    """A public function of schema jobq, as the catalog has it."""

    name: str
    identity: str  # regprocedure: jobq.wait(bigint,interval)
    argument_names: tuple[str, ...]  # its input arguments
    arguments: str  # pg_get_function_arguments: names, types and defaults
    result: str  # pg_get_function_result
    comment: str | None
    raises: tuple[str, ...]  # SQLSTATEs, sorted
    levels: tuple[str, ...]  # the names of the LEVELS that may execute it
    public: bool  # PUBLIC may execute it
    source: str  # the sql/src file that creates it ("" when none does)

    @property
    def callable_by(self) -> str:
        """The levels that may call it, in words."""
        levels = [
            level
            for level in self.levels
            if not (level == "producer with see_jobs" and "producer" in self.levels)
        ]
        if self.public:
            return "everyone (PUBLIC)"
        if not levels:
            return "the extension's owner and superusers only"
        return ", ".join(levels)


@dataclass(frozen=True)
class Column:
    """A column of a public table or view."""

    name: str
    type: str
    comment: str | None


@dataclass(frozen=True)
class Relation:
    """A public table or view of schema jobq."""

    name: str
    kind: str  # "table" or "view"
    comment: str | None
    columns: tuple[Column, ...]
    privileges: tuple[tuple[str, tuple[str, ...]], ...]  # (level name, privileges it has), per level


@dataclass(frozen=True)
class Catalog:
    """What the docs show of an installed pgjobq."""

    functions: tuple[Function, ...]
    relations: tuple[Relation, ...]
    conditions: dict[str, str]  # SQLSTATE -> condition name, from the server's errcodes.txt


# -- reading SQL sources ------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
      (?P<comment>--[^\n]*|/\*.*?\*/)
    | (?P<string>[eE]?'(?:[^']|'')*'|\$(?P<tag>[A-Za-z_]*)\$.*?\$(?P=tag)\$)
    | (?P<ident>"(?:[^"]|"")*")
    """,
    re.VERBOSE | re.DOTALL,
)


def _code(source: str, *, keep_strings: bool) -> str:
    """source without its comments, and without its string literals unless keep_strings (each string
    left as '' so the statement keeps its shape)."""

    def replace(match: re.Match[str]) -> str:
        if match.group("comment") is not None:
            return " "
        if match.group("string") is not None:
            return match.group(0) if keep_strings else "''"
        return match.group(0)

    return _TOKEN.sub(replace, source)


_RAISE = re.compile(r"\bRAISE\b(?P<body>(?:'(?:[^']|'')*'|[^;'])*);", re.IGNORECASE)
_LEVEL = re.compile(r"^\s*(?P<level>DEBUG|LOG|INFO|NOTICE|WARNING|EXCEPTION)\b", re.IGNORECASE)
_ERRCODE = re.compile(r"\bERRCODE\s*(?:=|:=)\s*(?:'(?P<literal>[^']*)'|(?P<variable>\w+))", re.IGNORECASE)
_SQLSTATE_FORM = re.compile(r"^\s*SQLSTATE\s+'(?P<code>[0-9A-Z]{5})'", re.IGNORECASE)
_CONDITION_FORM = re.compile(r"^\s*(?P<name>[a-z_][a-z0-9_]*)\s*(?:USING\b|$)", re.IGNORECASE)
_CALL = re.compile(r"\bjobq\s*\.\s*(?P<name>[a-z_][a-z0-9_]*)\s*\(", re.IGNORECASE)


def raised_codes(source: str, conditions: dict[str, str]) -> set[str]:
    """The SQLSTATEs that the RAISE statements of a PL/pgSQL body raise themselves (not counting the
    functions it calls): ``USING ERRCODE = '22023'`` or ``= 'unique_violation'``, ``RAISE
    unique_violation``, ``RAISE SQLSTATE '22023'``, and P0001 for a RAISE EXCEPTION that names none.
    A code held in a variable (a re-raise of what a called function raised) is left out: the calls are
    followed instead.  conditions maps SQLSTATE to condition name; a condition name that is not in it
    raises ValueError naming it.
    """
    by_name = {name: code for code, name in conditions.items()}

    def code_of(value: str) -> str:
        if re.fullmatch(r"[0-9A-Z]{5}", value):
            return value
        if value.lower() in by_name:
            return by_name[value.lower()]
        raise ValueError(f"RAISE names an unknown condition {value!r}")

    codes: set[str] = set()
    for statement in _RAISE.finditer(_code(source, keep_strings=True)):
        body = statement.group("body")
        if not body.strip():
            continue  # RAISE; re-raises the error being handled
        level = _LEVEL.match(body)
        if level is not None:
            if level.group("level").upper() != "EXCEPTION":
                continue
            body = body[level.end() :]
        errcode = _ERRCODE.search(body)
        if errcode is not None:
            if errcode.group("literal") is not None:
                codes.add(code_of(errcode.group("literal")))
            continue
        sqlstate = _SQLSTATE_FORM.match(body)
        if sqlstate is not None:
            codes.add(sqlstate.group("code"))
            continue
        condition = _CONDITION_FORM.match(body)
        if condition is not None:
            codes.add(code_of(condition.group("name")))
            continue
        codes.add("P0001")  # raise_exception: a RAISE EXCEPTION with a message and no ERRCODE
    return codes


def called_names(source: str) -> set[str]:
    """The names of the jobq functions a body calls (``jobq.name(``), outside comments and strings."""
    return {match.group("name").lower() for match in _CALL.finditer(_code(source, keep_strings=False))}


def defining_files(folder: Path = SOURCES) -> dict[str, list[str]]:
    """Each jobq function's name -> the sql/src files that create it, one per CREATE FUNCTION in the
    order of the script (so the k-th overload created, in oid order, is in the k-th file)."""
    found: dict[str, list[str]] = {}
    create = re.compile(r"\bCREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+jobq\.(\w+)\s*\(", re.IGNORECASE)
    for path in sorted(folder.glob("*.sql")):
        for match in create.finditer(_code(path.read_text(encoding="utf-8"), keep_strings=False)):
            found.setdefault(match.group(1).lower(), []).append(path.name)
    return found


def concern(filename: str, folder: Path = SOURCES) -> str:
    """The concern a sql/src file holds, as its header comment names it: "Queues" for 15_queues.sql
    ("-- Queues: each queue's policy, ..."), else a title made from the file's name."""
    path = folder / filename
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines()[:6]:
            text = line.removeprefix("--").strip()
            if text and not text.startswith("-") and line.startswith("--"):
                title = re.split(r"[:.]", text, maxsplit=1)[0].strip()
                if title and not title.lower().startswith("complain"):
                    return title
    stem = re.sub(r"^\d+_", "", Path(filename).stem)
    return stem.replace("_", " ").capitalize() if stem else "Other"


def condition_names(bindir: Path) -> dict[str, str]:
    """SQLSTATE -> condition name, from the errcodes.txt of the server whose programs are in bindir."""
    share = subprocess.run(
        [str(bindir / "pg_config"), "--sharedir"], capture_output=True, text=True, check=True
    ).stdout.strip()
    path = Path(share) / "errcodes.txt"
    names: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if len(fields) == 4 and re.fullmatch(r"[0-9A-Z]{5}", fields[0]):
            names.setdefault(fields[0], fields[3])
    if not names:
        raise ExtensionError(f"{path} lists no SQLSTATE")
    return names


# -- reading the catalog -------------------------------------------------------------------------------


def _levels_roles(conn: psycopg.Connection[Any]) -> Iterator[tuple[str, str]]:
    """Creates one role per level and grants it, in the current transaction; (level, role) pairs."""
    suffix = secrets.token_hex(4)
    for index, level in enumerate(LEVELS):
        role = f"jobq_docs_{index}_{suffix}"
        conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
        conn.execute(sql.SQL(level.grant).format(role=sql.Literal(role)))
        yield level.name, role


def read_catalog(conn: psycopg.Connection[Any], conditions: dict[str, str]) -> Catalog:
    """What the docs show of the pgjobq installed in conn's database (conn: a superuser, outside a
    transaction).  The level roles are created and granted in a transaction that is rolled back."""
    with conn.transaction(force_rollback=True):
        roles = list(_levels_roles(conn))
        raised = _raised_with_calls(conn, conditions)
        functions = tuple(_functions(conn, roles, raised))
        relations = tuple(_relations(conn, roles))
    return Catalog(functions, relations, conditions)


def _raised_with_calls(
    conn: psycopg.Connection[Any], conditions: dict[str, str]
) -> Callable[[str], set[str]]:
    """What a function body raises: the SQLSTATEs of its own RAISE statements and those of the jobq
    functions it calls, internal ones included, transitively (read from every jobq function's source)."""
    sources: dict[str, list[str]] = {}
    for name, source in conn.execute(
        "SELECT p.proname, p.prosrc FROM pg_proc AS p WHERE p.pronamespace = 'jobq'::regnamespace"
    ):
        sources.setdefault(name, []).append(source)
    direct = {
        name: set().union(*(raised_codes(text, conditions) for text in texts))
        for name, texts in sources.items()
    }
    calls = {name: set().union(*(called_names(text) for text in texts)) for name, texts in sources.items()}

    @functools.cache
    def reach(name: str) -> frozenset[str]:
        """name and the jobq functions it calls, transitively."""
        seen: set[str] = set()
        todo = [name]
        while todo:
            current = todo.pop()
            if current in seen or current not in sources:
                continue
            seen.add(current)
            todo.extend(calls[current])
        return frozenset(seen)

    def raised(source: str) -> set[str]:
        codes = raised_codes(source, conditions)
        for called in called_names(source):
            for reached in reach(called):
                codes |= direct[reached]
        return codes

    return raised


def _has(conn: psycopg.Connection[Any], check: str, *arguments: object) -> bool:
    """What the privilege check function check (has_function_privilege, ...) says of arguments."""
    query = sql.SQL("SELECT {}({})").format(
        sql.Identifier(check), sql.SQL(", ").join(sql.Placeholder() * len(arguments))
    )
    return conn.execute(query, arguments).fetchone() == (True,)


def _functions(
    conn: psycopg.Connection[Any], roles: Sequence[tuple[str, str]], raised: Callable[[str], set[str]]
) -> Iterator[Function]:
    """The public functions of schema jobq, in the order they were created."""
    files = defining_files()
    for row in conn.execute(
        """
        SELECT p.oid, p.proname, p.oid::regprocedure::text,
               ARRAY(SELECT a.name
                       FROM unnest(p.proargnames, p.proargmodes) WITH ORDINALITY AS a(name, mode, n)
                      WHERE a.mode IS NULL OR a.mode <> ALL (ARRAY['o', 't']::"char"[])
                      ORDER BY a.n),
               pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
               obj_description(p.oid, 'pg_proc'), p.prosrc,
               p.proacl IS NULL OR EXISTS (SELECT FROM aclexplode(p.proacl) AS a
                                           WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
          FROM pg_proc AS p
         WHERE p.pronamespace = 'jobq'::regnamespace AND p.proname !~ '^_' AND p.prokind = 'f'
         ORDER BY p.oid
        """
    ).fetchall():
        oid, name, identity, argnames, arguments, result, comment, source, public = row
        files_left = files.get(name, [])
        yield Function(
            name=name,
            identity=identity,
            argument_names=tuple(argnames),
            arguments=arguments,
            result=result,
            comment=comment,
            raises=tuple(sorted(raised(source))),
            levels=tuple(
                level for level, role in roles if _has(conn, "has_function_privilege", role, oid, "EXECUTE")
            ),
            public=public,
            source=files_left.pop(0) if files_left else "",
        )


def _relations(conn: psycopg.Connection[Any], roles: Sequence[tuple[str, str]]) -> Iterator[Relation]:
    """The public tables and views of schema jobq, views first, each by name."""
    for oid, name, kind, comment in conn.execute(
        """
        SELECT c.oid, c.relname, CASE WHEN c.relkind = 'v' THEN 'view' ELSE 'table' END,
               obj_description(c.oid, 'pg_class')
          FROM pg_class AS c
         WHERE c.relnamespace = 'jobq'::regnamespace AND c.relname !~ '^_'
           AND c.relkind = ANY (ARRAY['r', 'p', 'v', 'm'])
         ORDER BY c.relkind = 'v' DESC, c.relname
        """
    ).fetchall():
        columns = tuple(
            Column(*column)
            for column in conn.execute(
                """
                SELECT a.attname, format_type(a.atttypid, a.atttypmod), col_description(a.attrelid, a.attnum)
                  FROM pg_attribute AS a
                 WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
                 ORDER BY a.attnum
                """,
                (oid,),
            ).fetchall()
        )
        privileges = tuple(
            (level, tuple(p for p in TABLE_PRIVILEGES if _has(conn, "has_table_privilege", role, oid, p)))
            for level, role in roles
        )
        yield Relation(name, kind, comment, columns, privileges)


def check(catalog: Catalog) -> list[str]:
    """The problems that fail the build, one sentence each naming the function: no COMMENT, no level
    that may call it (unless its comment says "Owner or superuser only."), executable by PUBLIC."""
    problems: list[str] = []
    for function in catalog.functions:
        if not (function.comment or "").strip():
            problems.append(
                f"{function.identity} has no COMMENT: add COMMENT ON FUNCTION after it in sql/src"
            )
        if function.public:
            problems.append(
                f"{function.identity} may be executed by PUBLIC: REVOKE ALL ... FROM PUBLIC after creating"
                " it, then add it to a level (jobq._level_functions in sql/src/70_access.sql)"
            )
        elif not function.levels and OWNER_ONLY not in (function.comment or ""):
            problems.append(
                f"{function.identity} may be called by no access level: add it to jobq._level_functions"
                f" (sql/src/70_access.sql), or end its COMMENT with {OWNER_ONLY!r} if only the owner may"
                " call it"
            )
    return problems


@functools.cache
def working_tree_catalog() -> Catalog:
    """The catalog of the working tree's pgjobq (sql/src), read once per process from a throwaway
    server started for it and removed at once.  ExtensionError when no server can be started."""
    try:
        with servers_run_the_working_tree() as bindir, ThrowawayPostgres(fast=True) as server:
            conditions = condition_names(bindir)
            with psycopg.connect(server.dsn(), autocommit=True, connect_timeout=30) as conn:
                conn.execute("CREATE EXTENSION pgjobq")
                return read_catalog(conn, conditions)
    except ExtensionError:
        raise
    except Exception as exc:
        raise ExtensionError(
            "the SQL reference (docs/reference/sql.md, privileges.md, errors.md) is generated from the"
            " catalog of a PostgreSQL server started for the build, and none could be started here:"
            f" {type(exc).__name__}: {exc}  (install PostgreSQL with make deps, or set PGJOBQ_PG_BINDIR"
            " to the bin folder of a server)"
        ) from exc


# -- docutils nodes ------------------------------------------------------------------------------------


def _sql_ref(label: str, text: str) -> addnodes.pending_xref:
    """A link to label (sql-enqueue) reading text, as {ref} makes it."""
    ref: addnodes.pending_xref = addnodes.pending_xref(
        "", refdomain="std", reftype="ref", reftarget=label, refexplicit=True, refwarn=True
    )
    ref += nodes.literal(text, text)
    return ref


def _py_ref(target: str) -> addnodes.pending_xref:
    ref: addnodes.pending_xref = addnodes.pending_xref(
        "", refdomain="py", reftype="exc", reftarget=target, refexplicit=False
    )
    ref += nodes.literal(target, target)
    return ref


def _join(items: Sequence[nodes.Node], separator: str = ", ") -> list[nodes.Node]:
    joined: list[nodes.Node] = []
    for index, item in enumerate(items):
        if index:
            joined.append(nodes.Text(separator))
        joined.append(item)
    return joined


def split_top_level(text: str) -> list[str]:
    """text split at its commas outside quotes, parentheses and brackets: the items of an argument list."""
    items, depth, quoted, start = [], 0, False, 0
    for index, char in enumerate(text):
        if char == "'":
            quoted = not quoted
        elif quoted:
            continue
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:index].strip())
            start = index + 1
    if text[start:].strip():
        items.append(text[start:].strip())
    return items


def signature(function: Function) -> str:
    """The function as CREATE FUNCTION would declare it: one argument a line, then what it returns."""
    arguments = split_top_level(function.arguments)
    head = f"jobq.{function.name}({', '.join(arguments)})"
    if len(head) > 80:
        head = f"jobq.{function.name}(\n" + ",\n".join(f"    {a}" for a in arguments) + "\n)"
    result = function.result
    table = re.fullmatch(r"TABLE\((.*)\)", result, re.DOTALL)
    if table is not None:
        columns = split_top_level(table.group(1))
        result = "TABLE (\n" + ",\n".join(f"    {c}" for c in columns) + "\n)"
    return f"{head}\nRETURNS {result}"


def _anchor(label: str) -> str:
    return str(nodes.make_id(label))


def _label(document: nodes.document, node: nodes.Element, label: str) -> None:
    """Makes label (sql-enqueue) an explicit target naming node, for {ref}."""
    node["ids"].append(_anchor(label))
    node["names"].append(label)
    document.note_explicit_target(node)


class _CatalogDirective(SphinxDirective):
    has_content = False
    required_arguments = 0
    optional_arguments = 0

    @property
    def catalog(self) -> Catalog:
        self.env.note_reread()  # generated: read again at every build, never kept from the last one
        return working_tree_catalog()

    def section(self, title: str, anchor: str) -> nodes.section:
        section = nodes.section(ids=[_anchor(anchor)])
        section += nodes.title(title, title)
        return section


class SqlFunctions(_CatalogDirective):
    """One section per public function, grouped by the sql/src file (concern) that creates it."""

    def run(self) -> list[nodes.Node]:
        catalog = self.catalog
        for problem in check(catalog):
            logger.warning(problem, location=self.get_location(), type="jobq", subtype="sql")
        groups: dict[str, list[Function]] = {}
        for function in sorted(catalog.functions, key=lambda f: f.source or "~"):
            groups.setdefault(function.source, []).append(function)
        overloaded = {
            f.name for f in catalog.functions if sum(g.name == f.name for g in catalog.functions) > 1
        }
        labelled: set[str] = set()
        result: list[nodes.Node] = []
        for source, functions in groups.items():
            title = concern(source) if source else "Other"
            group = self.section(title, f"sql-group-{title}")
            result.append(group)
            for function in functions:
                name = f"jobq.{function.name}"
                if function.name in overloaded:
                    name += "(" + ", ".join(function.argument_names) + ")"
                section = self.section(name, f"sql-{function.identity}")
                if function.name not in labelled:
                    labelled.add(function.name)
                    _label(self.state.document, section, f"sql-{function.name}")
                text = signature(function)
                section += nodes.literal_block(text, text, language="sql")
                section += nodes.paragraph("", function.comment or "(no comment)")
                raises = nodes.paragraph()
                raises += nodes.strong("Raises:", "Raises:")
                raises += nodes.Text(" ")
                if function.raises:
                    raises += _join(
                        [
                            _sql_ref(f"sqlstate-{code}", _code_text(code, catalog.conditions))
                            for code in function.raises
                        ]
                    )
                else:
                    raises += nodes.Text("nothing of its own.")
                section += raises
                callers = nodes.paragraph()
                callers += nodes.strong("Callable by:", "Callable by:")
                callers += nodes.Text(f" {function.callable_by}.")
                section += callers
                group += section
        return result


def _code_text(code: str, conditions: dict[str, str]) -> str:
    name = conditions.get(code)
    return f"{code} ({name})" if name else code


class SqlRelations(_CatalogDirective):
    """One section per public table and view: its comment, who may read and write it, its columns."""

    def run(self) -> list[nodes.Node]:
        result: list[nodes.Node] = []
        for relation in self.catalog.relations:
            section = self.section(
                f"jobq.{relation.name} ({relation.kind})", f"sql-view-{relation.name}-section"
            )
            _label(self.state.document, section, f"sql-view-{relation.name}")
            section += nodes.paragraph("", relation.comment or "(no comment)")
            for verb, wanted in (
                ("Readable by", ("SELECT",)),
                ("Writable by", ("INSERT", "UPDATE", "DELETE")),
            ):
                levels = [
                    level
                    for level, privileges in relation.privileges
                    if any(p in privileges for p in wanted) and level != "producer with see_jobs"
                ]
                paragraph = nodes.paragraph()
                paragraph += nodes.strong(f"{verb}:", f"{verb}:")
                paragraph += nodes.Text(
                    " " + (", ".join(levels) if levels else "the extension's owner only") + "."
                )
                section += paragraph
            section += table(
                ["Column", "Type", "Description"],
                [
                    [nodes.literal(c.name, c.name), nodes.literal(c.type, c.type), c.comment or ""]
                    for c in relation.columns
                ],
                [20, 20, 60],
            )
            result.append(section)
        return result


class SqlPrivileges(_CatalogDirective):
    """The functions, and the tables and views, against the access levels."""

    def run(self) -> list[nodes.Node]:
        catalog = self.catalog
        levels = [level.name for level in LEVELS]
        names = [f.name for f in catalog.functions]
        function_rows = []
        for function in sorted(catalog.functions, key=lambda f: (f.name, f.identity)):
            text = f"jobq.{function.name}"
            if names.count(function.name) > 1:
                text = function.identity
            function_rows.append(
                [
                    _sql_ref(f"sql-{function.name}", text),
                    *("yes" if level in function.levels else "" for level in levels),
                ]
            )
        relation_rows = [
            [
                _sql_ref(f"sql-view-{relation.name}", f"jobq.{relation.name}"),
                *(", ".join(privileges) for _, privileges in relation.privileges),
            ]
            for relation in catalog.relations
        ]
        owner_only = [f for f in catalog.functions if not f.levels and not f.public]
        functions = self.section("Functions", "privileges-functions")
        functions += table(["Function", *levels], function_rows, [30] + [14] * len(levels))
        if owner_only:
            note = nodes.paragraph()
            note += nodes.Text("No level may call ")
            note += _join([_sql_ref(f"sql-{f.name}", f"jobq.{f.name}") for f in owner_only])
            note += nodes.Text(": only the extension's owner and superusers may.")
            functions += note
        relations = self.section("Tables and views", "privileges-relations")
        relations += table(["Table or view", *levels], relation_rows, [30] + [14] * len(levels))
        return [functions, relations]


def python_exception(code: str) -> str:
    """The exception the Python client raises for a SQLSTATE: pgjobq's (from pgjobq._errors's mapping),
    else psycopg's."""
    from pgjobq import _errors  # the client's mapping, read where it is kept

    mapped = _errors._BY_SQLSTATE.get(code)
    if mapped is not None:
        return f"pgjobq.{mapped.__name__}"
    try:
        error = psycopg.errors.lookup(code)
    except KeyError:
        return "psycopg.DatabaseError"
    return f"{error.__module__}.{error.__name__}"


class SqlErrors(_CatalogDirective):
    """Every SQLSTATE the extension raises, the functions that raise it and the client's exception;
    then the SQLSTATEs the client maps that only PostgreSQL itself raises."""

    def run(self) -> list[nodes.Node]:
        from pgjobq import _errors

        catalog = self.catalog
        raisers: dict[str, list[str]] = {}
        for function in catalog.functions:
            for code in function.raises:
                if function.name not in raisers.setdefault(code, []):
                    raisers[code].append(function.name)
        mapped_only = sorted(set(_errors._BY_SQLSTATE) - set(raisers))
        rows = []
        for code in sorted(raisers) + mapped_only:
            anchor = nodes.inline()
            target = nodes.target("", "")
            _label(self.state.document, target, f"sqlstate-{code}")
            anchor += target
            anchor += nodes.literal(code, code)
            by: list[nodes.Node] = (
                _join([_sql_ref(f"sql-{name}", name) for name in sorted(raisers[code])])
                if code in raisers
                else [nodes.Text("PostgreSQL itself (no jobq function raises it)")]
            )
            by_cell = nodes.inline()
            by_cell += by
            exception = python_exception(code)
            client: nodes.Node = (
                _py_ref(exception) if exception.startswith("pgjobq.") else nodes.literal(exception, exception)
            )
            rows.append([anchor, catalog.conditions.get(code, "(pgjobq's own)"), by_cell, client])
        return [table(["SQLSTATE", "Condition", "Raised by", "Python exception"], rows, [10, 22, 48, 20])]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("jobq-sql-functions", SqlFunctions)
    app.add_directive("jobq-sql-relations", SqlRelations)
    app.add_directive("jobq-sql-privileges", SqlPrivileges)
    app.add_directive("jobq-sql-errors", SqlErrors)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
