"""Signals: SIGTERM and SIGINT ask a worker to stop gracefully; a second one gives up the jobs in hand.

The sync Worker installs Python signal handlers (on the main thread only);
the AsyncWorker installs them on its event loop (loop.add_signal_handler,
where the platform has it).  Both put the previous handlers back when the
worker stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
from collections.abc import Callable
from types import FrameType

__all__ = ["STOP_SIGNALS", "install", "install_on_loop"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def install(on_signal: Callable[[int, FrameType | None], None]) -> Callable[[], None]:
    """Install on_signal for the stop signals (on the main thread only); return what puts the old back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {signum: signal.signal(signum, on_signal) for signum in STOP_SIGNALS}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    return restore


def install_on_loop(loop: asyncio.AbstractEventLoop, on_signal: Callable[[int], None]) -> Callable[[], None]:
    """Install on_signal(signum) for the stop signals on loop; return what removes them again.

    Nothing is installed off the main thread, or where the loop cannot take
    signal handlers (Windows' proactor loop).
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    installed: list[int] = []
    for signum in STOP_SIGNALS:
        try:
            loop.add_signal_handler(signum, on_signal, signum)
        except (NotImplementedError, RuntimeError):
            break
        installed.append(signum)

    def restore() -> None:
        for signum in installed:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signum)

    return restore
