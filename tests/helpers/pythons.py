"""The Python interpreters of this machine that pgjobq supports (3.10 to 3.13)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["SUPPORTED", "SYSTEM_PYTHON", "interpreter"]

SUPPORTED = ("3.10", "3.11", "3.12", "3.13")  # python/pyproject.toml: requires-python >= 3.10
SYSTEM_PYTHON = Path("/usr/bin/python3")  # the distribution's own, as a new Debian or Ubuntu machine has it


def interpreter(version: str) -> Path | None:
    """A python of that version: python3.X on PATH, else the newest of pyenv's installs of it."""
    found = shutil.which(f"python{version}")
    if found is not None and "shims" not in Path(found).parts:
        return Path(found)
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    installs = sorted(
        (pyenv_root / "versions").glob(f"{version}.*"),
        key=lambda path: [int(part) if part.isdigit() else 0 for part in path.name.split(".")],
    )
    for install in reversed(installs):
        if (install / "bin" / "python").exists():
            return install / "bin" / "python"
    return None
