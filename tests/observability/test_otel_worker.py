"""A traced application end to end: the client's send spans and real workers' process spans form one trace.

The application runs in a process of its own (traced_app.py), with the
OpenTelemetry SDK as the global tracer provider, as an application sets it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers.processes import process_env

APP = Path(__file__).with_name("traced_app.py")


def test_real_workers_process_spans_join_the_traces_of_the_enqueues(dsn: str) -> None:
    done = subprocess.run(
        [sys.executable, str(APP), dsn],
        env=process_env(dsn),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    spans = found["spans"]
    [request] = [s for s in spans if s["name"] == "request"]
    sends = {s["span_id"]: s for s in spans if s["name"].startswith("send ")}
    processes = [s for s in spans if s["name"].startswith("process ")]

    assert {job["status"] for job in found["jobs"].values()} == {"done", "failed"}
    assert found["jobs"]["bad"]["status"] == "failed"
    assert len(sends) == 3 and len(processes) == 3
    for send in sends.values():
        assert send["kind"] == "PRODUCER"
        assert send["parent_id"] == request["span_id"]
    for outcome, status, worker in (
        ("ok", "UNSET", "traced-worker"),
        ("bad", "ERROR", "traced-worker"),
        ("async", "UNSET", "traced-async-worker"),
    ):
        carried = found["jobs"][outcome]["headers"]["traceparent"]
        _, trace_id, span_id, _ = carried.split("-")
        assert span_id in sends and trace_id == request["trace_id"]
        [process] = [p for p in processes if p["parent_id"] == span_id]
        assert process["name"] == sends[span_id]["name"].replace("send", "process", 1)
        assert process["trace_id"] == request["trace_id"]
        assert process["kind"] == "CONSUMER"
        assert process["links"] == [span_id]
        assert process["attributes"]["messaging.client.id"] == worker
        assert process["status"] == status
    [failed] = [p for p in processes if p["status"] == "ERROR"]
    assert failed["events"] == ["exception"]
    assert failed["attributes"]["error.type"] == "builtins.RuntimeError"
