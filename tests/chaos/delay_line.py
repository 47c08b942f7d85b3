"""A delay line: the link of one test host made of two TUN devices, pumped by this process.

    python tests/chaos/delay_line.py --near NS:IF --far NS:IF --delay-ms 200 --jitter-ms 50

It creates the TUN device IF in the network namespace NS for each end (the
near one in the host's namespace, the far one in the switch's), prints
``ready`` once both exist, and from then on copies every packet read from
one device to the other.  While the delay is on (SIGUSR1; SIGUSR2 turns it
off and prints one JSON line of what it did), a packet leaving the near end
is held for a time drawn per packet, uniformly from delay ± jitter, and
packets leave in the order they came (a packet never overtakes the one
before it, as on one real link).  The far end's packets pass straight: this
is ``tc qdisc add dev IF root netem delay 200ms 50ms`` on the host's own
interface, the round trip 200 ± 50 ms longer.  SIGTERM ends it; the devices
go with it.  The caller gives the devices their addresses and routes.

Why not netem: the kernels this runs on may have no ``sch_netem`` (the
machine this was written on has none, and no modules to load: tc answers
"Specified qdisc kind is unknown").  Why not NFQUEUE (iptables ``-j
NFQUEUE`` with a userspace program holding each verdict): it needs
iptables' legacy or compat targets and a netlink binding from outside the
standard library, where TUN needs only ``/dev/net/tun`` (CONFIG_TUN) and
Python.  The delay is real at the packet level: TCP in the host sees the
longer round trip (its RTT estimate, retransmission timer and keepalives
all run on it), which a delay in the client library would not give.

A TUN device is made in the network namespace of the thread that creates
it (``TUNSETIFF``), and its file descriptor keeps working from any
namespace: so this process enters one namespace (``setns``, through
ctypes: Python has os.setns only from 3.12), creates the near device,
enters the other and creates the far one, then pumps both from one asyncio
loop.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import fcntl
import json
import os
import random
import signal
import struct
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Direction", "enter_namespace", "main", "open_tun"]

CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
NETNS_DIR = Path("/run/netns")
MTU = 65535  # read size: larger than any packet the devices can carry


def enter_namespace(name: str) -> None:
    """Move this thread into the named network namespace (``ip netns add`` made it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(NETNS_DIR / name, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into network namespace {name}: {os.strerror(errno)}")
    finally:
        os.close(fd)


def open_tun(name: str) -> int:
    """Create the TUN device name (raw IP packets, no packet information) in this thread's network
    namespace; its file descriptor, non-blocking."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI))
    except OSError:
        os.close(fd)
        raise
    os.set_blocking(fd, False)
    return fd


@dataclass
class Direction:
    """One direction of the link: packets read from source go to target, in order, each once due."""

    source: int
    target: int
    delay: tuple[float, float] | None  # (low, high) seconds while the delay is on; None: never delayed
    rng: random.Random
    waiting: deque[tuple[float, bytes]] = field(default_factory=deque)
    last_due: float = 0.0
    delayed: int = 0  # packets held while the delay was on (since the last report)
    held_for: float = 0.0  # the time they were held, in all
    longest: float = 0.0
    passed: int = 0
    lost_writes: int = 0  # packets the target device refused (its queue full, or it went down)

    def due(self, now: float, delaying: bool) -> float:
        """When a packet read now may leave: after its drawn delay, never before the one before it."""
        wait = self.rng.uniform(*self.delay) if delaying and self.delay is not None else 0.0
        due = max(now + wait, self.last_due)
        self.last_due = due
        if wait:
            self.delayed += 1
            self.held_for += due - now
            self.longest = max(self.longest, due - now)
        return due

    def report(self) -> dict[str, float]:
        done = {
            "delayed": self.delayed,
            "mean_ms": round(1000 * self.held_for / self.delayed, 1) if self.delayed else 0.0,
            "max_ms": round(1000 * self.longest, 1),
            "passed": self.passed,
            "lost_writes": self.lost_writes,
        }
        self.delayed, self.held_for, self.longest = 0, 0.0, 0.0
        return done


class Line:
    """The pump: one asyncio loop reading both devices and writing each packet to the other once due."""

    def __init__(self, near: int, far: int, delay: tuple[float, float], seed: int) -> None:
        rng = random.Random(seed)
        self.outbound = Direction(near, far, delay, rng)  # from the host: delayed, as netem on its device
        self.inbound = Direction(far, near, None, rng)
        self.delaying = False
        self.loop = asyncio.new_event_loop()
        self.done = asyncio.Event()

    def _read(self, direction: Direction) -> None:
        while True:
            try:
                packet = os.read(direction.source, MTU)
            except BlockingIOError:
                return
            except OSError:
                return  # the device went down under us: the caller is tearing the link down
            due = direction.due(self.loop.time(), self.delaying)
            if not direction.waiting and due <= self.loop.time():
                self._write(direction, packet)
                continue
            direction.waiting.append((due, packet))
            if len(direction.waiting) == 1:
                self.loop.call_at(due, self._flush, direction)

    def _flush(self, direction: Direction) -> None:
        now = self.loop.time()
        while direction.waiting and direction.waiting[0][0] <= now:
            self._write(direction, direction.waiting.popleft()[1])
        if direction.waiting:
            self.loop.call_at(direction.waiting[0][0], self._flush, direction)

    def _write(self, direction: Direction, packet: bytes) -> None:
        try:
            os.write(direction.target, packet)
            direction.passed += 1
        except OSError:  # a full device queue drops the packet, as a real link would
            direction.lost_writes += 1

    def _switch(self, on: bool) -> None:
        self.delaying = on
        if not on:
            print(json.dumps({"at": time.time(), **self.outbound.report()}), flush=True)

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        for direction in (self.outbound, self.inbound):
            self.loop.add_reader(direction.source, self._read, direction)
        self.loop.add_signal_handler(signal.SIGUSR1, self._switch, True)
        self.loop.add_signal_handler(signal.SIGUSR2, self._switch, False)
        self.loop.add_signal_handler(signal.SIGTERM, self.done.set)
        self.loop.add_signal_handler(signal.SIGINT, self.done.set)
        print("ready", flush=True)
        try:
            self.loop.run_until_complete(self.done.wait())
        finally:
            self.loop.close()


def _end(value: str) -> tuple[str, str]:
    namespace, _, device = value.partition(":")
    if not namespace or not device or len(device) > 15:
        raise argparse.ArgumentTypeError(
            f"expected NAMESPACE:DEVICE (a device name of 1-15 chars), got {value}"
        )
    return namespace, device


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--near", type=_end, required=True, help="NS:DEVICE of the host's end (delayed)")
    parser.add_argument("--far", type=_end, required=True, help="NS:DEVICE of the other end")
    parser.add_argument("--delay-ms", type=float, default=200.0, help="mean delay of a packet from the host")
    parser.add_argument("--jitter-ms", type=float, default=50.0, help="the delay is drawn from delay ± this")
    parser.add_argument("--seed", type=int, default=1, help="seed of the delays drawn")
    args = parser.parse_args(argv)
    if not 0 <= args.jitter_ms <= args.delay_ms:
        parser.error("--jitter-ms must be between 0 and --delay-ms")
    enter_namespace(args.near[0])
    near = open_tun(args.near[1])
    enter_namespace(args.far[0])
    far = open_tun(args.far[1])
    low, high = args.delay_ms - args.jitter_ms, args.delay_ms + args.jitter_ms
    line = Line(near, far, (low / 1000, high / 1000), args.seed)
    line.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
