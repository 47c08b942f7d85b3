"""Stand-ins for dpkg-query, apt-get, apt-cache and id, over a Debian machine described in a JSON file.

tests/install/test_ensure_deps.py puts them first on PATH (``write_stand_ins``) to run tools/ensure-deps
against machine states this machine does not have.  The file that FAKE_DEBIAN names holds:

- ``uid``: what ``id -u`` prints;
- ``lists``: whether apt's package lists are there (``apt-get update`` fetches them);
- ``update_fails``: ``apt-get update`` fails, as it does without a network;
- ``installed``: package -> installed version;
- ``archive``: package -> ``{"versions": [oldest, ..., candidate], "depends": [...], "conflicts": [...]}``,
  where a dependency ``name=`` must be at the depending package's own version (libpq-dev on libpq5),
  ``name>`` at its candidate (a library the new build needs newer), and an installed package that a
  package conflicts with is removed;
- ``calls``: every call, appended as ``{"program", "args"}`` (an install also records whether a
  policy-rc.d answering 101 was in place under PGJOBQ_DEPS_SYSROOT, so that no service started).

``apt-get install`` resolves as apt does, in small: a package asked for without a version gets the
candidate, even over an older installed one (an upgrade); a version asked for holds for the package as a
dependency too; a dependency already installed is kept unless it must match a version; ``-s`` prints
apt's ``Inst`` lines, and without it the state changes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["write_stand_ins"]

PROGRAMS = ("dpkg-query", "apt-get", "apt-cache", "id")


def write_stand_ins(bin_dir: Path) -> None:
    """The four programs in bin_dir, each running this module under this Python."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for program in PROGRAMS:
        path = bin_dir / program
        path.write_text(f'#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} {program} "$@"\n')
        path.chmod(0o755)


class Refused(Exception):
    """apt's own error line (E: ...)."""


def dpkg_query(state: dict[str, Any], args: list[str]) -> int:
    fmt = next(arg.removeprefix("-f=") for arg in args if arg.startswith("-f="))
    package = args[-1]
    version = state["installed"].get(package)
    if version is None:
        print(f"dpkg-query: no packages found matching {package}", file=sys.stderr)
        return 1
    line = fmt.replace("${Status}", "install ok installed").replace("${Version}", version)
    sys.stdout.write(line.replace("\\n", "\n"))
    return 0


def apt_cache(state: dict[str, Any], args: list[str]) -> int:
    assert args[0] == "policy", args
    for package in args[1:]:
        if state["lists"] and package in state["archive"]:
            installed = state["installed"].get(package, "(none)")
            candidate = state["archive"][package]["versions"][-1]
            print(f"{package}:\n  Installed: {installed}\n  Candidate: {candidate}")
    return 0


def resolve(state: dict[str, Any], wanted: list[str]) -> dict[str, tuple[str | None, str | None]]:
    """package -> (installed version or None, version to install or None to remove): what apt would do."""
    plan: dict[str, tuple[str | None, str | None]] = {}  # a version of None: removed
    pins = {package: version for package, _, version in (item.partition("=") for item in wanted) if version}

    def want(package: str, version: str | None, asked: bool) -> None:
        version = version or pins.get(package)
        if not state["lists"] or package not in state["archive"]:
            raise Refused(f"E: Unable to locate package {package}")
        entry = state["archive"][package]
        installed = state["installed"].get(package)
        if version is None:
            if installed is not None and not asked:
                return  # a dependency already there
            version = entry["versions"][-1]
        elif version not in entry["versions"]:
            raise Refused(f"E: Version '{version}' for '{package}' was not found")
        if package in plan:
            if plan[package][1] != version:
                raise Refused(f"E: Unable to correct problems, you have held broken packages ({package})")
            return
        if installed == version:
            return
        plan[package] = (installed, version)
        for dependency in entry["depends"]:
            if dependency.endswith("="):
                want(dependency[:-1], version, False)
            elif dependency.endswith(">"):
                want(dependency[:-1], state["archive"][dependency[:-1]]["versions"][-1], False)
            else:
                want(dependency, None, False)
        for conflict in entry.get("conflicts", []):
            if conflict in state["installed"]:
                plan[conflict] = (state["installed"][conflict], None)

    for item in wanted:
        package, _, version = item.partition("=")
        want(package, version or None, True)
    return plan


def apt_get(state: dict[str, Any], args: list[str]) -> int:
    if args[0] == "update":
        if state.get("update_fails"):
            print("E: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease", file=sys.stderr)
            return 100
        state["lists"] = True
        return 0
    assert args[0] == "install", args
    simulate = "-s" in args
    try:
        plan = resolve(state, [arg for arg in args[1:] if not arg.startswith("-")])
    except Refused as exc:
        print(exc, file=sys.stderr)
        return 100
    for package, (installed, version) in plan.items():
        held = f" [{installed}]" if installed is not None else ""
        if version is None:
            print(f"Remv {package}{held}" if simulate else f"Removing {package}")
        else:
            print(
                f"Inst {package}{held} ({version} Debian:12 [amd64])" if simulate else f"Setting up {package}"
            )
    if not simulate:
        policy = Path(os.environ.get("PGJOBQ_DEPS_SYSROOT", "")) / "usr/sbin/policy-rc.d"
        state["calls"][-1]["services_withheld"] = policy.exists() and "exit 101" in policy.read_text()
        for package, (_, version) in plan.items():
            if version is None:
                del state["installed"][package]
            else:
                state["installed"][package] = version
    return 0


def main(program: str, args: list[str]) -> int:
    path = Path(os.environ["FAKE_DEBIAN"])
    state = json.loads(path.read_text())
    state["calls"].append({"program": program, "args": args})
    try:
        if program == "dpkg-query":
            return dpkg_query(state, args)
        if program == "apt-cache":
            return apt_cache(state, args)
        if program == "apt-get":
            return apt_get(state, args)
        print(state["uid"] if args == ["-u"] else f"uid={state['uid']}")
        return 0
    finally:
        path.write_text(json.dumps(state))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
