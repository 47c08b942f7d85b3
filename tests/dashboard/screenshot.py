"""Regenerates docs/dashboard.png: the queues page with real jobs, in headless Chromium.

    .venv/bin/python tests/dashboard/screenshot.py [--out docs/dashboard.png] [--seconds 40]

A throwaway PostgreSQL, four queues (one with limits, one paused, one that
fails a job in eight), Worker threads working them for --seconds while more
jobs arrive, the dashboard sampling every second; then the screenshot, and
everything is removed.  Needs /usr/bin/chromium (tools/ensure-deps).
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import psycopg

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))  # run as a program: dashboard.conftest, dashboard.test_browser

from throwaway_pg import ThrowawayPostgres  # noqa: E402

import pgjobq  # noqa: E402
from pgjobq import Job, Worker, WorkerSettings  # noqa: E402
from pgjobq.dashboard import create_app  # noqa: E402

from dashboard.conftest import RunningServer  # noqa: E402
from dashboard.test_browser import ARGS, CHROMIUM  # noqa: E402


def handle(job: Job) -> None:
    time.sleep(random.uniform(0.005, 0.03))
    if job.queue == "webhooks" and random.random() < 0.125:
        raise RuntimeError("HTTP 503 from https://hooks.example.com/orders: upstream unavailable")


def feed(dsn: str, until: float) -> None:
    """Enqueues in waves, so that depth and throughput move."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        wave = 0
        while time.monotonic() < until:
            wave += 1
            size = 120 if wave % 4 else 600
            pgjobq.enqueue_many(conn, "emails", ({"to": f"user{n}@example.com"} for n in range(size)))
            pgjobq.enqueue_many(conn, "webhooks", ({"order": n} for n in range(size // 2)), max_attempts=2)
            pgjobq.enqueue_many(conn, "thumbnails", ({"image": n} for n in range(40)))
            time.sleep(2.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "dashboard.png")
    parser.add_argument("--seconds", type=float, default=40.0)
    args = parser.parse_args()
    if not CHROMIUM.exists():
        print(f"{CHROMIUM} is absent: run tools/ensure-deps", file=sys.stderr)
        return 1
    from playwright.sync_api import sync_playwright

    with ThrowawayPostgres(fast=True) as server:
        dsn = server.dsn()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pgjobq")
            pgjobq.configure_queue(conn, "thumbnails", concurrency=2, rate_limit=20)
            pgjobq.configure_queue(conn, "reports", timeout=timedelta(minutes=5))
            pgjobq.enqueue_many(conn, "reports", ({"month": m} for m in range(1, 13)))
            pgjobq.pause(conn, "reports")
            conn.execute("SELECT jobq.schedule('nightly_digest', 'emails', cron => '0 3 * * *')")
        workers = [
            Worker(dsn, handle, WorkerSettings(queue=["emails", "webhooks", "thumbnails", "reports"],
                                               concurrency=4, poll_interval=0.2))
            for _ in range(2)
        ]  # fmt: skip
        threads = [threading.Thread(target=w.run, kwargs={"install_signal_handlers": False}) for w in workers]
        dashboard = RunningServer(create_app(dsn, allow_actions=True, sample_seconds=1.0))
        dashboard.start()
        until = time.monotonic() + args.seconds
        feeder = threading.Thread(target=feed, args=(dsn, until))
        feeder.start()
        time.sleep(3)  # a backlog first
        for thread in threads:
            thread.start()
        try:
            feeder.join()
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 900}, device_scale_factor=1)
                page.goto(dashboard.url + "/")
                page.wait_for_selector("#chart-done .uplot")
                time.sleep(1.5)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(args.out), full_page=True)
                browser.close()
        finally:
            for worker in workers:
                worker.stop()
            for thread in threads:
                thread.join(30)
            dashboard.stop()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
