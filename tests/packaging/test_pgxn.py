"""`make dist` builds the PGXN distribution, its META.json follows the PGXN Meta Spec, and it installs.

The distribution is a zip of HEAD's committed files (git archive) under one folder named for the version,
as PGXN requires.  META.json is validated with `jsonschema` against pgjobq's own JSON Schema of the PGXN
Meta Spec 1.0.0, pgxn_meta_spec_1_0_0.schema.json (written from the spec's text; its description says
when); no validator of the spec is on PyPI or in Debian.  The archive is built and installed once:
unpacked, `make install DESTDIR=...` with the machine's pg_config, and the extension it installed created
on a server of its own.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pg_versions
import pytest
import tomllib
from jsonschema import Draft202012Validator
from throwaway_pg import ThrowawayPostgres

from helpers.distributions import run
from helpers.fixtures import REPO_ROOT
from helpers.working_tree import current_version

pytestmark = pytest.mark.xdist_group("pgxn")

SCHEMA = Path(__file__).resolve().with_name("pgxn_meta_spec_1_0_0.schema.json")
MAKE_TIMEOUT = 300.0


def meta_spec_validator() -> Draft202012Validator:
    """A validator of the PGXN Meta Spec 1.0.0, from our schema, itself checked as a Draft 2020-12 schema."""
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def problems(meta: dict[str, Any]) -> list[str]:
    """What the PGXN Meta Spec finds wrong with meta, one line each: `where: what`."""
    errors = meta_spec_validator().iter_errors(meta)
    return sorted(
        f"{'/'.join(map(str, error.absolute_path)) or '(top)'}: {error.message}" for error in errors
    )


def tree_meta() -> dict[str, Any]:
    """The working tree's META.json, read afresh (a test may change it)."""
    meta: dict[str, Any] = json.loads((REPO_ROOT / "META.json").read_text(encoding="utf-8"))
    return meta


def machine_pg_config() -> Path:
    """The machine's pg_config with PGXS: the newest Debian server's, else the one on PATH (given to make
    install as PG_CONFIG, so the Makefile's own pick does not matter)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_config"), key=lambda p: int(p.parts[-3]))
    if found:
        return found[-1]
    on_path = shutil.which("pg_config")
    if on_path is None:
        pytest.fail("no pg_config on this machine (Debian: postgresql-server-dev-N)", pytrace=False)
    return Path(on_path)


@pytest.fixture(scope="module")
def archive() -> Iterator[Path]:
    """The distribution `make dist` builds, in a folder of its own."""
    with tempfile.TemporaryDirectory(prefix="pgjobq-pgxn-") as folder:
        output = run(
            ["make", "--no-print-directory", "dist", f"DIST_DIR={folder}"],
            cwd=REPO_ROOT,
            what="make dist",
            timeout=MAKE_TIMEOUT,
        )
        path = Path(folder) / f"pgjobq-{current_version()}.zip"
        assert str(path) in output
        yield path


def names(archive: Path) -> list[str]:
    """The names of the files and folders in archive."""
    with zipfile.ZipFile(archive) as zipped:
        return zipped.namelist()


def unpack(archive: Path, folder: Path) -> None:
    """Unpack archive into folder as unzip does, the files' modes kept (no unzip program needed)."""
    with zipfile.ZipFile(archive) as zipped:
        for member in zipped.infolist():
            path = Path(zipped.extract(member, folder))
            mode = member.external_attr >> 16 & 0o7777
            if mode and not member.is_dir():
                path.chmod(mode)


def test_meta_json_follows_the_pgxn_meta_spec() -> None:
    assert problems(tree_meta()) == []


# A change to the working tree's META.json (it edits the dict in place; what it returns is ignored)
Change = Callable[[dict[str, Any]], object]

# What breaks the spec, and how the one problem the check reports about it begins
BREAKAGES: dict[str, tuple[Change, str]] = {
    "a required field missing": (
        lambda meta: meta.pop("maintainer"),
        "(top): 'maintainer' is a required property",
    ),
    "a version of two numbers": (
        lambda meta: meta.update(version="0.9"),
        "version: '0.9' does not match",
    ),
    "a version with a newline after it": (
        lambda meta: meta.update(version="0.9.0\n"),
        "version: '0.9.0\\n' does not match",
    ),
    "a path out of the distribution": (
        lambda meta: meta["provides"]["pgjobq"].update(file="../pgjobq.control"),
        "provides/pgjobq/file: '../pgjobq.control' does not match",
    ),
    "a release status the spec does not name": (
        lambda meta: meta.update(release_status="beta"),
        "release_status: 'beta' is not one of ['stable', 'testing', 'unstable']",
    ),
    "an extension without its file": (
        lambda meta: meta["provides"]["pgjobq"].pop("file"),
        "provides/pgjobq: 'file' is a required property",
    ),
    "a key the spec does not define": (
        lambda meta: meta.update(homepage="https://example.org/"),
        "(top): 'homepage' does not match any of the regexes: '^[xX]_'",
    ),
}

# Other forms the spec allows, which the check must accept
ALLOWED: dict[str, Change] = {
    "licenses as a map from name to URI": lambda meta: meta.update(
        license={"PostgreSQL": "https://www.postgresql.org/about/licence"}
    ),
    "licenses as a list": lambda meta: meta.update(license=["postgresql", "mit"]),
    "one maintainer as a string": lambda meta: meta.update(maintainer="Ann Example <ann@example.org>"),
    "version ranges and any version": lambda meta: meta.update(
        prereqs={
            "runtime": {"requires": {"PostgreSQL": ">= 13.0.0, != 14.0.0, < 19.0.0", "plpgsql": "0"}},
            "test": {"recommends": {"pgtap": 0}},
        }
    ),
    "a pre-release version": lambda meta: meta.update(version="1.0.0-beta1"),
    "one file left out of the index as a string": lambda meta: meta.update(no_index={"file": "sql/x.sql"}),
    "a bug tracker's address": lambda meta: meta["resources"].update(
        bugtracker={"mailto": "bugs@example.org"}
    ),
    "a custom key at the top": lambda meta: meta.update(x_ci="github"),
    "a custom key in an extension": lambda meta: meta["provides"]["pgjobq"].update(X_tier=1),
}


@pytest.mark.parametrize(("change", "expected"), BREAKAGES.values(), ids=list(BREAKAGES))
def test_the_meta_spec_check_reports_what_breaks_the_spec(change: Change, expected: str) -> None:
    meta = tree_meta()
    change(meta)
    found = problems(meta)
    assert len(found) == 1 and found[0].startswith(expected), found


@pytest.mark.parametrize("change", ALLOWED.values(), ids=list(ALLOWED))
def test_the_meta_spec_check_accepts_the_other_forms_the_spec_allows(change: Change) -> None:
    meta = tree_meta()
    change(meta)
    assert problems(meta) == []


def test_meta_json_versions_are_the_control_file_s_default_version() -> None:
    meta = tree_meta()
    versions = {meta["version"], *(extension["version"] for extension in meta["provides"].values())}
    assert versions == {current_version()}


def test_meta_json_describes_pgjobq_under_the_postgresql_license_and_names_its_oldest_server() -> None:
    meta = tree_meta()
    assert meta["name"] == "pgjobq"
    assert meta["meta-spec"]["version"] == "1.0.0"
    assert meta["license"] == "postgresql"
    assert (REPO_ROOT / "LICENSE").read_text(encoding="utf-8").startswith("PostgreSQL License")
    assert re.fullmatch(r"\d+\.\d+\.\d+", meta["prereqs"]["runtime"]["requires"]["PostgreSQL"])


def test_meta_json_resources_are_the_project_urls_of_pyproject() -> None:
    pyproject = tomllib.loads((REPO_ROOT / "python" / "pyproject.toml").read_text(encoding="utf-8"))
    urls = pyproject["project"]["urls"]
    resources = tree_meta()["resources"]
    assert resources["repository"]["web"] == urls["Source"]
    assert resources["bugtracker"]["web"] == urls["Issues"]
    assert resources["homepage"] == urls["Documentation"]


def test_make_dist_puts_every_file_under_one_folder_named_for_the_version(archive: Path) -> None:
    tops = {name.split("/", 1)[0] for name in names(archive)}
    assert tops == {f"pgjobq-{current_version()}"}


def test_the_archive_holds_the_files_meta_json_names(archive: Path) -> None:
    top = f"pgjobq-{current_version()}"
    with zipfile.ZipFile(archive) as zipped:
        meta = json.loads(zipped.read(f"{top}/META.json"))
    named = [
        path
        for extension in meta["provides"].values()
        for path in (extension["file"], extension.get("docfile"))
        if path is not None
    ]
    missing = [path for path in named if f"{top}/{path}" not in names(archive)]
    assert missing == []


def test_the_extension_installs_from_the_unpacked_archive(archive: Path) -> None:
    version = current_version()
    pg_config = machine_pg_config()
    with tempfile.TemporaryDirectory(prefix="pgjobq-pgxn-install-") as folder:
        root = Path(folder)
        root.chmod(0o755)  # the server's account reads the copy below
        unpack(archive, root)
        unpacked = root / f"pgjobq-{version}"
        stage = root / "stage"
        run(
            ["make", "--no-print-directory", "install", f"DESTDIR={stage}", f"PG_CONFIG={pg_config}"],
            cwd=unpacked,
            what=f"make install from the unpacked {archive.name}",
            timeout=MAKE_TIMEOUT,
        )
        sharedir = subprocess.run(
            [str(pg_config), "--sharedir"], capture_output=True, text=True, check=True
        ).stdout.strip()
        installed = stage / sharedir.lstrip("/") / "extension"
        files = sorted(installed.glob("pgjobq*"))
        assert {"pgjobq.control", f"pgjobq--{version}.sql"} <= {path.name for path in files}

        bindir = pg_versions.installed_copy(root / "programs", files, bindir=pg_config.parent)
        with ThrowawayPostgres(fast=True, bindir=bindir) as server:
            created = subprocess.run(
                [
                    str(bindir / "psql"),
                    "-X",
                    "-q",
                    "-At",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-c",
                    "CREATE EXTENSION pgjobq",
                    "-c",
                    "SELECT extversion FROM pg_extension WHERE extname = 'pgjobq'",
                    server.dsn(),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
    assert created.returncode == 0, created.stderr
    assert re.fullmatch(rf"{re.escape(version)}\n", created.stdout), created.stdout


def test_the_archive_leaves_out_the_development_harnesses_but_keeps_the_isolation_specs(
    archive: Path,
) -> None:
    top = f"pgjobq-{current_version()}"
    folders = {
        PurePosixPath(name).relative_to(top).parts[:2]
        for name in names(archive)
        if name.count("/") > 1 and not name.endswith("/")
    }
    assert {parts[0] for parts in folders} & {"bench", "demo", "examples", "tools", ".ci"} == set()
    assert {parts for parts in folders if parts[0] == "tests"} == {("tests", "isolation")}
