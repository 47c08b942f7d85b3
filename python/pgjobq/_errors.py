"""pgjobq's exceptions, and the mapping from the extension's SQLSTATEs to them."""

from __future__ import annotations

import psycopg

__all__ = [
    "ConfigurationError",
    "Error",
    "IncompatibleExtension",
    "InvalidArgument",
    "JobNotFound",
    "LeaseLost",
    "PayloadTooLarge",
    "PermissionDenied",
    "first_line",
    "translate",
]


class Error(Exception):
    """Root of every exception pgjobq raises.

    When the error comes from the database, ``sqlstate`` holds its SQLSTATE and
    ``__cause__`` the original psycopg exception.
    """

    sqlstate: str | None = None

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        if sqlstate is not None:
            self.sqlstate = sqlstate


class InvalidArgument(Error, ValueError):
    """An argument was refused: NULL (22004), out of its domain (22023) or unserialisable."""


class PayloadTooLarge(InvalidArgument):
    """A payload exceeds the extension's limit of 1 MiB (54000)."""


class LeaseLost(Error):
    """The lease presented is not the job's current one (JQ001): the job was reaped,
    finished or claimed again, and this worker's result must be discarded."""


class JobNotFound(Error, LookupError):
    """No job has that id (JQ002)."""


class PermissionDenied(Error):
    """The role lacks a privilege on the jobq schema, its table or a function (42501)."""


class ConfigurationError(Error, ValueError):
    """A worker or CLI setting makes no sense (raised before touching the database)."""


class IncompatibleExtension(Error):
    """The database has no pgjobq extension, or a version of it this package does not support."""


_BY_SQLSTATE: dict[str, type[Error]] = {
    "22004": InvalidArgument,  # null_value_not_allowed
    "22023": InvalidArgument,  # invalid_parameter_value
    "22P02": InvalidArgument,  # invalid_text_representation (e.g. bad JSON)
    "22P05": InvalidArgument,  # untranslatable_character (\u0000 in jsonb)
    "23514": InvalidArgument,  # check_violation on jobq.jobs
    "54000": PayloadTooLarge,  # program_limit_exceeded
    "JQ001": LeaseLost,
    "JQ002": JobNotFound,
    "42501": PermissionDenied,  # insufficient_privilege
}


def translate(exc: psycopg.Error) -> Error | None:
    """The pgjobq exception for a database error, or None when pgjobq has none for it."""
    sqlstate = exc.sqlstate
    if sqlstate is None or sqlstate not in _BY_SQLSTATE:
        return None
    diag = exc.diag
    message = diag.message_primary or str(exc)
    if diag.message_detail:
        message = f"{message} ({diag.message_detail})"
    error = _BY_SQLSTATE[sqlstate](message, sqlstate=sqlstate)
    error.__cause__ = exc
    return error


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty), for logs."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
