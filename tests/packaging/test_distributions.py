"""pgjobq-py's wheel and sdist are what the package index should get, whatever state the tree is in.

Built once (conftest.distributions) from a tree where `make build` left the current version's script and
an editable install left an egg-info naming it: the wheel holds the package's modules and exactly its
data files, the sdist the same package files, check-wheel-contents and `twine check --strict` pass, and
the published metadata offers the user-facing extras only, with classifiers from the index's list.
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath

import pytest
import trove_classifiers

from helpers.distributions import Distributions, built_script_name, run
from helpers.fixtures import REPO_ROOT
from helpers.pythons import SUPPORTED

pytestmark = pytest.mark.xdist_group("pgjobq-py")

PACKAGE = REPO_ROOT / "python" / "pgjobq"
TOOLS = Path(sys.executable).parent  # the suite's venv: twine, check-wheel-contents (the dev group)
# the package's data files, as pgjobq reads them (importlib.resources): its named statements, the
# extension's sources and released scripts (the current script is built from sql/src when needed), the
# dashboard's pages, and the marker that it ships type information
DATA = (
    "py.typed",
    "queries.sql",
    "prometheus.sql",
    "sql/src/*.sql",
    "sql/updates/*.sql",
    "dashboard/dashboard.sql",
    "dashboard/templates/*.html",
    "dashboard/static/*",
    "contrib/django/queries.sql",
)
DIST_INFO = ("METADATA", "WHEEL", "RECORD", "entry_points.txt", "top_level.txt", "licenses/LICENSE")
PUBLISHED_EXTRAS = {"binary", "fast", "async", "metrics", "otel", "web", "cli", "django", "sqlalchemy"}
PROJECT_URLS = {"Homepage", "Documentation", "Source", "Issues", "Changelog"}


def package_files() -> set[str]:
    """What the package is made of in the tree: its modules (not under the sql link) and its data."""
    modules = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] != "sql"
    }
    data = {path.relative_to(PACKAGE).as_posix() for pattern in DATA for path in PACKAGE.glob(pattern)}
    return {f"pgjobq/{name}" for name in modules | data}


def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name for name in archive.namelist() if not name.endswith("/")}


def metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = (name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        return HeaderParser().parsestr(archive.read(name).decode("utf-8"))


def test_the_wheel_holds_the_package_modules_and_exactly_its_data_after_make_build(
    distributions: Distributions,
) -> None:
    assert (distributions.tree / "sql" / built_script_name()).exists()  # the tree is in that state
    names = wheel_names(distributions.wheel)
    dist_info = {name for name in names if name.split("/")[0].endswith(".dist-info")}
    assert {name.split("/", 1)[1] for name in dist_info} == set(DIST_INFO)
    assert names - dist_info == package_files()


def test_the_sdist_holds_the_same_package_files_as_the_wheel(distributions: Distributions) -> None:
    with tarfile.open(distributions.sdist) as archive:
        members = {PurePosixPath(member.name) for member in archive.getmembers() if member.isfile()}
    in_package = {"/".join(path.parts[1:]) for path in members if path.parts[1] == "pgjobq"}
    assert f"pgjobq/sql/{built_script_name()}" not in in_package
    assert in_package == package_files()


def test_check_wheel_contents_passes_with_the_django_migration_as_its_one_ignored_warning(
    distributions: Distributions,
) -> None:
    config = REPO_ROOT / "python" / "pyproject.toml"
    run(
        [str(TOOLS / "check-wheel-contents"), "--config", str(config), str(distributions.wheel)],
        cwd=distributions.tree,
        what="check-wheel-contents",
    )


def test_twine_check_strict_passes_on_the_wheel_and_the_sdist(distributions: Distributions) -> None:
    output = run(
        [str(TOOLS / "twine"), "check", "--strict", str(distributions.wheel), str(distributions.sdist)],
        cwd=distributions.tree,
        what="twine check --strict",
    )
    assert output.count("PASSED") == 2, output


def test_the_published_extras_are_the_users_ones_only(distributions: Distributions) -> None:
    meta = metadata(distributions.wheel)
    assert set(meta.get_all("Provides-Extra") or []) == PUBLISHED_EXTRAS
    requirements = meta.get_all("Requires-Dist") or []
    development = [line for line in requirements if any(tool in line for tool in ("pytest", "mypy", "ruff"))]
    assert development == []


def test_the_classifiers_are_the_index_list_s_and_name_every_supported_python(
    distributions: Distributions,
) -> None:
    classifiers = metadata(distributions.wheel).get_all("Classifier") or []
    assert sorted(set(classifiers) - trove_classifiers.classifiers) == []
    pythons = {
        c.rsplit(" :: ", 1)[1] for c in classifiers if c.startswith("Programming Language :: Python :: 3.")
    }
    assert pythons == set(SUPPORTED)
    assert "Typing :: Typed" in classifiers


def test_the_license_is_an_spdx_expression_without_a_license_classifier(distributions: Distributions) -> None:
    meta = metadata(distributions.wheel)
    assert meta["License-Expression"] == "PostgreSQL"
    assert [c for c in meta.get_all("Classifier") or [] if c.startswith("License ::")] == []


def test_the_project_urls_are_named_and_absolute(distributions: Distributions) -> None:
    urls = dict(line.split(", ", 1) for line in metadata(distributions.wheel).get_all("Project-URL") or [])
    assert set(urls) == PROJECT_URLS
    assert all(url.startswith("https://") for url in urls.values()), urls


def test_the_long_description_is_python_readme_as_markdown(distributions: Distributions) -> None:
    meta = metadata(distributions.wheel)
    assert meta["Description-Content-Type"] == "text/markdown"
    with zipfile.ZipFile(distributions.wheel) as archive:
        (name,) = (name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        body = archive.read(name).decode("utf-8").split("\n\n", 1)[1]
    assert body.strip() == (REPO_ROOT / "python" / "README.md").read_text(encoding="utf-8").strip()
