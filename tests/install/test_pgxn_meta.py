"""META.json, PGXN's description of the distribution (meta-spec 1.0.0), agrees with the extension."""

from __future__ import annotations

import json
import re
from typing import Any

from helpers.fixtures import REPO_ROOT

# What PGXN's meta-spec 1.0.0 requires of every distribution.
REQUIRED = {"name", "abstract", "version", "maintainer", "license", "provides", "meta-spec"}


def meta() -> dict[str, Any]:
    document: dict[str, Any] = json.loads((REPO_ROOT / "META.json").read_text())
    return document


def control_version() -> str:
    found = re.search(
        r"^default_version = '([^']+)'$", (REPO_ROOT / "pgjobq.control").read_text(), re.MULTILINE
    )
    assert found is not None
    return found.group(1)


def test_meta_json_has_what_the_meta_spec_requires() -> None:
    document = meta()

    assert set(document) >= REQUIRED
    assert document["meta-spec"]["version"] == "1.0.0"
    assert document["name"] == "pgjobq"
    assert document["release_status"] in {"stable", "testing", "unstable"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", document["prereqs"]["runtime"]["requires"]["PostgreSQL"])


def test_meta_json_names_the_version_of_the_control_file() -> None:
    document = meta()
    version = control_version()

    assert document["version"] == version
    assert document["provides"]["pgjobq"]["version"] == version
    assert (REPO_ROOT / document["provides"]["pgjobq"]["file"]).is_file()  # committed, so make dist ships it
    assert (REPO_ROOT / document["provides"]["pgjobq"]["docfile"]).is_file()


def test_meta_json_names_the_license_of_the_license_file() -> None:
    assert meta()["license"] == "postgresql"
    assert (REPO_ROOT / "LICENSE").read_text().startswith("PostgreSQL License")
