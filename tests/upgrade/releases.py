"""The previous release of pgjobq-py, found in this repository's git history, in a venv of its own.

Which commit is the previous release.  The working tree's ``python/pyproject.toml`` names the version
being made (this release).  The previous release's version is the version of the newest commit whose
``python/pyproject.toml`` names another one.  The release as it landed is the last commit (on main's
first-parent line) before the one that set the next version: HEAD while the next version is not
committed yet.  (Until pgjobq-py 1.2.0 every release set its version in its closing commit, and the
release was taken at that commit; 1.2.0 set it in a work-in-progress commit of its issue and changed
python/ after it, so the release is now taken where its version ended.)  This holds as long as the
working tree's version is moved on while the next release is made (before it lands); a tree whose
version is still the last release's would take the release before it.

Where the history cannot say (a shallow clone, no git, no earlier version), ``PreviousReleaseMissing``
is raised, and the fixtures fail the tests with its message rather than skip them: a run that could not
test a rolling upgrade must not look green.

The venv is built once per commit and Python (``python -m venv``, then pip installs the release's
``python/`` directory from a ``git archive`` of the commit, with ``psycopg[binary]`` and ``click``) and
kept under ``cache_root()``, a folder per key, marked complete only once the install succeeded; a file
lock keeps two pytest-xdist workers from building it at once.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "REPO_ROOT",
    "PreviousRelease",
    "PreviousReleaseMissing",
    "ReleaseVenv",
    "cache_root",
    "extension_version_at",
    "package_version_at",
    "previous_release",
    "release_made_for",
    "release_venv",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = "python/pyproject.toml"
CONTROL = "pgjobq.control"
INSTALL_TIMEOUT = 600.0  # pip with an empty cache, on a slow network
_VERSION = re.compile(r'^version\s*=\s*"([^"]+)"', re.MULTILINE)
_DEFAULT_VERSION = re.compile(r"^default_version\s*=\s*'([^']+)'", re.MULTILINE)


class PreviousReleaseMissing(Exception):
    """The previous release cannot be found in, or built from, this repository's history."""


@dataclass(frozen=True)
class PreviousRelease:
    """The previous release of pgjobq-py, as found in git history."""

    version: str  # its pgjobq-py version, e.g. 0.9.1
    commit: str  # the release as it landed (full hash)
    versioned_at: str  # the commit that set its version (the same python/ as commit)
    extension_version: str  # the extension version of that commit's pgjobq.control, e.g. 0.8.0


@dataclass(frozen=True)
class ReleaseVenv:
    """A venv with a previous release of pgjobq-py installed."""

    release: PreviousRelease
    path: Path

    @property
    def pgjobq(self) -> Path:
        """Its pgjobq command."""
        return self.path / "bin" / "pgjobq"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def _git(*args: str, repo: Path = REPO_ROOT) -> str:
    try:
        result = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=60, check=False
        )
    except FileNotFoundError as exc:
        raise PreviousReleaseMissing(
            "git is not installed: the previous release comes from git history"
        ) from exc
    if result.returncode != 0:
        raise PreviousReleaseMissing(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def _version_in(text: str, pattern: re.Pattern[str], what: str) -> str:
    found = pattern.search(text)
    if found is None:
        raise PreviousReleaseMissing(f"no version in {what}")
    return found.group(1)


def package_version_at(commit: str | None, repo: Path = REPO_ROOT) -> str:
    """The pgjobq-py version in python/pyproject.toml at commit (None: the working tree)."""
    if commit is None:
        return _version_in((repo / PYPROJECT).read_text(), _VERSION, f"the working tree's {PYPROJECT}")
    return _version_in(_git("show", f"{commit}:{PYPROJECT}", repo=repo), _VERSION, f"{PYPROJECT} at {commit}")


def extension_version_at(commit: str | None, repo: Path = REPO_ROOT) -> str:
    """The extension's default_version in pgjobq.control at commit (None: the working tree)."""
    if commit is None:
        return _version_in((repo / CONTROL).read_text(), _DEFAULT_VERSION, f"the working tree's {CONTROL}")
    return _version_in(
        _git("show", f"{commit}:{CONTROL}", repo=repo), _DEFAULT_VERSION, f"{CONTROL} at {commit}"
    )


def previous_release(repo: Path = REPO_ROOT, before: str | None = None) -> PreviousRelease:
    """The previous release of pgjobq-py (the rule is in the module docstring), or with before, the release
    before the one of that version; PreviousReleaseMissing if the history cannot say."""
    if _git("rev-parse", "--is-shallow-repository", repo=repo).strip() == "true":
        raise PreviousReleaseMissing(
            f"{repo} is a shallow clone: the previous release comes from git history (git fetch --unshallow)"
        )
    current = before if before is not None else package_version_at(None, repo)
    # the commits that changed python/pyproject.toml, newest first
    changed = _git("log", "--first-parent", "--format=%H", "HEAD", "--", PYPROJECT, repo=repo).split()
    previous: str | None = None
    versioned_at: str | None = None
    newer: str | None = None  # the commit that set the version after previous (None: not committed yet)
    reached = before is None  # with before: the commits newer than its version's are skipped
    for commit in changed:
        version = package_version_at(commit, repo)
        if not reached:
            reached = version == current
        if previous is None:
            if not reached or version == current:
                newer = commit
            else:
                previous, versioned_at = version, commit
        elif version == previous:
            versioned_at = commit  # an older commit with the same version: the version was set earlier
        else:
            break
    if previous is None or versioned_at is None:
        raise PreviousReleaseMissing(
            f"no commit of this repository's history has a {PYPROJECT} version other than {current}: the"
            " previous release cannot be found"
        )
    landed = _git("rev-parse", f"{newer}^1" if newer is not None else "HEAD", repo=repo).strip()
    return PreviousRelease(previous, landed, versioned_at, extension_version_at(landed, repo))


def cache_root() -> Path:
    """Where the previous releases' venvs are kept: PGJOBQ_RELEASE_CACHE, else /var/cache/pgjobq/releases
    as root, else $XDG_CACHE_HOME/pgjobq/releases (~/.cache/pgjobq/releases)."""
    override = os.environ.get("PGJOBQ_RELEASE_CACHE")
    if override:
        return Path(override)
    if os.geteuid() == 0:
        return Path("/var/cache/pgjobq/releases")
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "pgjobq" / "releases"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on path (created if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(argv: list[str], what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False)
    if result.returncode != 0:
        raise PreviousReleaseMissing(
            f"{what} failed ({' '.join(argv)}):\n{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )


def release_venv(release: PreviousRelease, root: Path | None = None, repo: Path = REPO_ROOT) -> ReleaseVenv:
    """The venv of release under root (cache_root() by default), built first if it is not there yet."""
    root = root or cache_root()
    python = f"py{sys.version_info.major}.{sys.version_info.minor}"
    path = root / f"pgjobq-py-{release.version}-{release.commit[:12]}-{python}"
    complete = path / ".complete"
    with _locked(root / f".{path.name}.lock"):
        if not complete.exists():
            shutil.rmtree(path, ignore_errors=True)
            _build(release, path, repo)
            complete.touch()
    return ReleaseVenv(release, path)


def _build(release: PreviousRelease, path: Path, repo: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="pgjobq-release-") as folder:
        source = Path(folder) / "source"
        source.mkdir()
        archive = Path(folder) / "release.tar"
        _git("archive", "--format=tar", "-o", str(archive), release.commit, repo=repo)
        _run(["tar", "-xf", str(archive), "-C", str(source)], "unpacking the release")
        _run([sys.executable, "-m", "venv", str(path)], "python -m venv")
        _run(
            [str(path / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             f"{source / 'python'}[binary]"],
            f"installing pgjobq-py {release.version}",
        )  # fmt: skip


def release_made_for(extension_version: str, repo: Path = REPO_ROOT) -> PreviousRelease:
    """The release of pgjobq-py made for extension_version (the newest whose pgjobq.control names it),
    walking back from the previous release; PreviousReleaseMissing if the history cannot say."""
    release = previous_release(repo)
    while release.extension_version != extension_version:
        release = previous_release(repo, before=release.version)
    return release
