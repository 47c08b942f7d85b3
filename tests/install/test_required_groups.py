"""A run that requires a group of tests fails where that group cannot run, instead of skipping it.

.ci/run sets PGJOBQ_REQUIRE=all, so that a green CI run means every claimed layer ran.  The end-to-end
tests run one SQL test of another PostgreSQL major in a nested pytest, its server build to be fetched
from a mirror that has nothing (or a tampered build) and into an empty cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pg_versions
import pytest

from helpers import required
from helpers.fixtures import REPO_ROOT, main_major

OTHER_MAJOR = next(major for major in pg_versions.MAJORS if major != main_major())
ONE_SQL_TEST = "test_claim_never_takes_a_job_whose_run_at_is_in_the_future"


def test_all_names_every_group() -> None:
    assert required.parse("all") == frozenset(required.GROUPS)
    assert required.parse(" majors , netns ") == {"majors", "netns"}
    assert required.parse("") == frozenset()


def test_an_unknown_group_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="unknown group browsers"):
        required.parse("majors,browsers")


def test_a_group_not_required_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(required.ENVIRONMENT, "netns")

    with pytest.raises(pytest.skip.Exception, match=r"^no chromium here$"):
        required.skip_or_fail("browser", "no chromium here")


def test_a_required_group_fails_saying_it_is_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(required.ENVIRONMENT, "browser")

    with pytest.raises(pytest.fail.Exception, match=r"no chromium here \(PGJOBQ_REQUIRE requires browser"):
        required.skip_or_fail("browser", "no chromium here")


def nested_run(tmp_path: Path, *options: str, require: str | None = None) -> subprocess.CompletedProcess[str]:
    """One SQL test on OTHER_MAJOR in a nested pytest, its build fetched from tmp_path/mirror."""
    env = {
        **os.environ,
        "PGJOBQ_PG_REGISTRY": (tmp_path / "mirror").as_uri(),
        "PGJOBQ_PG_CACHE": str(tmp_path / "cache"),
    }
    env.pop(required.ENVIRONMENT, None)
    if require is not None:
        env[required.ENVIRONMENT] = require
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            *options,
            "tests/sql/test_claim.py",
            "-k",
            f"pg{OTHER_MAJOR} and {ONE_SQL_TEST}",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_major_that_cannot_be_fetched_skips_saying_why(tmp_path: Path) -> None:
    result = nested_run(tmp_path)

    assert result.returncode == 0, result.stdout[-3000:]
    assert "1 skipped" in result.stdout
    assert f"PostgreSQL {OTHER_MAJOR} is not available here: cannot download" in result.stdout


@pytest.mark.parametrize("how", ["environment", "option"])
def test_a_major_that_cannot_be_fetched_fails_a_run_that_requires_the_majors(
    tmp_path: Path, how: str
) -> None:
    if how == "environment":
        result = nested_run(tmp_path, require="all")
    else:
        result = nested_run(tmp_path, "--require", "majors")

    assert result.returncode == 1, result.stdout[-3000:]
    assert "skipped" not in result.stdout.splitlines()[-1]
    assert f"PostgreSQL {OTHER_MAJOR} is not available here" in result.stdout
    assert "PGJOBQ_REQUIRE requires majors" in result.stdout


def test_a_tampered_build_fails_even_a_run_that_requires_nothing(tmp_path: Path) -> None:
    version, _ = pg_versions.PACKAGES[OTHER_MAJOR]
    tampered = tmp_path / "mirror" / pg_versions.PACKAGE_PATH.format(version=version).lstrip("/")
    tampered.parent.mkdir(parents=True)
    tampered.write_bytes(b"not the build whose sha512 is recorded")

    result = nested_run(tmp_path)

    assert result.returncode == 1, result.stdout[-3000:]
    assert "IntegrityError" in result.stdout and "does not match its recorded sha512" in result.stdout
    assert "skipped" not in result.stdout.splitlines()[-1]


def test_an_unknown_group_stops_the_run_before_any_test(tmp_path: Path) -> None:
    result = nested_run(tmp_path, require="majors,browsers")

    assert result.returncode == 4  # pytest's usage error
    assert "PGJOBQ_REQUIRE: unknown group browsers" in result.stderr
