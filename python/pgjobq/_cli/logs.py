"""The worker's log on stderr: lines of text, or one JSON object per line (pgjobq worker --log-format)."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any

from pgjobq._job import CURRENT_JOB, log_fields

__all__ = ["LOG_FORMATS", "JsonFormatter", "configure_logging"]

LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# What a line about a job carries (pgjobq._job.log_fields), in this order after the message.
_JOB_FIELDS = ("job_id", "task", "queue", "attempt")


class JsonFormatter(logging.Formatter):
    """A log record as one JSON object on one line.

    Its fields: time (ISO 8601, UTC), level, logger, message; then, for a line about a job, job_id,
    task, queue and attempt, each when it has a value: those the record was given
    (``extra=pgjobq._job.log_fields(job)``), else those of the job whose handler is running where the
    line was logged (``pgjobq._job.CURRENT_JOB``); then exc_info and stack_info, as text, when the
    record has them.
    """

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if hasattr(record, "job_id"):
            about = {name: getattr(record, name, None) for name in _JOB_FIELDS}
        else:
            job = CURRENT_JOB.get()
            about = {} if job is None else log_fields(job)
        line.update((name, value) for name, value in about.items() if value is not None)
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc_info"] = record.exc_text
        if record.stack_info:
            line["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(level: str, log_format: str) -> None:
    """Log at level and above to stderr, as text lines or as JSON objects (log_format, one of LOG_FORMATS).

    In JSON, Python's warnings go through the log too, so that every line on stderr is an object.
    """
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log_format must be one of {', '.join(LOG_FORMATS)}, got {log_format!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler])
    if log_format == "json":
        logging.captureWarnings(True)
