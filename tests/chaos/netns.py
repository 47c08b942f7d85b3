"""Test hosts made of Linux network namespaces, the faults of their network, and a PostgreSQL inside one.

A Network is a switch and the hosts around it, all made inside this test
and gone at its end.  The switch is a namespace that routes (ip_forward)
between the hosts' links; each host is a namespace with one link to the
switch, on a /24 of its own (10.77.<n>.0/24: the switch's end .1, the
host's .2), its default route through the switch.  A link is a veth pair,
or, for a host given a delay (``Network.add_host(..., delay=...)``), a
pair of TUN devices joined by a delay line (tests/chaos/delay_line.py:
the kernels here have no netem).  Nothing in the machine's own namespace is
configured: the devices are made inside the namespaces (``ip -n NS link add
... peer ... netns OTHER``), and only these hosts' addresses are used.

The faults are made in the switch with nftables, on the packets it
forwards to and from one host's link, so that both ends see a silent
network, as when a cable, a switch or a firewall between them drops
packets (a rule on a host's own output would fail its sends with EPERM
instead):

- ``cut(host)``: every packet dropped, both ways (no RST, no ICMP);
- ``lose(host, percent)``: each packet dropped with that probability
  (``numgen random mod 100 < percent``), both ways;
- ``heal(host)``: the rules gone; their counters (packets seen and
  dropped) are returned, the proof the fault was real, with the time the
  rules went;
- ``delay(host, on)``: the delay line holds the host's outgoing packets
  (200 ± 50 ms by default) while on;
- ``destroy_sockets(host, peer)``: ``ss -K`` forgets, in host's kernel, the
  TCP sockets to peer, sending nothing that gets through a cut: with the
  connections' server side gone, their client side is left half-open.

Each host is one chain of the switch's table, jumped to for packets in or
out of its link, so that a fault is one rule and healing is flushing the
chain.  ``close()`` (and leaving the ``with`` block, whatever happened)
kills every process left in the namespaces, ends the delay lines and
deletes the namespaces; namespaces left behind by a run whose process died
(named after its pid) are swept when the next Network is made.

NamespacedPostgres is tools/throwaway_pg.py's ThrowawayPostgres with its
programs (initdb, pg_ctl, so the server) run inside a host's namespace, as
the unprivileged server account (``ip netns exec NS setpriv --reuid ...``),
listening on that host's address; its unix socket, in its folder, stays
reachable from anywhere (a unix socket belongs to no network namespace), so
the harness's own connections (dsn()) bypass the faults.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from psycopg.conninfo import make_conninfo
from throwaway_pg import ThrowawayPostgres, server_user

__all__ = [
    "DELAY_LINE",
    "Counters",
    "Host",
    "NamespacedPostgres",
    "Network",
    "Unsupported",
    "sweep_stale",
    "unsupported",
]

DELAY_LINE = Path(__file__).resolve().with_name("delay_line.py")
PREFIX = "pgjobq-"  # every namespace made here: pgjobq-<pid>-<tag>-<host>
TABLE = "pgjobq"  # the switch's nftables table
SWITCH = "switch"


class Unsupported(RuntimeError):
    """Network namespaces cannot be made here; the message says what is missing."""


def unsupported() -> str | None:
    """Why the hosts of a Network cannot be made on this machine (None: they can).

    Root, ``ip`` (iproute2), ``nft`` (nftables), ``ss``, ``setpriv`` and
    /dev/net/tun, and a namespace actually made and deleted.
    """
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add), and this runs as uid " + str(os.geteuid())
    for program, package in (
        ("ip", "iproute2"),
        ("ss", "iproute2"),
        ("nft", "nftables"),
        ("setpriv", "util-linux"),
    ):
        if shutil.which(program) is None:
            return f"{program} is missing (Debian package {package}: tools/ensure-deps installs it)"
    if not Path("/dev/net/tun").exists():
        return "/dev/net/tun is missing (the delay line's TUN devices need CONFIG_TUN)"
    probe = f"{PREFIX}{os.getpid()}-probe-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: ip netns add: {made.stderr.strip()}"
    try:
        table = subprocess.run(
            ["ip", "netns", "exec", probe, "nft", "add", "table", "inet", TABLE],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if table.returncode != 0:
            return f"nftables does not work in a namespace: nft add table: {table.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


@dataclass
class Host:
    """One test host: its namespace, its address, and the device of its link on either side."""

    name: str
    namespace: str
    address: str  # the host's own, on its link
    gateway: str  # the switch's end of the link
    device: str  # the link's device in the host's namespace
    link: str  # the link's device in the switch's namespace
    delay_line: subprocess.Popen[str] | None = None


@dataclass(frozen=True)
class Counters:
    """What the rules of one fault counted: packets seen (loss only) and dropped, both ways."""

    seen: int
    dropped: int

    @property
    def share(self) -> float:
        return self.dropped / self.seen if self.seen else 0.0


def _run(argv: Sequence[str], *, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=timeout)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}): {result.stderr.strip()}")
    return result


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _namespaces() -> list[str]:
    listed = _run(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def _kill_inside(namespace: str) -> int:
    """SIGKILL every process in the namespace (all of them started in it by a Network); how many."""
    pids = [
        int(p) for p in _run(["ip", "netns", "pids", namespace], check=False).stdout.split() if p.isdigit()
    ]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if _pid_alive(pid) and not _zombie(pid)]
        time.sleep(0.02)
    return len(pids)


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


def sweep_stale() -> list[str]:
    """Delete the namespaces of Networks whose process is gone (killed before it could clean up)."""
    swept = []
    for namespace in _namespaces():
        found = re.fullmatch(rf"{re.escape(PREFIX)}(\d+)-.*", namespace)
        if found and not _pid_alive(int(found.group(1))):
            _kill_inside(namespace)
            _run(["ip", "netns", "del", namespace], check=False)
            swept.append(namespace)
    return swept


class Network:
    """A switch namespace and the host namespaces linked to it; see the module docstring."""

    def __init__(self, subnet: str = "10.77") -> None:
        reason = unsupported()
        if reason is not None:
            raise Unsupported(reason)
        sweep_stale()
        self.subnet = subnet
        self.tag = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:4]}"
        self.hosts: dict[str, Host] = {}
        self._made: list[str] = []
        self.switch = self._namespace(SWITCH)
        self.nft(f"add table inet {TABLE}")
        self.nft(f"add chain inet {TABLE} forward {{ type filter hook forward priority 0; policy accept; }}")
        self.sysctl(self.switch, "net.ipv4.ip_forward", "1")

    # -- building -------------------------------------------------------------

    def _namespace(self, name: str) -> str:
        namespace = f"{self.tag}-{name}"
        _run(["ip", "netns", "add", namespace])
        self._made.append(namespace)
        _run(["ip", "-n", namespace, "link", "set", "lo", "up"])
        # IPv4 only: no router solicitations or duplicate-address probes on the links
        self.sysctl(namespace, "net.ipv6.conf.all.disable_ipv6", "1")
        self.sysctl(namespace, "net.ipv6.conf.default.disable_ipv6", "1")
        return namespace

    def sysctl(self, namespace: str, key: str, value: str) -> None:
        """Set a per-namespace sysctl (net.*) inside namespace."""
        _run(["ip", "netns", "exec", namespace, "sysctl", "-q", "-w", f"{key}={value}"])

    def add_host(self, name: str, *, delay: tuple[float, float] | None = None, seed: int = 1) -> Host:
        """Make host name and link it to the switch: a veth pair, or with delay (mean and jitter in
        milliseconds) a delay line, its delay off until delay(name, True)."""
        index = len(self.hosts) + 1
        namespace = self._namespace(name)
        host = Host(
            name=name,
            namespace=namespace,
            address=f"{self.subnet}.{index}.2",
            gateway=f"{self.subnet}.{index}.1",
            device="eth0",
            link=f"to-{name}"[:15],
        )
        if delay is None:
            _run(["ip", "-n", namespace, "link", "add", host.device, "type", "veth",
                  "peer", "name", host.link, "netns", self.switch])  # fmt: skip
            _run(["ip", "-n", namespace, "addr", "add", f"{host.address}/24", "dev", host.device])
            _run(["ip", "-n", self.switch, "addr", "add", f"{host.gateway}/24", "dev", host.link])
        else:
            host.delay_line = self._start_delay_line(host, delay, seed)
            _run(
                ["ip", "-n", namespace, "addr", "add", host.address, "peer", host.gateway, "dev", host.device]
            )
            _run(
                ["ip", "-n", self.switch, "addr", "add", host.gateway, "peer", host.address, "dev", host.link]
            )
        _run(["ip", "-n", namespace, "link", "set", host.device, "up"])
        _run(["ip", "-n", self.switch, "link", "set", host.link, "up"])
        _run(["ip", "-n", namespace, "route", "add", "default", "via", host.gateway])
        chain = self._chain(host)
        self.nft(f"add chain inet {TABLE} {chain}")
        self.nft(f"add rule inet {TABLE} forward iifname {host.link} jump {chain}")
        self.nft(f"add rule inet {TABLE} forward oifname {host.link} jump {chain}")
        self.hosts[name] = host
        return host

    def _start_delay_line(self, host: Host, delay: tuple[float, float], seed: int) -> subprocess.Popen[str]:
        mean, jitter = delay
        line = subprocess.Popen(
            [sys.executable, str(DELAY_LINE),
             "--near", f"{host.namespace}:{host.device}", "--far", f"{self.switch}:{host.link}",
             "--delay-ms", str(mean), "--jitter-ms", str(jitter), "--seed", str(seed)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert line.stdout is not None
        ready = line.stdout.readline().strip()
        if ready != "ready":
            line.kill()
            _, err = line.communicate(timeout=10)
            raise RuntimeError(f"the delay line of {host.name} did not start: {ready!r} {err.strip()}")
        return line

    # -- running things inside ---------------------------------------------------

    def namespace(self, host: str) -> str:
        return self.switch if host == SWITCH else self.hosts[host].namespace

    def command(self, host: str, argv: Sequence[str]) -> list[str]:
        """argv, run inside host's namespace (``ip netns exec`` replaces itself with it: same pid)."""
        return ["ip", "netns", "exec", self.namespace(host), *argv]

    def run(
        self, host: str, *argv: str, check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        return _run(self.command(host, argv), check=check, timeout=timeout)

    def nft(self, command: str) -> str:
        """Run nft in the switch: command is its words, separated by spaces."""
        return _run(["ip", "netns", "exec", self.switch, "nft", *command.split()]).stdout

    # -- faults ------------------------------------------------------------

    @staticmethod
    def _chain(host: Host) -> str:
        return f"host_{host.name}"

    def cut(self, host: str) -> None:
        """Drop every packet to and from host (silently: the ends hear nothing)."""
        self.nft(f"add rule inet {TABLE} {self._chain(self.hosts[host])} counter drop")

    def lose(self, host: str, percent: int) -> None:
        """Drop each packet to or from host with probability percent / 100."""
        if not 0 < percent < 100:
            raise ValueError(f"percent must be between 1 and 99, got {percent}")
        chain = self._chain(self.hosts[host])
        self.nft(f"add rule inet {TABLE} {chain} counter")
        self.nft(f"add rule inet {TABLE} {chain} numgen random mod 100 < {percent} counter drop")

    def counters(self, host: str) -> Counters:
        """The counters of host's fault rules now: packets seen (by a rule that drops nothing) and dropped."""
        listing = json.loads(self.nft(f"-j list chain inet {TABLE} {self._chain(self.hosts[host])}"))
        seen = dropped = 0
        for item in listing.get("nftables", []):
            rule = item.get("rule")
            if rule is None:
                continue
            expressions: list[dict[str, Any]] = rule.get("expr", [])
            counted = sum(int(e["counter"]["packets"]) for e in expressions if "counter" in e)
            if any("drop" in e for e in expressions):
                dropped += counted
            else:
                seen += counted
        return Counters(seen=seen, dropped=dropped)

    def heal(self, host: str) -> tuple[Counters, float]:
        """End host's faults (cut or loss): what their rules counted, and when they went (epoch seconds,
        taken just before: packets may flow from then on, not before)."""
        counted = self.counters(host)
        healed = time.time()
        self.nft(f"flush chain inet {TABLE} {self._chain(self.hosts[host])}")
        return counted, healed

    def delay(self, host: str, on: bool) -> dict[str, Any]:
        """Turn host's delay line on or off; off returns what it did ({} when turned on)."""
        line = self.hosts[host].delay_line
        if line is None:
            raise ValueError(f"host {host} has no delay line (add_host(..., delay=...))")
        line.send_signal(signal.SIGUSR1 if on else signal.SIGUSR2)
        if on:
            return {}
        assert line.stdout is not None
        report = line.stdout.readline()
        if not report:
            raise RuntimeError(f"the delay line of {host} is gone: {line.poll()}")
        done: dict[str, Any] = json.loads(report)
        return done

    def sockets(self, host: str, peer: str) -> int:
        """TCP sockets host's kernel holds with address peer, in any state."""
        listed = self.run(host, "ss", "-Htn", "state", "all", "dst", peer).stdout
        return len([line for line in listed.splitlines() if line.strip()])

    def destroy_sockets(self, host: str, peer: str) -> int:
        """Forget, in host's kernel, every TCP socket to or from address peer (``ss -K``); how many."""
        found = self.sockets(host, peer)
        self.run(host, "ss", "-HK", "-tn", "state", "all", "dst", peer)
        return found

    def established(self, host: str, peer: str, port: int) -> int:
        """TCP connections host holds established to peer:port (what its kernel believes)."""
        listed = self.run(host, "ss", "-Htn", "state", "established", "dst", f"{peer}:{port}").stdout
        return len([line for line in listed.splitlines() if line.strip()])

    def connect_time(self, host: str, address: str, port: int, samples: int = 5) -> float:
        """The median time, in seconds, of a TCP connect from host to address:port (one round trip)."""
        script = (
            "import socket, statistics, time\n"
            "times = []\n"
            f"for _ in range({samples}):\n"
            "    began = time.perf_counter()\n"
            f"    with socket.create_connection(({address!r}, {port}), timeout=10):\n"
            "        times.append(time.perf_counter() - began)\n"
            "print(statistics.median(times))\n"
        )
        return float(self.run(host, sys.executable, "-c", script).stdout)

    # -- the end -----------------------------------------------------------

    def close(self) -> None:
        """Kill what runs in the namespaces, end the delay lines, delete the namespaces.  Idempotent."""
        for host in self.hosts.values():
            if host.delay_line is not None and host.delay_line.poll() is None:
                host.delay_line.terminate()
                try:
                    host.delay_line.wait(5)
                except subprocess.TimeoutExpired:
                    host.delay_line.kill()
                    host.delay_line.wait()
        for namespace in reversed(self._made):
            _kill_inside(namespace)
            _run(["ip", "netns", "del", namespace], check=False)
        self._made.clear()

    def __enter__(self) -> Network:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class NamespacedPostgres(ThrowawayPostgres):
    """A ThrowawayPostgres inside host's namespace of network, listening on the host's address.

    dsn() reaches it through its unix socket (in its folder: outside every
    network, so the harness is never cut off); tcp_dsn() through the
    network, from the other hosts.
    """

    def __init__(
        self,
        network: Network,
        host: str,
        *,
        port: int = 5432,
        settings: Mapping[str, str] | None = None,
        fast: bool = True,
    ) -> None:
        self.network = network
        self.netns_host = network.hosts[host]
        super().__init__(
            port=port,
            settings={"listen_addresses": f"'{self.netns_host.address}'", **(settings or {})},
            fast=fast,
        )
        self.host = str(self.base_dir)  # dsn(): the unix socket

    def init(self) -> None:
        """initdb, then let the hosts of the network in (trust, as initdb's loopback lines)."""
        super().init()
        with (self.data_dir / "pg_hba.conf").open("a") as hba:
            hba.write(f"# the test hosts of netns.Network\nhost all all {self.network.subnet}.0.0/16 trust\n")

    def tcp_dsn(self, user: str, dbname: str = "postgres") -> str:
        """The conninfo of the server at its address on the network, for user."""
        return make_conninfo(host=self.netns_host.address, port=self.port, user=user, dbname=dbname)

    def run(
        self, *args: str, check: bool = True, stdin: IO[str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a server program inside the namespace, as the server's account (setpriv), in its folder."""
        account = server_user()
        drop = (
            ["setpriv", f"--reuid={account.pw_uid}", f"--regid={account.pw_gid}", "--clear-groups", "--"]
            if account is not None
            else []
        )
        result = subprocess.run(
            self.network.command(self.netns_host.name, [*drop, *args]),
            check=False,
            stdin=stdin,
            cwd=self.base_dir,
            capture_output=True,
            text=True,
            env={**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"},
        )
        if check and result.returncode != 0:
            who = f" as {account.pw_name}" if account else ""
            raise RuntimeError(
                f"{Path(args[0]).name}{who} in {self.netns_host.namespace} failed:\n"
                f"{result.stdout}{result.stderr}"
            )
        return result
