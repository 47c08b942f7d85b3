"""The version of this package, and the versions of the pgjobq extension it works with.

A leaf: it imports nothing of pgjobq."""

from __future__ import annotations

from importlib import metadata

__all__ = ["PACKAGE_VERSION", "SUPPORTED_EXTENSION_VERSIONS"]

# The extension versions whose SQL functions this package calls, as they are
# in those versions, oldest first.  A release supports the extension version it
# was made for and the one before it, so that workers keep working while the
# database is upgraded (the workers pick their statements by the version they
# find when they connect: pgjobq._worker.steps.FEATURES).  A new extension
# version is added here once the client has been tested against it.
SUPPORTED_EXTENSION_VERSIONS: tuple[str, ...] = ("0.10.0", "0.11.0")

try:
    PACKAGE_VERSION = metadata.version("pgjobq-py")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    PACKAGE_VERSION = "0+unknown"
