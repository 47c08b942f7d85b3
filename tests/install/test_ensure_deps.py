"""tools/ensure-deps against machines this one is not: stand-ins for dpkg-query, apt-get, apt-cache and id.

Each test describes a Debian machine (what is installed, what the archive offers, who runs the script),
runs the real script with the stand-ins (helpers/fake_debian.py) first on PATH and its two files under a
scratch PGJOBQ_DEPS_SYSROOT, and checks what it asked apt to install, or the one line it printed when it
stopped; and, every time, that no package installed before was removed, and none upgraded but a
library that the new packages need newer (which apt upgrades, and the script names), never one of
PostgreSQL's.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helpers.fake_debian import write_stand_ins
from helpers.fixtures import REPO_ROOT

SCRIPT = REPO_ROOT / "tools" / "ensure-deps"

OLD, NEW = "15.18-0+deb12u1", "15.20-0+deb12u1"  # a point release, then its security update
TESTS_NEED = [
    "postgresql-15", "postgresql-client-15", "postgresql-server-dev-15", "postgresql-15-plpgsql-check",
    "pgbouncer", "chromium", "iproute2", "nftables", "jq",
]  # fmt: skip


def archive(*server_versions: str) -> dict[str, Any]:
    """Debian bookworm in small: PostgreSQL 15's packages at server_versions, the rest at one version."""
    same_source = {
        "postgresql-15": ["postgresql-client-15", "libpq5"],
        "postgresql-client-15": ["libpq5"],
        "postgresql-server-dev-15": ["postgresql-client-15", "libpq-dev"],
        "libpq-dev": ["libpq5="],
        "libpq5": [],
    }
    others = {
        "postgresql-15-plpgsql-check": ["postgresql-15"],
        "pgbouncer": ["libpq5"],
        "chromium": ["chromium-common="],
        "chromium-common": [],
        "iproute2": [],
        "nftables": [],
        "jq": [],
        "redis-server": [],
        "valgrind": [],
        "debootstrap": [],
    }
    return {
        **{name: {"versions": list(server_versions), "depends": deps} for name, deps in same_source.items()},
        **{name: {"versions": ["1.0-1"], "depends": deps} for name, deps in others.items()},
    }


@dataclass
class Outcome:
    returncode: int
    stdout: str
    lines: list[str]  # of stderr
    before: dict[str, Any]
    after: dict[str, Any]
    sysroot: Path

    def calls(self, program: str) -> list[list[str]]:
        return [call["args"] for call in self.after["calls"] if call["program"] == program]

    def installs(self) -> list[list[str]]:
        """The packages of each apt-get install that was not a simulation."""
        return [
            [arg for arg in args[1:] if not arg.startswith("-")]
            for args in self.calls("apt-get")
            if args[0] == "install" and "-s" not in args
        ]


def run(
    tmp_path: Path,
    *args: str,
    uid: int = 0,
    lists: bool = True,
    update_fails: bool = False,
    installed: dict[str, str] | None = None,
    offered: dict[str, Any] | None = None,
    may_upgrade: tuple[str, ...] = (),
) -> Outcome:
    bin_dir, sysroot, machine = tmp_path / "bin", tmp_path / "sysroot", tmp_path / "machine.json"
    write_stand_ins(bin_dir)
    before: dict[str, Any] = {
        "uid": uid,
        "lists": lists,
        "update_fails": update_fails,
        "installed": installed or {},
        "archive": offered if offered is not None else archive(OLD, NEW),
        "calls": [],
    }
    machine.write_text(json.dumps(before))
    result = subprocess.run(
        [str(SCRIPT), *args],
        env={
            "PATH": f"{bin_dir}:/usr/bin:/bin",
            "FAKE_DEBIAN": str(machine),
            "PGJOBQ_DEPS_SYSROOT": str(sysroot),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    after = json.loads(machine.read_text())
    outcome = Outcome(result.returncode, result.stdout, result.stderr.splitlines(), before, after, sysroot)
    changed = {
        package: (version, after["installed"].get(package))
        for package, version in before["installed"].items()
        if after["installed"].get(package) != version and package not in may_upgrade
    }
    assert changed == {}, f"installed packages upgraded or removed: {changed}"
    return outcome


def everything(version: str = OLD) -> dict[str, str]:
    """A machine with all the tests need, PostgreSQL 15 at version."""
    return {
        **{name: "1.0-1" for name in TESTS_NEED},
        **{name: version for name in ("postgresql-15", "postgresql-client-15", "postgresql-server-dev-15")},
        **{name: version for name in ("libpq-dev", "libpq5")},
        "chromium-common": "1.0-1",
    }


def without(packages: dict[str, str], *names: str) -> dict[str, str]:
    return {name: version for name, version in packages.items() if name not in names}


def test_on_a_machine_with_nothing_installed_it_fetches_the_lists_and_installs_what_the_tests_need(
    tmp_path: Path,
) -> None:
    outcome = run(tmp_path, lists=False)

    assert outcome.returncode == 0, outcome.lines
    updates = [index for index, call in enumerate(outcome.after["calls"]) if call["args"][:1] == ["update"]]
    installs = [index for index, call in enumerate(outcome.after["calls"]) if "-y" in call["args"]]
    assert len(updates) == 1 and len(installs) == 1 and updates[0] < installs[0]
    assert outcome.installs() == [TESTS_NEED]  # nothing pinned: there is no server to match
    assert set(TESTS_NEED) <= set(outcome.after["installed"])
    assert outcome.lines[0].startswith("ensure-deps: updating apt's package lists")
    assert outcome.lines[-1] == f"ensure-deps: installed {' '.join(TESTS_NEED)}"


def test_the_packages_install_without_starting_a_service_or_a_default_cluster(tmp_path: Path) -> None:
    outcome = run(tmp_path)

    install = next(call for call in outcome.after["calls"] if "-y" in call["args"])
    assert install["services_withheld"] is True
    assert not (outcome.sysroot / "usr/sbin/policy-rc.d").exists()  # withheld during the install only
    cluster = outcome.sysroot / "etc/postgresql-common/createcluster.d/pgjobq.conf"
    assert cluster.read_text() == "create_main_cluster = false\n"


def test_with_postgresql_15_installed_its_missing_headers_come_at_its_version(tmp_path: Path) -> None:
    installed = without(everything(OLD), "postgresql-server-dev-15", "libpq-dev")

    outcome = run(tmp_path, installed=installed)

    assert outcome.returncode == 0, outcome.lines
    assert outcome.installs() == [[f"postgresql-server-dev-15={OLD}", f"libpq-dev={OLD}"]]
    assert outcome.after["installed"]["postgresql-server-dev-15"] == OLD  # not the newer candidate
    assert outcome.calls("apt-get")[0][0] == "install"  # the lists were there: no update


def test_when_the_installed_servers_version_has_left_the_archive_it_stops_with_one_line(
    tmp_path: Path,
) -> None:
    installed = without(everything(OLD), "postgresql-server-dev-15", "libpq-dev")

    outcome = run(tmp_path, installed=installed, offered=archive(NEW))

    assert outcome.returncode == 1
    assert outcome.lines == [
        f"ensure-deps: apt cannot install postgresql-server-dev-15={OLD} libpq-dev={OLD}: E: Version"
        f" '{OLD}' for 'postgresql-server-dev-15' was not found (pinned to the installed postgresql-15"
        f" {OLD}: install them yourself, or upgrade PostgreSQL deliberately first)"
    ]
    assert outcome.installs() == []


def test_it_stops_rather_than_upgrade_an_installed_package(tmp_path: Path) -> None:
    # libpq-dev must match libpq5's version: installing it at the server's would upgrade libpq5
    installed = {
        **without(everything(OLD), "postgresql-server-dev-15", "libpq-dev"),
        "libpq5": "15.10-0+deb12u1",
    }
    offered = archive("15.10-0+deb12u1", OLD, NEW)

    outcome = run(tmp_path, installed=installed, offered=offered)

    assert outcome.returncode == 1
    assert len(outcome.lines) == 1
    assert outcome.lines[0].startswith(
        "ensure-deps: installing postgresql-server-dev-15 would change installed packages"
        f" (libpq5 15.10-0+deb12u1 -> {OLD}); not touching a PostgreSQL this machine already has"
    )
    assert outcome.installs() == []


def test_a_library_the_new_packages_need_newer_is_upgraded_and_named(tmp_path: Path) -> None:
    # a fresh machine older than the security archive: the new server wants its newer libssl3
    offered = archive(OLD, NEW)
    offered["libssl3"] = {"versions": ["3.0.20-1", "3.0.22-1"], "depends": []}
    offered["postgresql-15"]["depends"].append("libssl3>")

    outcome = run(tmp_path, installed={"libssl3": "3.0.20-1"}, offered=offered, may_upgrade=("libssl3",))

    assert outcome.returncode == 0, outcome.lines
    assert outcome.installs() == [TESTS_NEED]
    assert outcome.after["installed"]["libssl3"] == "3.0.22-1"
    assert "ensure-deps: upgrading, as apt requires for them: libssl3 3.0.20-1 -> 3.0.22-1" in outcome.lines


def test_it_stops_rather_than_remove_an_installed_package(tmp_path: Path) -> None:
    offered = archive(OLD, NEW)
    offered["pgbouncer"]["conflicts"] = ["odyssey"]

    outcome = run(
        tmp_path, installed={**without(everything(OLD), "pgbouncer"), "odyssey": "1.3-1"}, offered=offered
    )

    assert outcome.returncode == 1
    assert len(outcome.lines) == 1
    assert outcome.lines[0].startswith(
        "ensure-deps: installing pgbouncer would change installed packages (odyssey removed)"
    )
    assert outcome.installs() == []


def test_with_everything_present_it_asks_apt_nothing_and_says_nothing(tmp_path: Path) -> None:
    outcome = run(tmp_path, installed=everything(NEW))

    assert (outcome.returncode, outcome.stdout, outcome.lines) == (0, "", [])
    assert {call["program"] for call in outcome.after["calls"]} == {"dpkg-query"}


def test_not_as_root_it_names_what_is_missing_and_the_command_to_run(tmp_path: Path) -> None:
    installed = without(everything(OLD), "pgbouncer", "chromium")

    outcome = run(tmp_path, uid=1000, installed=installed)

    assert outcome.returncode == 1
    assert outcome.lines == [
        "ensure-deps: missing pgbouncer chromium; run 'sudo tools/ensure-deps' or:"
        " sudo apt-get install -y --no-install-recommends pgbouncer chromium"
    ]
    assert outcome.calls("apt-get") == [] and outcome.calls("apt-cache") == []


def test_when_the_lists_cannot_be_fetched_it_stops_saying_so(tmp_path: Path) -> None:
    outcome = run(tmp_path, lists=False, update_fails=True)

    assert outcome.returncode == 1
    assert outcome.lines[-1] == (
        "ensure-deps: apt-get update failed: E: Failed to fetch"
        " http://deb.debian.org/debian/dists/bookworm/InRelease"
    )
    assert outcome.installs() == []


def test_plan_prints_the_command_and_runs_nothing(tmp_path: Path) -> None:
    outcome = run(tmp_path, "--plan", installed=without(everything(OLD), "nftables"))

    assert (outcome.returncode, outcome.stdout) == (
        0,
        "apt-get install -y --no-install-recommends nftables\n",
    )
    assert outcome.calls("apt-get") == [] and outcome.calls("id") == []


@pytest.mark.parametrize(
    ("group", "wanted"),
    [("bench", ["redis-server", "valgrind"]), ("fresh", ["debootstrap"])],
)
def test_a_group_asks_for_its_own_packages(tmp_path: Path, group: str, wanted: list[str]) -> None:
    outcome = run(tmp_path, group, installed=everything(OLD))

    assert outcome.returncode == 0, outcome.lines
    assert outcome.installs() == [wanted]


def test_a_bad_argument_is_refused_with_the_usage(tmp_path: Path) -> None:
    outcome = run(tmp_path, "--upgrade")

    assert (outcome.returncode, outcome.lines) == (2, ["usage: tools/ensure-deps [bench | fresh] [--plan]"])
